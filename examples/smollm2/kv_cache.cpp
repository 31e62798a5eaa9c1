// kv_cache.cpp - runtime cache specification -> compiled configuration (see kv_cache.hpp).
#include "kv_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "gguf.hpp"
#include "kv_cache_configs.hpp"
#include "kv_cache_mixed.hpp"

namespace smollm2 {

std::string layer_list(const std::vector<int>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(layers[i]) + (j > i ? "-" + std::to_string(layers[j]) : "");
    i = j + 1;
  }
  return out;
}

void parse_mix(CacheSpec& spec, const std::string& value) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == value.size())
    throw Error("--mix expects FORMAT:LAYERS, e.g. k4v2:3-9 or int4:3,5,18 (got '" + value + "')");
  CacheSpec::LayerMix m;
  m.format = value.substr(0, colon);
  std::vector<int>& layers = m.layers;
  auto number = [&](const std::string& t) {
    char* end = nullptr;
    const long x = std::strtol(t.c_str(), &end, 10);
    if (t.empty() || *end || x < 0 || x > 4096) throw Error("--mix: '" + t + "' is not a layer number");
    return int(x);
  };
  std::stringstream ss(value.substr(colon + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t dash = item.find('-');
    const int lo = number(item.substr(0, dash)), hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) throw Error("--mix: empty layer range '" + item + "'");
    for (int l = lo; l <= hi; ++l) layers.push_back(l);
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  for (int l : layers)
    if (&spec.format_of(l) != &spec.format)
      throw Error("--mix: layer " + std::to_string(l) + " is already in another --mix");
  config_key(spec.with_format(m.format));  // an unknown format is refused here
  spec.mix.push_back(std::move(m));
}

std::string describe_mix(const CacheSpec& spec) {
  std::string out;
  for (const CacheSpec::LayerMix& m : spec.mix) out += " mix=" + m.format + ":" + layer_list(m.layers);
  return out;
}

LayerFormats layer_formats(const CacheSpec& spec, int layers) {
  for (const CacheSpec::LayerMix& m : spec.mix)
    for (int l : m.layers)
      if (l >= layers) throw Error("kv cache: --mix names layer " + std::to_string(l) + "; the model has " + std::to_string(layers));
  LayerFormats out;
  for (int l = 0; l < layers; ++l) {
    const std::string& f = spec.format_of(l);
    const size_t i = size_t(std::find(out.formats.begin(), out.formats.end(), f) - out.formats.begin());
    if (i == out.formats.size()) out.formats.push_back(f);
    out.of_layer.push_back(int(i));
  }
  return out;
}

std::string describe(const CacheSpec& s) {
  std::string out = s.format;
  if (s.grouped())
    out += " Gk=" + std::to_string(s.gk) + " Gv=" + std::to_string(s.gv);
  out += " R=" + std::to_string(s.residual) + " P=" + std::to_string(s.page);
  if (s.sinks) out += " sinks=" + std::to_string(s.sinks);
  if (s.key_clip == kvq::KeyClip::kMse) out += " kclip=mse" + std::string(s.key_clip_from ? "(" + std::to_string(s.key_clip_from) + "..)" : "");
  if (s.rotate) out += " rotate" + std::string(s.rotate_draw ? "(draw " + std::to_string(s.rotate_draw) + ")" : "");
  out += describe_mix(s);
  out += describe(s.ablation);
  out += s.path == AttentionPath::kDecode ? " (decode attention)" : " (kvq::reference::attention)";
  return out;
}

kvq::ConfigKey config_key(const CacheSpec& s) {
  kvq::QuantDesc k, v;
  if (s.format == "none") {
    k = v = kvq::kDescNone;
  } else if (s.format == "int8") {
    k = v = kvq::kDescInt8;
  } else if (s.format == "int4") {
    k = kvq::desc_int4(s.gk);
    v = kvq::desc_int4(s.gv);
  } else if (s.format == "int2") {
    k = kvq::desc_int2(s.gk);
    v = kvq::desc_int2(s.gv);
  } else if (s.format == "k4v2") {
    k = kvq::desc_int4(s.gk);
    v = kvq::desc_int2(s.gv);
  } else if (s.format == "k2v4") {
    k = kvq::desc_int2(s.gk);
    v = kvq::desc_int4(s.gv);
  } else if (s.format == "k3v2") {
    k = kvq::desc_int3(s.gk);
    v = kvq::desc_int2(s.gv);
  } else {
    throw Error("unknown cache format '" + s.format + "' (none, int8, int4, int2, k4v2, k2v4, k3v2)");
  }
  return kvq::ConfigKey{kvq::DType::kBF16, 64, s.page, k, v};
}

std::string compiled_configurations() {
  return "bf16, head dim 64, page 16/32/64; formats none, int8, and int4/int2/k4v2 with Gk in {16,32,64} (Gk <= page) "
         "and Gv in {16,32,64}; k2v4 with page 64 and Gk = Gv = 32; k3v2 (CPU only) with page 64 and Gk / Gv 64 / 64, 64 / 32 "
         "or 32 / 64; R any multiple of the page";
}

void KvCache::check_room(const std::vector<SeqRows>& items) const {
  for (const SeqRows& it : items) {
    if (it.seq < 0 || it.seq >= max_seqs()) throw Error("kv cache: sequence " + std::to_string(it.seq) + " out of range");
    if (length(it.seq) + it.count > capacity())
      throw Error("kv cache: sequence " + std::to_string(it.seq) + " would hold " + std::to_string(length(it.seq) + it.count) +
                  " tokens, more than the cache was sized for (" + std::to_string(capacity()) + " tokens per sequence)");
  }
}

HeadKv KvCache::head_kv(int, int, int) const {
  throw Error("kv cache: the K/V mirrors exist only on the CPU backend's decode attention path");
}

std::unique_ptr<KvCache> make_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int head_dim, int max_seqs,
                                       int64_t max_len) {
  if (head_dim != 64) throw Error("kv cache: head dim " + std::to_string(head_dim) + " is not compiled (this example: 64)");
  if (spec.residual < 0 || spec.page <= 0 || spec.residual % spec.page != 0)
    throw Error("kv cache: the hot window R=" + std::to_string(spec.residual) + " must be a non-negative multiple of the page size " +
                std::to_string(spec.page));
  if (max_seqs <= 0 || max_len <= 0) throw Error("kv cache: empty cache requested");
  if (spec.mixed()) return make_mixed_kv_cache(spec, layers, kv_heads, max_seqs, max_len);
  const kvq::ConfigKey key = config_key(spec);
  std::unique_ptr<KvCache> out;
  if (spec.page == 16) out = make_kv_cache_p16(spec, layers, kv_heads, max_seqs, max_len);
  else if (spec.page == 32) out = make_kv_cache_p32(spec, layers, kv_heads, max_seqs, max_len);
  else if (spec.page == 64) out = make_kv_cache_p64(spec, layers, kv_heads, max_seqs, max_len);
  if (!out)
    throw Error("kv cache: configuration '" + describe(spec) + "' is not compiled into this binary (" +
                kvq::to_string(kvq::Status::kNotInstantiated) + "); compiled: " + compiled_configurations());
  (void)key;
  return out;
}

std::vector<AttentionCall> attention_calls(AttentionPath path, int residual, int page, const std::vector<SeqRows>& items,
                                           const std::vector<int64_t>& len, const std::vector<int64_t>& cold) {
  std::vector<AttentionCall> calls;
  for (const SeqRows& it : items) {
    const int64_t L = len[size_t(it.seq)], end = L + it.count;
    int64_t C = cold[size_t(it.seq)];
    if (path == AttentionPath::kReference) {
      if (it.count > 0)
        calls.push_back(AttentionCall{it.seq, it.row, it.count, int32_t(L), int32_t(C),
                                      int32_t(kvq::cold_after(end, C, residual, page))});
      continue;
    }
    // Query p of decoding sees tokens below b(p) = min(p, cold_after(p + 1)) quantized. A call for
    // queries [a, e) gives every query min(a, cold_after(e)) as that boundary: extend e while
    // both agree with b(a).
    const int64_t C0 = C;
    auto boundary = [&](int64_t p) { return std::min<int64_t>(p, kvq::cold_after(p + 1, C0, residual, page)); };
    for (int64_t a = L; a < end;) {
      const int64_t b = boundary(a);
      int64_t e = a + 1;
      while (e < end && boundary(e) == b && std::min<int64_t>(a, kvq::cold_after(e + 1, C0, residual, page)) == b) ++e;
      const int64_t after = kvq::cold_after(e, C, residual, page);
      calls.push_back(AttentionCall{it.seq, int(it.row + (a - L)), int(e - a), int32_t(a), int32_t(C), int32_t(after)});
      C = after;
      a = e;
    }
  }
  return calls;
}

}  // namespace smollm2

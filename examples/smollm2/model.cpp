// model.cpp - Llama forward on the CPU (see model.hpp): RMSNorm, RoPE (GGUF's interleaved pairs),
// GQA attention through the kvq cache, SwiGLU; fp32 math; Q/K/V rounded to bf16 for the cache.
#include "model.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "gemm.hpp"
#include "rope.hpp"

namespace smollm2 {

LlamaConfig read_llama_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama")
    throw Error("model: " + f.path() + ": architecture '" + arch + "' is not supported (this example runs Llama-architecture models such as SmolLM2)");
  LlamaConfig c;
  c.n_layer = int(f.get_int("llama.block_count"));
  c.d_model = int(f.get_int("llama.embedding_length"));
  c.n_head = int(f.get_int("llama.attention.head_count"));
  c.n_kv_head = f.has("llama.attention.head_count_kv") ? int(f.get_int("llama.attention.head_count_kv")) : c.n_head;
  c.d_ff = int(f.get_int("llama.feed_forward_length"));
  c.context = f.get_int("llama.context_length");
  if (f.has("llama.rope.freq_base")) c.rope_base = float(f.get_float("llama.rope.freq_base"));
  c.rms_eps = float(f.get_float("llama.attention.layer_norm_rms_epsilon"));
  if (c.n_layer <= 0 || c.d_model <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.d_ff <= 0 || c.context <= 0 ||
      c.d_model % c.n_head != 0 || c.n_head % c.n_kv_head != 0)
    throw Error("model: " + f.path() + ": inconsistent Llama hyperparameters");
  c.head_dim = c.d_model / c.n_head;
  if (c.head_dim != 64)
    throw Error("model: " + f.path() + ": head dim " + std::to_string(c.head_dim) + " is not supported (this example compiles kvq for head dim 64)");
  if (c.n_head / c.n_kv_head > 4) throw Error("model: " + f.path() + ": GQA groups larger than 4 are not supported");
  if (f.has("llama.rope.dimension_count") && f.get_int("llama.rope.dimension_count") != c.head_dim)
    throw Error("model: " + f.path() + ": partial RoPE is not supported");
  if (f.has("llama.rope.scaling.type") && f.get_string("llama.rope.scaling.type") != "none")
    throw Error("model: " + f.path() + ": RoPE scaling '" + f.get_string("llama.rope.scaling.type") + "' is not supported");
  if (c.d_model % 16 != 0 || c.d_ff % 16 != 0) throw Error("model: " + f.path() + ": dimensions must be multiples of 16");
  const GgufTensor* emb = f.find("token_embd.weight");
  if (!emb || emb->dims.size() != 2 || emb->dims[0] != c.d_model) throw Error("model: " + f.path() + ": missing or malformed token_embd.weight");
  c.vocab = int(emb->dims[1]);
  if (c.vocab % 16 != 0) throw Error("model: " + f.path() + ": vocabulary size must be a multiple of 16");
  c.tied_output = f.find("output.weight") == nullptr;
  return c;
}

void check_llama_tensors(const GgufFile& f, const LlamaConfig& cfg) {
  const int d = cfg.d_model, kvd = cfg.n_kv_head * cfg.head_dim, ff = cfg.d_ff;
  std::vector<std::pair<std::string, std::vector<int64_t>>> want = {{"token_embd.weight", {d, cfg.vocab}},
                                                                     {"output_norm.weight", {d}}};
  if (!cfg.tied_output) want.push_back({"output.weight", {d, cfg.vocab}});
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (auto& t : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"attn_norm.weight", {d}}, {"ffn_norm.weight", {d}}, {"attn_q.weight", {d, d}}, {"attn_k.weight", {d, kvd}},
             {"attn_v.weight", {d, kvd}}, {"attn_output.weight", {d, d}}, {"ffn_gate.weight", {d, ff}},
             {"ffn_up.weight", {d, ff}}, {"ffn_down.weight", {ff, d}}})
      want.push_back({b + t.first, t.second});
  }
  for (const auto& w : want) {
    const GgufTensor* t = f.find(w.first);
    if (!t) throw Error("model: " + f.path() + ": missing tensor '" + w.first + "'");
    if (!ggml_type_supported(t->type))
      throw Error("model: " + f.path() + ": tensor '" + w.first + "' has unsupported type " + ggml_type_name(t->type));
    if (t->dims != w.second) throw Error("model: " + f.path() + ": tensor '" + w.first + "' has an unexpected shape");
  }
}

namespace {
std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

LayerWeights read_layer_weights(const GgufFile& f, int layer) {
  const std::string b = "blk." + std::to_string(layer) + ".";
  LayerWeights w;
  w.attn_norm = f.dequantize(b + "attn_norm.weight");
  w.ffn_norm = f.dequantize(b + "ffn_norm.weight");
  w.qkv = concat(concat(f.dequantize(b + "attn_q.weight"), f.dequantize(b + "attn_k.weight")), f.dequantize(b + "attn_v.weight"));
  w.wo = f.dequantize(b + "attn_output.weight");
  w.gate_up = concat(f.dequantize(b + "ffn_gate.weight"), f.dequantize(b + "ffn_up.weight"));
  w.down = f.dequantize(b + "ffn_down.weight");
  return w;
}

std::vector<float> rope_table(const LlamaConfig& cfg, int64_t positions) {
  const size_t per = size_t(cfg.head_dim);  // head_dim / 2 pairs of (cos, sin)
  std::vector<float> t(size_t(positions) * per);
  for (int64_t p = 0; p < positions; ++p) rope_angles(cfg.rope_base, cfg.head_dim, p, t.data() + size_t(p) * per);
  return t;
}

std::vector<SeqRows> batch_rows(const std::vector<SeqTokens>& batch, int vocab) {
  std::vector<SeqRows> items;
  std::set<int> seen;
  int rows = 0;
  for (const SeqTokens& s : batch) {
    if (!seen.insert(s.seq).second) throw Error("forward: sequence " + std::to_string(s.seq) + " listed twice");
    for (int32_t t : s.tokens)
      if (t < 0 || t >= vocab) throw Error("forward: token id " + std::to_string(t) + " out of range");
    if (s.tokens.empty()) continue;
    items.push_back(SeqRows{s.seq, rows, int(s.tokens.size())});
    rows += int(s.tokens.size());
  }
  return items;
}

void Model::set_step_observer(StepObserver*) { throw Error("diagnostics run on the CPU backend only (--device cpu)"); }

namespace {

struct Layer {
  std::vector<float> attn_norm, ffn_norm;
  PackedMatrix qkv, wo, gate_up, down;
};


class CpuModel final : public Model {
 public:
  CpuModel(const GgufFile& f, const CacheSpec& spec, int max_seqs, int64_t max_len, int threads, bool bf16_attention_out)
      : cfg_(read_llama_config(f)), pool_(threads), bf16_attention_out_(bf16_attention_out), rotate_(spec.rotate) {
    for (int l = 0; l < cfg_.n_layer; ++l) rotation_seed_.push_back(spec.rotation_seed(l));
    const int d = cfg_.d_model, kvd = cfg_.n_kv_head * cfg_.head_dim, ff = cfg_.d_ff;
    check_llama_tensors(f, cfg_);  // before the slow part
    embed_ = f.dequantize("token_embd.weight");
    out_norm_ = f.dequantize("output_norm.weight");
    lm_head_ = PackedMatrix(cfg_.tied_output ? embed_.data() : f.dequantize("output.weight").data(), cfg_.vocab, d);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const LayerWeights w = read_layer_weights(f, l);
      Layer L;
      L.attn_norm = w.attn_norm;
      L.ffn_norm = w.ffn_norm;
      L.qkv = PackedMatrix(w.qkv.data(), d + 2 * kvd, d);
      L.wo = PackedMatrix(w.wo.data(), d, d);
      L.gate_up = PackedMatrix(w.gate_up.data(), 2 * ff, d);
      L.down = PackedMatrix(w.down.data(), d, ff);
      layers_.push_back(std::move(L));
    }
    CacheSpec cache_spec = spec;
    cache_spec.ablation.rope_base = cfg_.rope_base;  // for --sim-k-rope pre
    cache_ = make_kv_cache(cache_spec, cfg_.n_layer, cfg_.n_kv_head, cfg_.head_dim, max_seqs, max_len);
    rope_ = rope_table(cfg_, cache_->capacity());
  }

  const LlamaConfig& config() const override { return cfg_; }
  const KvCache& cache() const override { return *cache_; }
  int64_t length(int seq) const override { return cache_->length(seq); }
  void reset(int seq) override { cache_->reset(seq); }
  SeqState save(int seq) const override { return cache_->save(seq); }
  void restore(const SeqState& s) override { cache_->restore(s); }
  void set_step_observer(StepObserver* observer) override {
    if (cache_->spec().path != AttentionPath::kDecode) throw Error("diagnostics need --attention decode");
    if (cache_->spec().mixed()) throw Error("diagnostics: not with --mix (the per-layer statistics assume one format)");
    cache_->set_observer(observer);
  }

  void forward(const std::vector<SeqTokens>& batch, bool all_logits, std::vector<float>& logits) override {
    const int d = cfg_.d_model, hd = cfg_.head_dim, kvd = cfg_.n_kv_head * hd, ff = cfg_.d_ff;
    const std::vector<SeqRows> items = batch_rows(batch, cfg_.vocab);
    const int rows = items.empty() ? 0 : items.back().row + items.back().count;
    cache_->check_room(items);
    std::vector<int64_t> pos(static_cast<size_t>(rows));
    FloatBuffer x = alloc_floats(size_t(rows) * d), h = alloc_floats(size_t(rows) * d);
    FloatBuffer qkv = alloc_floats(size_t(rows) * (d + 2 * kvd)), att = alloc_floats(size_t(rows) * d);
    FloatBuffer gu = alloc_floats(size_t(rows) * 2 * ff), act = alloc_floats(size_t(rows) * ff);
    std::vector<kvq::bf16> q16(size_t(rows) * d), k16(size_t(rows) * kvd), v16(size_t(rows) * kvd);
    {
      size_t r = 0;
      for (const SeqTokens& s : batch)
        for (size_t i = 0; i < s.tokens.size(); ++i, ++r) {
          pos[r] = length(s.seq) + int64_t(i);
          std::copy_n(embed_.data() + size_t(s.tokens[i]) * d, d, x.get() + r * size_t(d));
        }
    }
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const Layer& L = layers_[size_t(l)];
      rmsnorm(x.get(), rows, L.attn_norm.data(), h.get());
      matmul(pool_, h.get(), rows, d, L.qkv, qkv.get(), d + 2 * kvd);
      for (int r = 0; r < rows; ++r) {
        float* row = qkv.get() + size_t(r) * size_t(d + 2 * kvd);
        for (int head = 0; head < cfg_.n_head + cfg_.n_kv_head; ++head) rope(row + head * hd, pos[size_t(r)]);
        for (int head = 0; rotate_ && head < cfg_.n_head + 2 * cfg_.n_kv_head; ++head)
          kvq::rotate<64>(row + head * hd, rotation_seed_[size_t(l)]);
        for (int e = 0; e < d; ++e) q16[size_t(r) * d + size_t(e)] = kvq::bf16::from_float(row[e]);
        for (int e = 0; e < kvd; ++e) {
          k16[size_t(r) * kvd + size_t(e)] = kvq::bf16::from_float(row[d + e]);
          v16[size_t(r) * kvd + size_t(e)] = kvq::bf16::from_float(row[d + kvd + e]);
        }
      }
      cache_->step(pool_, l, items, cfg_.n_head, q16.data(), k16.data(), v16.data(), att.get());
      for (size_t hrow = 0; rotate_ && hrow < size_t(rows) * size_t(cfg_.n_head); ++hrow)
        kvq::unrotate<64>(att.get() + hrow * size_t(hd), rotation_seed_[size_t(l)]);
      if (bf16_attention_out_)
        for (size_t e = 0; e < size_t(rows) * size_t(d); ++e) att[e] = kvq::bf16::from_float(att[e]).to_float();
      matmul(pool_, att.get(), rows, d, L.wo, x.get(), d, /*accumulate*/ true);
      rmsnorm(x.get(), rows, L.ffn_norm.data(), h.get());
      matmul(pool_, h.get(), rows, d, L.gate_up, gu.get(), 2 * ff);
      for (int r = 0; r < rows; ++r)
        for (int e = 0; e < ff; ++e) {
          const float g = gu[size_t(r) * 2 * ff + size_t(e)], u = gu[size_t(r) * 2 * ff + size_t(ff + e)];
          act[size_t(r) * ff + size_t(e)] = g / (1.0f + std::exp(-g)) * u;
        }
      matmul(pool_, act.get(), rows, ff, L.down, x.get(), d, /*accumulate*/ true);
    }
    // Logits of the rows asked for.
    std::vector<int> pick;
    if (all_logits) {
      for (int r = 0; r < rows; ++r) pick.push_back(r);
    } else {
      for (const SeqRows& it : items) pick.push_back(it.row + it.count - 1);
    }
    FloatBuffer sel = alloc_floats(pick.size() * size_t(d));
    for (size_t i = 0; i < pick.size(); ++i) std::copy_n(x.get() + size_t(pick[i]) * d, d, sel.get() + i * size_t(d));
    rmsnorm(sel.get(), int(pick.size()), out_norm_.data(), sel.get());
    logits.assign(pick.size() * size_t(cfg_.vocab), 0.0f);
    matmul(pool_, sel.get(), int(pick.size()), d, lm_head_, logits.data(), cfg_.vocab);
  }

 private:
  void rmsnorm(const float* in, int rows, const float* w, float* out) const {
    const int d = cfg_.d_model;
    for (int r = 0; r < rows; ++r) {
      const float* a = in + size_t(r) * d;
      double ss = 0.0;
      for (int e = 0; e < d; ++e) ss += double(a[e]) * a[e];
      const float scale = float(1.0 / std::sqrt(ss / d + double(cfg_.rms_eps)));
      float* o = out + size_t(r) * d;
      for (int e = 0; e < d; ++e) o[e] = a[e] * scale * w[e];
    }
  }
  void rope(float* v, int64_t p) const {
    rope_rotate(v, rope_.data() + size_t(p) * size_t(cfg_.head_dim), cfg_.head_dim / 2);
  }

  LlamaConfig cfg_;
  ThreadPool pool_;
  bool bf16_attention_out_, rotate_;
  std::vector<uint64_t> rotation_seed_;  // per layer (CacheSpec::rotation_seed)
  std::vector<float> embed_, out_norm_, rope_;
  PackedMatrix lm_head_;
  std::vector<Layer> layers_;
  std::unique_ptr<KvCache> cache_;
};

}  // namespace

std::unique_ptr<Model> make_cpu_model(const GgufFile& file, const CacheSpec& spec, int max_seqs, int64_t max_len, int threads,
                                      bool bf16_attention_out) {
  return std::make_unique<CpuModel>(file, spec, max_seqs, max_len, threads, bf16_attention_out);
}

}  // namespace smollm2

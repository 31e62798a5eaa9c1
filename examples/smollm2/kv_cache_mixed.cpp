// kv_cache_mixed.cpp - a CPU KV cache with a format per layer (CacheSpec::mix_layers): one
// single-format cache per format present, each holding its own layers under local indices
// 0..n-1 (stepped in order, as KvCache::step requires), and a router from model layers to them.
#include "kv_cache_mixed.hpp"

#include "gguf.hpp"

namespace smollm2 {

namespace {

class MixedKvCache final : public KvCache {
 public:
  MixedKvCache(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len) : spec_(spec) {
    // Part 0: the layers in `format`, part 1: those in `mix_format` (a part may be empty).
    std::vector<int> count(2, 0);
    for (int l = 0; l < layers; ++l) {
      const int part = spec.format_of(l) == spec.format ? 0 : 1;
      route_.push_back(Route{part, count[size_t(part)]++});
    }
    for (int part = 0; part < 2; ++part) {
      if (count[size_t(part)] == 0) {
        parts_.emplace_back();
        continue;
      }
      CacheSpec s = spec;
      s.format = part == 0 ? spec.format : spec.mix_format;
      s.mix_format.clear();
      s.mix_layers.clear();
      parts_.push_back(make_kv_cache(s, count[size_t(part)], kv_heads, 64, max_seqs, max_len));
    }
    first_ = parts_[0] ? parts_[0].get() : parts_[1].get();
  }

  const CacheSpec& spec() const override { return spec_; }
  int64_t length(int seq) const override { return first_->length(seq); }
  int64_t capacity() const override { return first_->capacity(); }
  int max_seqs() const override { return first_->max_seqs(); }
  void reset(int seq) override {
    for (auto& p : parts_)
      if (p) p->reset(seq);
  }
  void step(ThreadPool& pool, int layer, const std::vector<SeqRows>& items, int num_q_heads, const kvq::bf16* q,
            const kvq::bf16* k, const kvq::bf16* v, float* out) override {
    const Route& r = route(layer);
    parts_[size_t(r.part)]->step(pool, r.local, items, num_q_heads, q, k, v, out);
  }
  SeqState save(int seq) const override {
    SeqState parts[2];
    for (int p = 0; p < 2; ++p)
      if (parts_[size_t(p)]) parts[p] = parts_[size_t(p)]->save(seq);
    SeqState s;
    s.seq = seq;
    for (const Route& r : route_) {
      const SeqState& from = parts[r.part];
      s.len.push_back(from.len[size_t(r.local)]);
      s.cold.push_back(from.cold[size_t(r.local)]);
      s.hot.push_back(from.hot[size_t(r.local)]);
    }
    return s;
  }
  void restore(const SeqState& s) override {
    if (s.len.size() != route_.size() || s.cold.size() != route_.size() || s.hot.size() != route_.size())
      throw Error("kv cache: bad saved state");
    SeqState parts[2];
    for (SeqState& p : parts) p.seq = s.seq;
    for (size_t l = 0; l < route_.size(); ++l) {
      SeqState& to = parts[route_[l].part];
      to.len.push_back(s.len[l]);
      to.cold.push_back(s.cold[l]);
      to.hot.push_back(s.hot[l]);
    }
    for (int p = 0; p < 2; ++p)
      if (parts_[size_t(p)]) parts_[size_t(p)]->restore(parts[p]);
  }
  size_t cold_bytes_per_token() const override {
    size_t sum = 0;
    for (const auto& p : parts_)
      if (p) sum += p->cold_bytes_per_token();
    return sum;
  }
  HeadKv head_kv(int layer, int seq, int h) const override {
    const Route& r = route(layer);
    return parts_[size_t(r.part)]->head_kv(r.local, seq, h);
  }

 private:
  struct Route {
    int part, local;
  };
  const Route& route(int layer) const {
    if (layer < 0 || size_t(layer) >= route_.size()) throw Error("kv cache: layer " + std::to_string(layer) + " out of range");
    return route_[size_t(layer)];
  }

  CacheSpec spec_;
  std::vector<Route> route_;                   // per model layer
  std::vector<std::unique_ptr<KvCache>> parts_;  // [0] `format`, [1] `mix_format`; null when empty
  KvCache* first_ = nullptr;
};

}  // namespace

std::unique_ptr<KvCache> make_mixed_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len) {
  if (spec.key_clip == kvq::KeyClip::kMse && spec.key_clip_from != 0)
    throw Error("kv cache: --key-clip-from with --mix is not supported (layer numbers differ inside each format's part)");
  for (int l : spec.mix_layers)
    if (l >= layers) throw Error("kv cache: --mix names layer " + std::to_string(l) + "; the model has " + std::to_string(layers));
  return std::make_unique<MixedKvCache>(spec, layers, kv_heads, max_seqs, max_len);
}

}  // namespace smollm2

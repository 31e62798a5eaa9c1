// kv_cache_mixed.cpp - a CPU KV cache with a format per layer (CacheSpec::mix): one
// single-format cache per format present, each holding its own layers under local indices
// 0..n-1 (stepped in order, as KvCache::step requires), and a router from model layers to them.
#include "kv_cache_mixed.hpp"

#include "gguf.hpp"

namespace smollm2 {

namespace {

class MixedKvCache final : public KvCache {
 public:
  MixedKvCache(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len) : spec_(spec) {
    // A part numbers its layers from 0, so the simulations' layer ranges and rotation seeds would
    // name the wrong layers.
    if (!spec.ablation.is_default()) throw Error("kv cache: the simulated variants (" + describe(spec.ablation) + " ) are not for --mix");
    // One part per format in use; each holds its layers in order.
    const LayerFormats lf = layer_formats(spec, layers);
    std::vector<int> count(lf.formats.size(), 0);
    for (int part : lf.of_layer) route_.push_back(Route{part, count[size_t(part)]++});
    for (size_t part = 0; part < lf.formats.size(); ++part) {
      parts_.push_back(make_kv_cache(spec.with_format(lf.formats[part]), count[part], kv_heads, 64, max_seqs, max_len));
    }
  }

  const CacheSpec& spec() const override { return spec_; }
  int64_t length(int seq) const override { return parts_[0]->length(seq); }
  int64_t capacity() const override { return parts_[0]->capacity(); }
  int max_seqs() const override { return parts_[0]->max_seqs(); }
  void reset(int seq) override {
    for (auto& p : parts_) p->reset(seq);
  }
  void step(ThreadPool& pool, int layer, const std::vector<SeqRows>& items, int num_q_heads, const kvq::bf16* q,
            const kvq::bf16* k, const kvq::bf16* v, float* out) override {
    const Route& r = route(layer);
    parts_[size_t(r.part)]->step(pool, r.local, items, num_q_heads, q, k, v, out);
  }
  SeqState save(int seq) const override {
    std::vector<SeqState> parts;
    for (const auto& p : parts_) parts.push_back(p->save(seq));
    SeqState s;
    s.seq = seq;
    for (const Route& r : route_) {
      const SeqState& from = parts[size_t(r.part)];
      s.len.push_back(from.len[size_t(r.local)]);
      s.cold.push_back(from.cold[size_t(r.local)]);
      s.hot.push_back(from.hot[size_t(r.local)]);
    }
    return s;
  }
  void restore(const SeqState& s) override {
    if (s.len.size() != route_.size() || s.cold.size() != route_.size() || s.hot.size() != route_.size())
      throw Error("kv cache: bad saved state");
    std::vector<SeqState> parts(parts_.size());
    for (SeqState& p : parts) p.seq = s.seq;
    for (size_t l = 0; l < route_.size(); ++l) {
      SeqState& to = parts[size_t(route_[l].part)];
      to.len.push_back(s.len[l]);
      to.cold.push_back(s.cold[l]);
      to.hot.push_back(s.hot[l]);
    }
    for (size_t p = 0; p < parts_.size(); ++p) parts_[p]->restore(parts[p]);
  }
  size_t cold_bytes_per_token() const override {
    size_t sum = 0;
    for (const auto& p : parts_) sum += p->cold_bytes_per_token();
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
  std::vector<std::unique_ptr<KvCache>> parts_;  // one per format in use
};

}  // namespace

std::unique_ptr<KvCache> make_mixed_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len) {
  if (spec.key_clip == kvq::KeyClip::kMse && spec.key_clip_from != 0)
    throw Error("kv cache: --key-clip-from with --mix is not supported (layer numbers differ inside each format's part)");
  return std::make_unique<MixedKvCache>(spec, layers, kv_heads, max_seqs, max_len);
}

}  // namespace smollm2

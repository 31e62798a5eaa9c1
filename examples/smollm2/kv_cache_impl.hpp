// kv_cache_impl.hpp - KvCacheImpl<Cfg>: the KvCache of one compiled kvq configuration (included
// by the kv_cache_p*.cpp translation units, one per page size).
#pragma once

#include <algorithm>
#include <cstring>

#include "attention_cpu.hpp"
#include "gguf.hpp"
#include "kv_cache.hpp"

namespace smollm2 {

template <class Cfg>
class KvCacheImpl final : public KvCache {
  static constexpr int D = Cfg::head_dim, P = Cfg::page;
  static_assert(D == kHeadDim, "the example's attention kernel is written for head dim 64");
  using Host = kvq::reference::HostCache<Cfg>;

 public:
  KvCacheImpl(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len)
      : spec_(spec), kv_heads_(kv_heads), max_seqs_(max_seqs), pages_per_seq_(int((max_len + P - 1) / P)),
        cap_(int64_t(pages_per_seq_) * P) {
    for (int l = 0; l < layers; ++l)
      layers_.emplace_back(kv_heads, int64_t(max_seqs) * pages_per_seq_, max_seqs, spec.residual, pages_per_seq_, max_seqs);
    for (size_t l = 0; l < layers_.size(); ++l) {
      Host& c = layers_[l];
      const kvq::Status st =
          c.status() == kvq::Status::kSuccess ? c.set_encoding(spec.sinks, spec.key_clip_of(int(l))) : c.status();
      if (st != kvq::Status::kSuccess)
        throw Error("kv cache: " + describe(spec) + ": " + kvq::to_string(st) +
                    (spec.sinks ? " (sinks: 0 .. 16, below the page, quantized formats only)" : ""));
    }
    if (spec.sinks > 0 && Cfg::k_quant::kind == kvq::QuantKind::kNone && Cfg::v_quant::kind == kvq::QuantKind::kNone)
      throw Error("kv cache: sinks apply to quantized formats only");
    if (!spec.ablation.is_default() && spec.path != AttentionPath::kDecode)
      throw Error("kv cache: the simulated variants (" + describe(spec.ablation) + " ) need --attention decode");
    if (spec.path == AttentionPath::kDecode) {
      const size_t per = size_t(cap_ + 16) * D;
      mirrors_.resize(size_t(layers) * size_t(max_seqs) * size_t(kv_heads));
      for (Mirror& m : mirrors_) {
        m.kq_t = alloc_floats(per);
        m.kr_t = alloc_floats(per);
        m.vq = alloc_floats(per);
        m.vr = alloc_floats(per);
      }
    }
  }

  const CacheSpec& spec() const override { return spec_; }
  int64_t length(int seq) const override { return layers_[0].len[size_t(seq)]; }
  int64_t capacity() const override { return cap_; }
  int max_seqs() const override { return max_seqs_; }
  size_t cold_bytes_per_token() const override { return layers_.size() * size_t(kv_heads_) * Cfg::record_bytes / P; }

  void reset(int seq) override {
    for (Host& c : layers_) c.release(seq);  // pages back to the pool, lengths 0
  }

  void step(ThreadPool& pool, int layer, const std::vector<SeqRows>& items, int num_q_heads, const kvq::bf16* q,
            const kvq::bf16* k, const kvq::bf16* v, float* out) override {
    Host& c = layers_[size_t(layer)];
    for (const SeqRows& it : items)
      if (!c.reserve(it.seq, it.count)) throw Error("kv cache: out of pages for sequence " + std::to_string(it.seq));
    const int group = num_q_heads / kv_heads_;
    const int tasks = int(items.size()) * kv_heads_;
    if (spec_.path == AttentionPath::kReference) {
      pool.parallel_for(int(items.size()), [&](int i) {
        const SeqRows& it = items[size_t(i)];
        attention_reference(c, it, num_q_heads, q, k, v, out);
        append(c, it, k, v);
      });
    } else {
      std::vector<int64_t> cold_before(items.size());
      pool.parallel_for(int(items.size()), [&](int i) {
        const SeqRows& it = items[size_t(i)];
        cold_before[size_t(i)] = c.cold_len[size_t(it.seq)];
        store_raw(c, layer, it, k, v);
        const int64_t cold_old = c.cold_len[size_t(it.seq)];
        append(c, it, k, v);
        decode_cold(c, layer, it.seq, cold_old, c.cold_len[size_t(it.seq)]);
      });
      pool.parallel_for(tasks, [&](int t) {
        const SeqRows& it = items[size_t(t / kv_heads_)];
        const int h = t % kv_heads_;
        const int64_t len = c.len[size_t(it.seq)] - it.count;  // append already committed
        std::vector<int64_t> cold(size_t(it.count));
        // Query len+i sees what decoding step len+i would: the cache after appending its own
        // token (cold below cold_after(len+i+1)), except its own K/V, which is always fresh.
        for (int i = 0; i < it.count; ++i)
          cold[size_t(i)] = decode_cold_boundary(len + i, cold_before[size_t(t / kv_heads_)], spec_.residual, P);
        std::vector<float> qs(size_t(it.count) * size_t(group) * D);
        for (int i = 0; i < it.count; ++i)
          for (int e = 0; e < group * D; ++e)
            qs[size_t(i) * size_t(group) * D + size_t(e)] =
                0.125f * q[(size_t(it.row + i) * size_t(num_q_heads) + size_t(h * group)) * D + size_t(e)].to_float();
        attend_head(mirror(layer, it.seq, h), len, it.count, cold.data(), group, qs.data(), int64_t(group) * D,
                    out + (size_t(it.row) * size_t(num_q_heads) + size_t(h * group)) * D, int64_t(num_q_heads) * D);
      });
      if (observer_) observer_->on_step(*this, pool, layer, items, cold_before, num_q_heads, q);
    }
  }

  HeadKv head_kv(int layer, int seq, int h) const override {
    if (spec_.path != AttentionPath::kDecode) throw Error("kv cache: head_kv needs --attention decode");
    if (layer < 0 || size_t(layer) >= layers_.size() || seq < 0 || seq >= max_seqs_ || h < 0 || h >= kv_heads_)
      throw Error("kv cache: head_kv out of range");
    const Mirror& m = mirrors_[(size_t(layer) * size_t(max_seqs_) + size_t(seq)) * size_t(kv_heads_) + size_t(h)];
    const Host& c = layers_[size_t(layer)];
    return HeadKv{m.kr_t.get(), m.kq_t.get(), m.vr.get(), m.vq.get(), c.len[size_t(seq)], c.cold_len[size_t(seq)]};
  }

  SeqState save(int seq) const override {
    SeqState s;
    s.seq = seq;
    const size_t ring = size_t(spec_.residual + P) * size_t(kv_heads_) * D;
    for (const Host& c : layers_) {
      s.len.push_back(c.len[size_t(seq)]);
      s.cold.push_back(c.cold_len[size_t(seq)]);
      std::vector<uint16_t> hot(2 * ring);
      std::memcpy(hot.data(), c.hot_k.data() + size_t(seq) * ring, ring * 2);
      std::memcpy(hot.data() + ring, c.hot_v.data() + size_t(seq) * ring, ring * 2);
      s.hot.push_back(std::move(hot));
    }
    return s;
  }

  void restore(const SeqState& s) override {
    const size_t ring = size_t(spec_.residual + P) * size_t(kv_heads_) * D;
    if (s.seq < 0 || s.seq >= max_seqs_ || s.len.size() != layers_.size()) throw Error("kv cache: bad saved state");
    for (size_t l = 0; l < layers_.size(); ++l) {
      Host& c = layers_[l];
      // Cold pages below the saved cold length were never rewritten since (pages are immutable
      // and the block table row is kept): only lengths and the ring need to come back.
      if (c.cold_len[size_t(s.seq)] < s.cold[l] || c.len[size_t(s.seq)] < s.len[l])
        throw Error("kv cache: restore of a sequence that was reset or rewound past the saved point");
      c.len[size_t(s.seq)] = s.len[l];
      c.cold_len[size_t(s.seq)] = s.cold[l];
      std::memcpy(c.hot_k.data() + size_t(s.seq) * ring, s.hot[l].data(), ring * 2);
      std::memcpy(c.hot_v.data() + size_t(s.seq) * ring, s.hot[l].data() + ring, ring * 2);
    }
  }

 private:
  struct Mirror {
    FloatBuffer kq_t, kr_t, vq, vr;
  };

  HeadMirror mirror(int layer, int seq, int h) {
    Mirror& m = mirrors_[(size_t(layer) * size_t(max_seqs_) + size_t(seq)) * size_t(kv_heads_) + size_t(h)];
    return HeadMirror{m.kq_t.get(), m.kr_t.get(), m.vq.get(), m.vr.get(), cap_ + 16};
  }

  // A batch-of-one view of sequence `seq` (its block-table row and hot slot).
  kvq::CacheView<kvq::bf16> seq_view(Host& c, int seq) {
    kvq::CacheView<kvq::bf16> v = c.view();
    v.block_table += size_t(seq) * size_t(pages_per_seq_);
    v.hot_slot += seq;
    return v;
  }

  void append(Host& c, const SeqRows& it, const kvq::bf16* k, const kvq::bf16* v) {
    const int32_t cu[2] = {0, it.count};
    kvq::AppendBatch<kvq::bf16> a;
    a.batch = 1;
    a.lengths = kvq::SeqLengths{c.len.data() + it.seq, c.cold_len.data() + it.seq};
    a.cu_new = cu;
    a.new_k = k + size_t(it.row) * size_t(kv_heads_) * D;
    a.new_v = v + size_t(it.row) * size_t(kv_heads_) * D;
    uint32_t flags = 0;
    const kvq::Status st = kvq::reference::append<Cfg>(seq_view(c, it.seq), a, &flags);
    if (st != kvq::Status::kSuccess) throw Error(std::string("kvq::reference::append failed: ") + kvq::to_string(st));
    c.commit(it.seq, it.count);
  }

  void attention_reference(Host& c, const SeqRows& it, int num_q_heads, const kvq::bf16* q, const kvq::bf16* k,
                           const kvq::bf16* v, float* out) {
    const int32_t cu[2] = {0, it.count};
    kvq::AttentionBatch<kvq::bf16> a;
    a.batch = 1;
    a.num_q_heads = num_q_heads;
    a.lengths = kvq::SeqLengths{c.len.data() + it.seq, c.cold_len.data() + it.seq};
    a.cu_q = cu;
    a.q = q + size_t(it.row) * size_t(num_q_heads) * D;
    a.new_k = k + size_t(it.row) * size_t(kv_heads_) * D;
    a.new_v = v + size_t(it.row) * size_t(kv_heads_) * D;
    a.softmax_scale = 0.125f;
    const kvq::Status st =
        kvq::reference::attention<Cfg>(seq_view(c, it.seq), a, out + size_t(it.row) * size_t(num_q_heads) * D);
    if (st != kvq::Status::kSuccess) throw Error(std::string("kvq::reference::attention failed: ") + kvq::to_string(st));
  }

  // The new tokens' unquantized K/V into the mirrors (positions len .. len + count - 1).
  void store_raw(const Host& c, int layer, const SeqRows& it, const kvq::bf16* k, const kvq::bf16* v) {
    const int64_t len = c.len[size_t(it.seq)];
    for (int h = 0; h < kv_heads_; ++h) {
      HeadMirror m = mirror(layer, it.seq, h);
      for (int i = 0; i < it.count; ++i) {
        const size_t src = (size_t(it.row + i) * size_t(kv_heads_) + size_t(h)) * D;
        for (int d = 0; d < D; ++d) {
          m.kr_t[k_tile_index(len + i, d)] = k[src + size_t(d)].to_float();
          m.vr[size_t(len + i) * D + size_t(d)] = v[src + size_t(d)].to_float();
        }
      }
    }
  }

  // Pages [from, to) just turned cold: what the cache now yields for them, from its bytes (or,
  // under an ablation, what the simulated variant would yield: ablation.hpp).
  void decode_cold(Host& c, int layer, int seq, int64_t from, int64_t to) {
    for (int64_t p = from / P; p < to / P; ++p) {
      const int32_t page = c.block_table[size_t(seq) * size_t(pages_per_seq_) + size_t(p)];
      for (int h = 0; h < kv_heads_; ++h) {
        const uint8_t* rec = c.cold.data() + kvq::record_offset(page, h, kv_heads_, Cfg::record_bytes);
        HeadMirror m = mirror(layer, seq, h);
        for (int t = 0; t < P; ++t)
          for (int d = 0; d < D; ++d) {
            m.kq_t[k_tile_index(p * P + t, d)] = kvq::decode_record_element<Cfg, kvq::Role::kKey>(rec, t, d);
            m.vq[size_t(p * P + t) * D + size_t(d)] = kvq::decode_record_element<Cfg, kvq::Role::kValue>(rec, t, d);
          }
        // Sink tokens are never read from the record: the cache keeps them in sink_k / sink_v.
        for (int t = 0; p == 0 && t < c.view().sinks; ++t) {
          const size_t o = kvq::sink_offset(seq, t, h, c.view().sinks, kv_heads_, D);
          for (int d = 0; d < D; ++d) {
            m.kq_t[k_tile_index(t, d)] = c.sink_k[o + size_t(d)].to_float();
            m.vq[size_t(t) * D + size_t(d)] = c.sink_v[o + size_t(d)].to_float();
          }
        }
        if (!spec_.ablation.is_default()) simulate(layer, m, p);
      }
    }
  }

  // Side by side: the library's bytes (asym formats re-quantized by the variant), or bf16 for a
  // side or layer the ablation leaves unquantized.
  void simulate(int layer, const HeadMirror& m, int64_t p) {
    const Ablation& a = spec_.ablation;
    using KQ = typename Cfg::k_quant;
    using VQ = typename Cfg::v_quant;
    std::vector<float> kr(size_t(P) * D), vr(kr.size()), ks(kr.size()), vs(kr.size());
    for (int t = 0; t < P; ++t)
      for (int d = 0; d < D; ++d) {
        kr[size_t(t) * D + size_t(d)] = m.kr_t[k_tile_index(p * P + t, d)];
        vr[size_t(t) * D + size_t(d)] = m.vr[size_t(p * P + t) * D + size_t(d)];
      }
    const bool layer_on = a.quantizes_layer(layer);
    const bool k_on = layer_on && a.quant_k, v_on = layer_on && a.quant_v;
    const bool k_sim = KQ::kind == kvq::QuantKind::kAsym, v_sim = VQ::kind == kvq::QuantKind::kAsym;
    const uint64_t seed = spec_.rotation_seed(layer);
    for (int t = 0; a.k_pre_rope && t < P; ++t) key_to_pre_rope(a, p * P + t, spec_.rotate, seed, kr.data() + size_t(t) * D);
    simulate_page(a, k_on && k_sim ? KQ::bits : 0, k_sim ? KQ::group : 1, v_on && v_sim ? VQ::bits : 0,
                  v_sim ? VQ::group : 1, P, p * P, kr.data(), vr.data(), ks.data(), vs.data());
    for (int t = 0; a.k_pre_rope && t < P; ++t) key_from_pre_rope(a, p * P + t, spec_.rotate, seed, ks.data() + size_t(t) * D);
    for (int t = 0; t < P; ++t)
      for (int d = 0; d < D; ++d) {
        if (!k_on || k_sim) m.kq_t[k_tile_index(p * P + t, d)] = ks[size_t(t) * D + size_t(d)];
        if (!v_on || v_sim) m.vq[size_t(p * P + t) * D + size_t(d)] = vs[size_t(t) * D + size_t(d)];
      }
  }

  CacheSpec spec_;
  int kv_heads_, max_seqs_, pages_per_seq_;
  int64_t cap_;
  std::vector<Host> layers_;
  std::vector<Mirror> mirrors_;
};

}  // namespace smollm2

// kvq/reference/attention.hpp - host reference of the attention contract (attention/batch.hpp).
//
// fp32 throughout: logits, softmax (max-subtracted) and the weighted sum of values are
// accumulated in float; cold tokens are dequantized to fp32 (not rounded to the model dtype).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kvq/attention/batch.hpp"
#include "kvq/attention/token_source.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/reference/append.hpp"
#include "kvq/reference/dequantize.hpp"

KVQ_NAMESPACE_BEGIN
namespace reference {

// The records of sequence s's pages turning cold in this step (all KV heads), quantized with the
// append's encoder into `transition`: [pages][num_kv_heads][record_bytes], from page s.cold / P.
template <class Cfg>
void transition_records(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a,
                        const SeqAttention& s, std::vector<uint8_t>& transition) {
  constexpr int P = Cfg::page;
  const int64_t first = s.cold / P, end = transition_pages_end(s, P);
  transition.assign(size_t(end > first ? end - first : 0) * v.num_kv_heads * Cfg::record_bytes, 0);
  uint32_t ignored = 0;  // sanitisation is reported by the append that stores the page
  for (int64_t p = first; p < end; ++p)
    encode_page<Cfg>(v, a.new_k, a.new_v, as_append(s), p,
                     transition.data() + record_offset(p - first, 0, v.num_kv_heads, Cfg::record_bytes), ignored);
}

// K and V of sequence b (resolved as s) and KV head h as the attention sees them:
// [len + q_len][head_dim] fp32. Token sources come from token_ref (attention/token_source.hpp), the
// function the kernels use; `transition` holds the sequence's transition_records.
template <class Cfg>
void attention_operands(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a,
                        const SeqAttention& s, const std::vector<uint8_t>& transition, int b, int h,
                        std::vector<float>& k, std::vector<float>& val) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  const int64_t tokens = s.len + s.q_len;
  k.assign(size_t(tokens) * D, 0.0f);
  val.assign(size_t(tokens) * D, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    const TokenRef<typename Cfg::dtype> ref = token_ref(v, a, b, h, s, t, P, D, Cfg::record_bytes, transition.data());
    for (int c = 0; c < D; ++c) {
      k[size_t(t) * D + c] = token_key<Cfg>(ref, c);
      val[size_t(t) * D + c] = token_value<Cfg>(ref, c);
    }
  }
}

// The same for one (sequence, KV head) on its own: resolves the sequence and quantizes its
// transition pages first.
template <class Cfg>
void attention_operands(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a,
                        int b, int h, std::vector<float>& k, std::vector<float>& val) {
  const SeqAttention s = resolve_attention(v, a, b, Cfg::page);
  std::vector<uint8_t> transition;
  transition_records<Cfg>(v, a, s, transition);
  attention_operands<Cfg>(v, a, s, transition, b, h, k, val);
}

// out: [cu_q[batch]][num_q_heads][head_dim] fp32.
template <class Cfg>
Status attention(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a, float* out) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  Status st = check_view(v, P);
  if (st == Status::kSuccess) st = check_sinks<Cfg>(v);
  if (st == Status::kSuccess) st = check_attention_args(a, v.num_kv_heads);
  if (st != Status::kSuccess) return st;
  if (a.batch > 0 && !out) return Status::kNullPointer;
  std::vector<SeqAttention> seqs(size_t(a.batch));  // batch >= 0: check_attention_args
  for (int b = 0; b < a.batch; ++b) {
    const SeqAttention& s = seqs[size_t(b)] = resolve_attention(v, a, b, P);
    if (s.status != Status::kSuccess) return s.status;
    const int64_t pool_end = std::min(s.cold, s.len);
    for (int64_t p = 0; p < (pool_end + P - 1) / P; ++p) {
      const int32_t page = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
      if (!page_in_pool(v, page)) return Status::kInvalidPageId;
    }
  }
  const int group = a.num_q_heads / v.num_kv_heads;
  std::vector<float> k, val, logits;
  std::vector<uint8_t> transition;
  for (int b = 0; b < a.batch; ++b) {
    const SeqAttention& seq = seqs[size_t(b)];
    const int64_t len = seq.len, q0 = seq.q0, q_len = seq.q_len;
    transition_records<Cfg>(v, a, seq, transition);  // once for all KV heads
    for (int h = 0; h < v.num_kv_heads; ++h) {
      attention_operands<Cfg>(v, a, seq, transition, b, h, k, val);
      for (int g = 0; g < group; ++g) {
        const int hq = h * group + g;
        for (int64_t i = 0; i < q_len; ++i) {
          const auto* q = a.q + (size_t(q0 + i) * a.num_q_heads + hq) * D;
          const int64_t keys = len + i + 1;
          logits.resize(size_t(keys));
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < keys; ++j) {
            float s = 0.0f;
            for (int c = 0; c < D; ++c) s += q[c].to_float() * k[size_t(j) * D + c];
            s = attention_logit(s, a.softmax_scale, a.softcap);
            logits[size_t(j)] = s;
            m = std::max(m, s);
          }
          float l = 0.0f;
          float* o = out + (size_t(q0 + i) * a.num_q_heads + hq) * D;
          for (int c = 0; c < D; ++c) o[c] = 0.0f;
          for (int64_t j = 0; j < keys; ++j) {
            const float p = std::exp(logits[size_t(j)] - m);
            l += p;
            for (int c = 0; c < D; ++c) o[c] += p * val[size_t(j) * D + c];
          }
          for (int c = 0; c < D; ++c) o[c] /= l;
        }
      }
    }
  }
  return Status::kSuccess;
}

}  // namespace reference
KVQ_NAMESPACE_END

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
#include "kvq/cache/append_plan.hpp"
#include "kvq/reference/append.hpp"
#include "kvq/reference/dequantize.hpp"

KVQ_NAMESPACE_BEGIN
namespace reference {

// K and V of one sequence and KV head as the attention sees them: [len + q_len][head_dim] fp32.
template <class Cfg>
void attention_operands(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a,
                        int b, int h, std::vector<float>& k, std::vector<float>& val) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  const int64_t len = a.lengths.len[b], cold = a.lengths.cold[b];
  const int64_t q_len = a.cu_q[b + 1] - a.cu_q[b];
  const int64_t target = cold_after(len + q_len, cold, v.residual, P);
  k.assign(size_t(len + q_len) * D, 0.0f);
  val.assign(size_t(len + q_len) * D, 0.0f);
  // Tokens below `cold` are in the pool; [cold, target) is turning cold in this step: quantize
  // those pages exactly as the append does; the rest are hot rows or new tokens.
  for (int64_t t = 0; t < std::min(cold, len); ++t)
    for (int c = 0; c < D; ++c) {
      k[size_t(t) * D + c] = cached_value<Cfg, Role::kKey>(v, b, cold, t, h, c);
      val[size_t(t) * D + c] = cached_value<Cfg, Role::kValue>(v, b, cold, t, h, c);
    }
  SeqAppend s{};
  s.len_old = len;
  s.cold_old = cold;
  s.len_new = len + q_len;
  s.cold_new = target;
  s.new_begin = a.cu_q[b];
  s.slot = v.hot_slot[b];
  std::vector<uint8_t> record(Cfg::record_bytes), scratch(size_t(P) * D);
  for (int64_t p = cold / P; p < target / P && p * P < len; ++p) {
    auto row_k = [&](int t) { return source_row(v, v.hot_k, a.new_k, s, p * P + t, h, D, P); };
    auto row_v = [&](int t) { return source_row(v, v.hot_v, a.new_v, s, p * P + t, h, D, P); };
    uint32_t ignored = 0;
    encode_record<Cfg>(row_k, row_v, record.data(), scratch.data(), 0, 1, [] {}, ignored);
    for (int t = 0; t < P && p * P + t < len; ++t)
      for (int c = 0; c < D; ++c) {
        k[size_t(p * P + t) * D + c] = decode_record_element<Cfg, Role::kKey>(record.data(), t, c);
        val[size_t(p * P + t) * D + c] = decode_record_element<Cfg, Role::kValue>(record.data(), t, c);
      }
  }
  // The rest: hot rows of the ring below len, then the new tokens.
  for (int64_t t = std::min(std::max(cold, target), len); t < len + q_len; ++t) {
    const auto* rk = source_row(v, v.hot_k, a.new_k, s, t, h, D, P);
    const auto* rv = source_row(v, v.hot_v, a.new_v, s, t, h, D, P);
    for (int c = 0; c < D; ++c) {
      k[size_t(t) * D + c] = rk[c].to_float();
      val[size_t(t) * D + c] = rv[c].to_float();
    }
  }
}

// out: [cu_q[batch]][num_q_heads][head_dim] fp32.
template <class Cfg>
Status attention(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a, float* out) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  Status st = check_view(v, P);
  if (st == Status::kSuccess) st = check_attention_args(a, v.num_kv_heads);
  if (st != Status::kSuccess) return st;
  if (a.batch > 0 && !out) return Status::kNullPointer;
  for (int b = 0; b < a.batch; ++b) {
    const int64_t len = a.lengths.len[b], cold = a.lengths.cold[b], q_len = a.cu_q[b + 1] - a.cu_q[b];
    st = check_attention_lengths(len, cold, q_len, v.residual, P, v.max_pages_per_seq);
    if (st != Status::kSuccess) return st;
    if (v.hot_slot[b] < 0 || v.hot_slot[b] >= v.num_slots) return Status::kInvalidHotSlot;
    for (int64_t p = 0; p < (std::min(cold, len) + P - 1) / P; ++p) {
      const int32_t page = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
      if (page < 0 || page >= v.num_pages) return Status::kInvalidPageId;
    }
  }
  const int group = a.num_q_heads / v.num_kv_heads;
  std::vector<float> k, val, logits;
  for (int b = 0; b < a.batch; ++b) {
    const int64_t len = a.lengths.len[b];
    const int64_t q0 = a.cu_q[b], q_len = a.cu_q[b + 1] - q0;
    for (int h = 0; h < v.num_kv_heads; ++h) {
      attention_operands<Cfg>(v, a, b, h, k, val);
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
            s *= a.softmax_scale;
            if (a.softcap > 0.0f) s = a.softcap * std::tanh(s / a.softcap);
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

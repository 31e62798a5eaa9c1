// kvq/attention/batch.hpp - the attention contract (DESIGN section 6): what every attention
// entry point (host reference, decode, chunked prefill) receives.
//
// For sequence b, q_len = cu_q[b+1] - cu_q[b] new query tokens sit at positions [len, len + q_len),
// where len = lengths.len[b] is the prefix length. Each query attends causally to
//   - the prefix [0, len), read from the cache, and
//   - the new tokens [len, its own position], read from new_k / new_v (unquantized).
// The prefix is seen as the cache holds it AFTER this step's append: tokens below
// C* = cold_after(len + q_len, cold, R, P) are dequantized, the rest are the ring's rows.
// `lengths.cold` is the cold length the cache holds now, so the step's append may run before
// (cold = C*) or after (cold = C_old; the pages turning cold are quantized on the fly, with the
// same code) and the result is the same bits either way.
// Consequence to know: a page that turns cold in this step and holds both prefix tokens and new
// tokens is quantized with group statistics that include those new tokens, so when q_len > R a
// query's view of such prefix tokens depends (through a scale and zero point) on new tokens after
// it. Decode (q_len <= R + 1) never sees a later token this way.
#pragma once

#include <cmath>
#include <cstdint>

#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

template <class T>
struct AttentionBatch {
  int32_t batch = 0;
  int32_t num_q_heads = 0;        // a multiple of the cache's num_kv_heads (GQA group of any size)
  SeqLengths lengths;             // len: prefix length; cold: cold tokens the cache holds now
  const int32_t* cu_q = nullptr;  // [batch + 1] prefix sums of q_len
  // q, new_k, new_v: 16-byte aligned (the kernels read rows with 16-byte loads).
  const T* q = nullptr;           // [cu_q[batch]][num_q_heads][head_dim]
  const T* new_k = nullptr;       // [cu_q[batch]][num_kv_heads][head_dim]
  const T* new_v = nullptr;       // [cu_q[batch]][num_kv_heads][head_dim]
  float softmax_scale = 0.0f;     // logits = softmax_scale * q.k
  float softcap = 0.0f;           // > 0: logits = softcap * tanh(logits / softcap)
};

// A logit from its dot product q.k, per the contract above (host reference and kernels share it;
// the tensor-core kernels fold the scale into their own log2-unit form).
KVQ_HD float attention_logit(float dot, float softmax_scale, float softcap) {
  const float s = dot * softmax_scale;
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

// Per-sequence check of an attention call (host reference and kernels share it). `cold` may be
// the cold length before or after this step's append.
KVQ_HD Status check_attention_lengths(int64_t len, int64_t cold, int64_t q_len, int residual, int page,
                                      int64_t max_pages) {
  if (len < 0 || cold < 0 || q_len < 0 || cold % page != 0 || cold > len + q_len) return Status::kInvalidLength;
  const int64_t target = cold_after(len + q_len, cold, residual, page);
  // Before the append the ring holds [cold, len); after it [cold, len + q_len): either way the
  // hot span below len is shorter than the window.
  if (cold <= len && len - cold >= int64_t(residual) + page) return Status::kInvalidLength;
  if (target / page > max_pages) return Status::kBlockTableOverflow;
  return Status::kSuccess;
}

template <class T>
inline Status check_attention_args(const AttentionBatch<T>& a, int num_kv_heads) {
  if (a.batch < 0) return Status::kInvalidShape;
  if (a.batch == 0) return Status::kSuccess;
  if (!a.lengths.len || !a.lengths.cold || !a.cu_q || !a.q || !a.new_k || !a.new_v) return Status::kNullPointer;
  if (a.num_q_heads <= 0 || num_kv_heads <= 0 || a.num_q_heads % num_kv_heads != 0) return Status::kInvalidShape;
  if (!(a.softmax_scale > 0.0f) || !(a.softcap >= 0.0f)) return Status::kInvalidShape;
  return Status::kSuccess;
}

KVQ_NAMESPACE_END

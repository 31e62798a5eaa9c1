// kvq/attention/bad_sequence.hpp - which sequences of an attention batch kvq::decode or
// kvq::prefill skipped (kFlagBadSequence), and why: the kernels' checks re-run on the host
// (cache/bad_sequence.hpp explains the approach; the same host-copy rules apply).
#pragma once

#include <cstdint>
#include <vector>

#include "kvq/attention/batch.hpp"
#include "kvq/attention/token_source.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/bad_sequence.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

// What the plan lets a sequence have (a sequence beyond it is skipped):
//   decode:  {plan.shape.max_q_len, plan.shape.total_q, int64_t(plan.max_splits) * plan.split_tokens}
//   prefill: {plan.shape.max_q_len, plan.shape.total_q, plan.shape.max_tokens}
struct AttentionLimits {
  int64_t max_q_len;   // query rows (chunk tokens) of one sequence
  int64_t total_q;     // end of its rows, q0 + q_len
  int64_t max_tokens;  // len + q_len
};

// Sequences the attention kernels skip: resolve_attention's status (kInvalidLength,
// kBlockTableOverflow, kInvalidShape for rows outside [0, cu_q[batch]), kInvalidHotSlot), else
// kInvalidShape beyond the plan's limits, else kInvalidPageId for a block-table entry outside the
// pool among the prefix's pool pages [0, min(cold, len)). (Decode reads, and so checks, no page of
// a sequence with no query rows; this reports such a sequence's bad page anyway.)
template <class T>
std::vector<BadSequence> bad_attention_sequences(const CacheView<T>& v, const AttentionBatch<T>& a, int page,
                                                 const AttentionLimits& limits) {
  Status st = page > 0 ? check_view(v, page) : Status::kConfigMismatch;
  if (st == Status::kSuccess) st = check_attention_args(a, v.num_kv_heads);
  if (st != Status::kSuccess) return {BadSequence{-1, st}};
  std::vector<BadSequence> bad;
  for (int b = 0; b < a.batch; ++b) {
    const SeqAttention s = resolve_attention(v, a, b, page);
    Status r = s.status;
    if (r == Status::kSuccess &&
        (s.q_len > limits.max_q_len || s.q0 + s.q_len > limits.total_q || s.len + s.q_len > limits.max_tokens))
      r = Status::kInvalidShape;
    if (r == Status::kSuccess) {
      const int64_t pool_end = s.cold < s.len ? s.cold : s.len;
      const int32_t* ids = v.block_table + int64_t(b) * v.max_pages_per_seq;
      for (int64_t p = 0; p < (pool_end + page - 1) / page && r == Status::kSuccess; ++p)
        if (!page_in_pool(v, ids[p])) r = Status::kInvalidPageId;
    }
    if (r != Status::kSuccess) bad.push_back(BadSequence{b, r});
  }
  return bad;
}

KVQ_NAMESPACE_END

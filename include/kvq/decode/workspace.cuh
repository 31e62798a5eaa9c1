// kvq/decode/workspace.cuh - what the decode kernels share: the workspace carve-up (layout in
// decode/plan.hpp), per-sequence validation, and the per-split partial state they write.
//
// Partial state of (slot, query row): unnormalised output o[D] and (max, sum) in natural-log
// units, so that softmax(row) = sum_slots o * exp(max - M) / sum_slots sum * exp(max - M).
// Slots 0 .. max_splits-1 hold the record splits, slots max_splits + k the k-th chunk of
// kDecodeTailChunk tail tokens (hot rows + new tokens).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/status.hpp"
#include "kvq/decode/plan.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kDecodeWarps = 4;

struct DecodeWorkspace {
  uint8_t* transition;  // [batch][transition_pages][num_kv_heads][record_bytes]
  float* partial;       // [slots][total_q][num_q_heads][head_dim]
  float* stats;         // [slots][total_q][num_q_heads][2] (max, sum)
  int32_t* status;      // [batch] non-zero: sequence rejected
};

inline DecodeWorkspace carve(const DecodePlan& p, void* ws) {
  uint8_t* base = static_cast<uint8_t*>(ws);
  return DecodeWorkspace{base + p.transition_offset, reinterpret_cast<float*>(base + p.partial_offset),
                         reinterpret_cast<float*>(base + p.stats_offset), reinterpret_cast<int32_t*>(base + p.status_offset)};
}

// A sequence the plan cannot serve (or whose lengths are invalid): rejected, not computed.
KVQ_HD bool sequence_exceeds_plan(const SeqAttention& s, const DecodePlan& plan) {
  return s.status != Status::kSuccess || s.q_len > plan.shape.max_q_len || s.q0 + s.q_len > plan.shape.total_q ||
         s.len + s.q_len > int64_t(plan.max_splits) * plan.split_tokens;
}

__device__ inline void reject_sequence(const DecodeWorkspace& ws, int b, uint32_t* flags) {
  ws.status[b] = 1;
  atomicOr(flags, uint32_t(kFlagBadSequence));
}

// Combines the warps' states of row r (shared memory, natural-log units) for channel c and
// writes the slot's partial output (and its stats from channel 0).
__device__ inline void combine_warps_and_store(const float* red_o, const float* red_m, const float* red_l, int rows,
                                               int head_dim, int r, int c, const DecodeWorkspace& ws,
                                               const DecodePlan& plan, int slot, size_t out_row) {
  float mx = -INFINITY;
  for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, red_m[w * rows + r]);
  float o = 0.0f, sum = 0.0f;
  if (mx != -INFINITY)
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float e = __expf(red_m[w * rows + r] - mx);
      o += red_o[(w * rows + r) * head_dim + c] * e;
      sum += red_l[w * rows + r] * e;
    }
  const size_t at = size_t(slot) * plan.shape.total_q * plan.shape.num_q_heads + out_row;
  ws.partial[at * head_dim + c] = o;
  if (c == 0) {
    ws.stats[2 * at] = mx;
    ws.stats[2 * at + 1] = sum;
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/decode/workspace.cuh - what the decode kernels share: the workspace carve-up (layout in
// decode/plan.hpp), per-sequence validation, and the per-split partial state they write.
//
// Partial state of (slot, query row): unnormalised output o[D] and (max, sum) in natural-log
// units, so that softmax(row) = sum_slots o * exp(max - M) / sum_slots sum * exp(max - M).
// Slots 0 .. max_splits-1 hold the record splits, slots max_splits + k the k-th tail_span chunks
// of kDecodeTailChunk tail tokens (hot rows + new tokens).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/core/launch.cuh"
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

// Tokens one tail slot covers (plan.tail_span chunks), and the tail slots sequence s fills: its
// tail is [records_end(s), len + q_len), at most plan.tail_slots slots for a sequence the plan
// serves. Shared by the tail kernel (which writes them) and the merge (which reads them). Slot 0
// (always filled: q_len >= 1) also holds the attention sinks' chunk (tail_kernel.cuh).
KVQ_HD int64_t tail_slot_tokens(const DecodePlan& plan) { return int64_t(plan.tail_span) * kDecodeTailChunk; }
KVQ_HD int64_t tail_slots_used(const SeqAttention& s, const DecodePlan& plan) {
  const int64_t span = tail_slot_tokens(plan);
  return (s.len + s.q_len - records_end(s) + span - 1) / span;
}

// Index of packed query row `out_row` in workspace slot `slot`: the row of partial ([..][head_dim])
// and of stats ([..][2]). Every kernel that writes or reads a slot takes it from here.
KVQ_HD size_t slot_row(const DecodePlan& plan, int slot, size_t out_row) {
  return size_t(slot) * plan.shape.total_q * plan.shape.num_q_heads + out_row;
}

// A sequence the plan cannot serve (or whose lengths are invalid): rejected, not computed.
KVQ_HD bool sequence_exceeds_plan(const SeqAttention& s, const DecodePlan& plan) {
  return s.status != Status::kSuccess || s.q_len > plan.shape.max_q_len || s.q0 + s.q_len > plan.shape.total_q ||
         s.len + s.q_len > int64_t(plan.max_splits) * plan.split_tokens;
}

// CTA-wide: thread 0 resolves sequence b into the shared `s` and whether the plan cannot serve it
// into the shared `bad`; every thread returns after the barrier that publishes them.
template <class T>
__device__ inline void resolve_sequence_for_cta(const CacheView<T>& v, const AttentionBatch<T>& a, const DecodePlan& plan,
                                                int b, int page, SeqAttention& s, int& bad) {
  if (threadIdx.x == 0) {
    s = resolve_attention(v, a, b, page);
    bad = sequence_exceeds_plan(s, plan);
  }
  __syncthreads();
}

// Where a CTA of the tensor-core split kernels (records_kernel.cuh, rows_kernel.cuh) is: grid
// (split, sequence, KV head x row tile of `rows_per_cta` query rows); its GQA group and first row.
struct SplitCta {
  int split, b, group, h, row0;
};
template <class T>
__device__ inline SplitCta split_cta(const CacheView<T>& v, const AttentionBatch<T>& a, const DecodePlan& plan,
                                     int rows_per_cta) {
  const int group = a.num_q_heads / v.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + rows_per_cta - 1) / rows_per_cta;
  return SplitCta{int(blockIdx.x), int(blockIdx.y), group, int(blockIdx.z / row_tiles), int((blockIdx.z % row_tiles) * rows_per_cta)};
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
  const size_t at = slot_row(plan, slot, out_row);
  ws.partial[at * head_dim + c] = o;
  if (c == 0) {
    ws.stats[2 * at] = mx;
    ws.stats[2 * at + 1] = sum;
  }
}

// CTAs of a split kernel (records_kernel.cuh, rows_kernel.cuh; kDecodeWarps warps) one
// multiprocessor holds (what the planner sizes splits by), and the registers a thread and the shared
// memory a CTA of it use; `bytes`: its dynamic shared memory.
template <class Kernel>
Status split_kernel_occupancy(Kernel kernel, size_t bytes, int* ctas_per_sm, int* regs, size_t* smem) {
  cudaFuncAttributes attr{};
  if (!cuda_ok(allow_dynamic_smem(kernel, bytes, &attr)) ||
      !cuda_ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, kernel, kDecodeWarps * 32, bytes)))
    return Status::kCudaError;
  *regs = attr.numRegs;
  *smem = attr.sharedSizeBytes + bytes;
  return Status::kSuccess;
}

// Launches a split kernel (records_kernel.cuh, rows_kernel.cuh) with `bytes` of dynamic shared
// memory, as the transition kernel's dependent where the plan says so.
template <class Kernel, class T>
Status launch_split_kernel(Kernel kernel, size_t bytes, dim3 grid, cudaStream_t stream, const CacheView<T>& v,
                           const AttentionBatch<T>& a, const DecodePlan& plan, const DecodeWorkspace& ws, uint32_t* flags) {
  if (!cuda_ok(allow_dynamic_smem(kernel, bytes))) return Status::kCudaError;
  return cuda_status(launch_dependent(kernel, plan.dependent_launches != 0, grid, dim3(kDecodeWarps * 32), bytes, stream, v, a,
                                      plan, ws, flags));
}

// ---- shared by the element-wise kernels (tail_kernel.cuh, decode_impl.cuh) ----
// Their CTA carries kDecodeRowsPerCta query rows of one KV head; lane l of a warp holds channels
// l, l + 32, ... of each row's running state.

// Query rows row0 .. row0 + RT - 1 of KV head h (GQA heads x new tokens), zeros past the
// sequence's `rows`, in two halves so that a kernel can issue other loads between them (the
// records kernel issues its first copies there): load_query_rows brings them into registers, warp
// w of the CTA's kDecodeWarps rows w, w + kDecodeWarps, ... (one division by the group a row),
// lane l channels l, l + 32, ...; store_query_rows writes them to shared memory as fp32 [RT][D]
// (no barrier).
template <class T, int RT, int D>
struct QueryRowRegs {
  static_assert(RT % kDecodeWarps == 0 && D % 32 == 0, "whole rows per warp, whole channels per lane");
  static constexpr int rows_per_warp = RT / kDecodeWarps, channels_per_lane = D / 32;
  T v[rows_per_warp][channels_per_lane];
};

template <class T, int RT, int D>
__device__ inline void load_query_rows(QueryRowRegs<T, RT, D>& q, const AttentionBatch<T>& a, int64_t q0, int h,
                                       int group, int row0, int rows) {
  using Q = QueryRowRegs<T, RT, D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  KVQ_UNROLL
  for (int j = 0; j < Q::rows_per_warp; ++j) {
    const int rg = row0 + warp + kDecodeWarps * j;
    const T* qrow = a.q + packed_query_row(q0, rg, group, a.num_q_heads, h) * D;
    KVQ_UNROLL
    for (int e = 0; e < Q::channels_per_lane; ++e) q.v[j][e] = rg < rows ? qrow[lane + 32 * e] : T{};
  }
}

template <class T, int RT, int D>
__device__ inline void store_query_rows(float* qs, const QueryRowRegs<T, RT, D>& q) {
  using Q = QueryRowRegs<T, RT, D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  KVQ_UNROLL
  for (int j = 0; j < Q::rows_per_warp; ++j)
    KVQ_UNROLL
    for (int e = 0; e < Q::channels_per_lane; ++e) qs[(warp + kDecodeWarps * j) * D + lane + 32 * e] = q.v[j][e].to_float();
}

// Both at once, then a barrier (kernels with nothing to overlap with the loads).
template <class T, int RT, int D>
__device__ inline void stage_query_rows(float (*qs)[D], const AttentionBatch<T>& a, const SeqAttention& s, int h,
                                        int group, int row0, int rows) {
  QueryRowRegs<T, RT, D> q;
  load_query_rows(q, a, s.q0, h, group, row0, rows);
  store_query_rows(&qs[0][0], q);
  __syncthreads();
}

// A warp's running state of RT rows before its first token: max -inf, sum 0, acc 0.
template <int RT, int J>
KVQ_DEVICE void reset_row_states(float (&m)[RT], float (&l)[RT], float (&acc)[RT][J]) {
  KVQ_UNROLL
  for (int r = 0; r < RT; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    KVQ_UNROLL
    for (int j = 0; j < J; ++j) acc[r][j] = 0.0f;
  }
}

// Shared memory of the cross-warp combine.
template <int RT, int D>
struct WarpStates {
  float m[kDecodeWarps][RT], l[kDecodeWarps][RT];
  float acc[kDecodeWarps][RT][D];
};

// Every warp's running state (max m, sum l, unnormalised acc) of its RT rows is combined over the
// CTA's warps and rows [0, nr) are written as slot `slot` of the workspace.
template <int RT, int D, class T>
__device__ inline void combine_and_store_rows(WarpStates<RT, D>& red, const float (&m)[RT], const float (&l)[RT],
                                              const float (&acc)[RT][D / 32], int nr, const DecodeWorkspace& ws,
                                              const DecodePlan& plan, int slot, const AttentionBatch<T>& a,
                                              const SeqAttention& s, int h, int group, int row0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  KVQ_UNROLL
  for (int r = 0; r < RT; ++r) {
    if (lane == 0) {
      red.m[warp][r] = m[r];
      red.l[warp][r] = l[r];
    }
    KVQ_UNROLL
    for (int j = 0; j < D / 32; ++j) red.acc[warp][r][lane + 32 * j] = acc[r][j];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nr * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D, rg = row0 + r;
    combine_warps_and_store(&red.acc[0][0][0], &red.m[0][0], &red.l[0][0], RT, D, r, c, ws, plan, slot,
                            packed_query_row(s.q0, rg, group, a.num_q_heads, h));
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/decode/merge_kernel.cuh - the last decode launch: combines the partial softmax states of a
// query row's slots (workspace.cuh: record splits, then tail slots) exactly and writes the row.
//
// CTA = (new token, sequence, query head), kMergeThreads threads. A row's work is slots x (max,
// sum) + slots x D partial floats, all in L2; a batch-1 call at 128K has ~80 slots, so the slots
// are taken in parallel, not in a loop of dependent loads:
//   1. thread k reads slot k's max (k, k + kMergeThreads, ...); the CTA reduces them to M;
//   2. per chunk of kMergeThreads slots, thread k writes w_k = exp(max_k - M) (0 for a slot
//      without tokens) to shared memory and adds w_k sum_k to its share of the denominator;
//   3. thread (part, c) adds w_k o_k[c] over the chunk's slots k = part, part + parts, ... (parts =
//      kMergeThreads / D), kMergeBatch loads issued before their sums;
//   4. the parts and the denominator shares are added through shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/token_source.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/decode/workspace.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kMergeThreads = 512;
constexpr int kMergeBatch = 8;  // partial loads a thread has in flight

// x reduced over the CTA with `op` (every thread gets the result). scratch: kMergeThreads / 32 floats.
template <class Op>
__device__ inline float merge_block_reduce(float x, float* scratch, Op op) {
  KVQ_UNROLL
  for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  __syncthreads();  // scratch may still be read by a previous reduction
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
  KVQ_UNROLL
  for (int w = 1; w < kMergeThreads / 32; ++w) x = op(x, scratch[w]);
  return x;
}

// records_path: slots are the record splits holding tokens then the tail slots; otherwise (the
// element-wise path) the splits of all tokens.
template <class Cfg>
__global__ void __launch_bounds__(kMergeThreads) KVQ_HIDDEN
    decode_merge_kernel(AttentionBatch<typename Cfg::dtype> a, DecodePlan plan, DecodeWorkspace ws,
                        typename Cfg::dtype* out, bool records_path) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, PARTS = kMergeThreads / D;
  static_assert(kMergeThreads % D == 0, "a CTA holds whole rows of channels");
  __shared__ float weight[kMergeThreads];
  __shared__ float scratch[kMergeThreads / 32];
  __shared__ float part_o[PARTS > 1 ? PARTS - 1 : 1][D];
  const int i = blockIdx.x, b = blockIdx.y, hq = blockIdx.z;
  wait_prior_grids();  // launched as the dependent of the kernel before it (decode_impl.cuh): its slots are written
  if (ws.status[b]) return;
  SeqAttention s{};
  s.len = a.lengths.len[b];
  s.cold = a.lengths.cold[b];
  s.q0 = a.cu_q[b];
  s.q_len = int32_t(a.cu_q[b + 1] - s.q0);
  if (i >= s.q_len) return;
  s.target = cold_after(s.len + s.q_len, s.cold, plan.shape.residual, plan.page);
  const int64_t covered = records_path ? records_end(s) : s.len + s.q_len;
  const int splits = int((covered + plan.split_tokens - 1) / plan.split_tokens);
  const int64_t tail_slot_tokens = int64_t(plan.tail_span) * kDecodeTailChunk;
  const int tails = records_path ? int((s.len + s.q_len - covered + tail_slot_tokens - 1) / tail_slot_tokens) : 0;
  const int slots = splits + tails;
  const size_t row = size_t(s.q0 + i) * a.num_q_heads + hq, stride = size_t(plan.shape.total_q) * a.num_q_heads;
  auto at_of = [&](int k) { return size_t(k < splits ? k : plan.max_splits + (k - splits)) * stride + row; };
  const int t = threadIdx.x, part = t / D, c = t % D;

  float mx = -INFINITY;
  for (int k = t; k < slots; k += kMergeThreads) mx = fmaxf(mx, ws.stats[2 * at_of(k)]);
  mx = merge_block_reduce(mx, scratch, [](float x, float y) { return fmaxf(x, y); });

  float o = 0.0f, sum = 0.0f;
  for (int base = 0; base < slots; base += kMergeThreads) {
    float w = 0.0f;
    if (base + t < slots) {
      const size_t at = at_of(base + t);
      const float ms = ws.stats[2 * at];
      if (ms != -INFINITY) {  // else a slot without tokens of this row (its partial output is 0)
        w = __expf(ms - mx);
        sum += w * ws.stats[2 * at + 1];
      }
    }
    __syncthreads();  // the previous chunk's weights are read
    weight[t] = w;
    __syncthreads();
    const int n = slots - base < kMergeThreads ? slots - base : kMergeThreads;
    for (int k0 = part; k0 < n; k0 += kMergeBatch * PARTS) {  // kMergeBatch loads in flight, then their sums
      float wk[kMergeBatch], po[kMergeBatch];
      KVQ_UNROLL
      for (int u = 0; u < kMergeBatch; ++u) {
        const int k = k0 + u * PARTS;
        wk[u] = k < n ? weight[k] : 0.0f;
        po[u] = wk[u] != 0.0f ? ws.partial[at_of(base + k) * D + c] : 0.0f;
      }
      KVQ_UNROLL
      for (int u = 0; u < kMergeBatch; ++u) o += wk[u] * po[u];
    }
  }
  sum = merge_block_reduce(sum, scratch, [](float x, float y) { return x + y; });
  if (part > 0) part_o[part - 1][c] = o;
  __syncthreads();
  if (part == 0) {
    KVQ_UNROLL
    for (int p = 1; p < PARTS; ++p) o += part_o[p - 1][c];
    out[row * D + c] = T::from_float(o / sum);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

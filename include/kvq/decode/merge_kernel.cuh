// kvq/decode/merge_kernel.cuh - the last decode launch: combines the partial softmax states of a
// query row's slots (workspace.cuh: record splits, then tail slots) exactly and writes the row.
//
// CTA = (new token, sequence, query head), kMergeThreads threads = PARTS parts of D channels. A
// row's work is slots x (max, sum) + slots x D partial floats, all in L2. Part p takes the slots
// p, p + PARTS, ... in passes of kMergeBatch: every load of a pass (the max, the sum and the
// channel's partial output of each slot) is issued before any use, and the part keeps an online
// log-sum-exp state across passes; the parts combine once through shared memory. A batch-1 call
// at 128K (66 slots, D 128: 4 parts of 17 slots) is one pass: the lengths are read before the
// wait for the earlier grid, then one L2 round trip (the status word and the slots) and one
// barrier.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/token_source.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/decode/workspace.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kMergeThreads = 512;
constexpr int kMergeBatch = 18;  // slots a thread has in flight (more spill at 512 threads)

// records_path: slots are the record splits holding tokens then the tail slots; otherwise (the
// element-wise path) the splits of all tokens.
template <class Cfg>
__global__ void __launch_bounds__(kMergeThreads) KVQ_HIDDEN
    decode_merge_kernel(AttentionBatch<typename Cfg::dtype> a, DecodePlan plan, DecodeWorkspace ws,
                        typename Cfg::dtype* out, bool records_path) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, PARTS = kMergeThreads / D;
  static_assert(kMergeThreads % D == 0, "a CTA holds whole rows of channels");
  __shared__ float part_m[PARTS], part_l[PARTS], part_o[PARTS][D];
  const int i = blockIdx.x, b = blockIdx.y, hq = blockIdx.z;
  // The lengths are the caller's (complete before the chain's first kernel started): read while
  // the kernel before this one still runs.
  SeqAttention s{};
  s.len = a.lengths.len[b];
  s.cold = a.lengths.cold[b];
  const BatchRows rows = batch_rows_of(a.cu_q, b, a.batch);
  s.q0 = rows.begin;
  s.q_len = rows.inside() ? int32_t(rows.count()) : 0;  // rows outside the batch's: a rejected sequence, nothing to merge
  wait_prior_grids();  // launched as the dependent of the kernel before it (decode_impl.cuh): its slots are written
  if (i >= s.q_len) return;
  // A rejected sequence's slots are not written: loaded (inside the workspace) with the status word
  // in one round trip, never used.
  const int32_t rejected = ws.status[b];
  s.target = cold_after(s.len + s.q_len, s.cold, plan.shape.residual, plan.page);
  const int64_t covered = records_path ? records_end(s) : s.len + s.q_len;
  const int64_t splits64 = (covered + plan.split_tokens - 1) / plan.split_tokens;
  const int64_t tails64 = records_path ? tail_slots_used(s, plan) : 0;
  // Lengths the plan cannot serve belong to a rejected sequence: no slot is read (nor any load made
  // outside the workspace).
  const bool in_plan = splits64 >= 0 && splits64 <= plan.max_splits && tails64 >= 0 && tails64 <= plan.tail_slots &&
                       s.q0 + i < plan.shape.total_q;
  const int splits = in_plan ? int(splits64) : 0;
  const int slots = in_plan ? int(splits64 + tails64) : 0;
  // slot_row (workspace.cuh) with its stride hoisted out of the slot loop (the plan's num_q_heads is the
  // batch's: run_checks.hpp).
  const size_t row = size_t(s.q0 + i) * a.num_q_heads + hq, stride = size_t(plan.shape.total_q) * a.num_q_heads;
  auto at_of = [&](int k) { return size_t(k < splits ? k : plan.max_splits + (k - splits)) * stride + row; };
  const int part = threadIdx.x / D, c = threadIdx.x % D;

  // The part's state of channel c (natural-log units). A slot without tokens of this row has max
  // -inf and a zero output: its weight is 0.
  float m = -INFINITY, l = 0.0f, o = 0.0f;
  for (int base = part; base < slots; base += kMergeBatch * PARTS) {
    float ms[kMergeBatch], ls[kMergeBatch], po[kMergeBatch];
    KVQ_UNROLL
    for (int u = 0; u < kMergeBatch; ++u) {  // past the row's slots: no load, weight 0
      const int k = base + u * PARTS;
      ms[u] = -INFINITY, ls[u] = 0.0f, po[u] = 0.0f;
      if (k < slots) {
        const size_t at = at_of(k);
        ms[u] = ws.stats[2 * at];
        ls[u] = ws.stats[2 * at + 1];
        po[u] = ws.partial[at * D + c];
      }
    }
    float mx = m;
    KVQ_UNROLL
    for (int u = 0; u < kMergeBatch; ++u) mx = fmaxf(mx, ms[u]);
    if (mx == -INFINITY) continue;  // no tokens in the part's slots so far
    const float corr = __expf(m - mx);
    l *= corr;
    o *= corr;
    KVQ_UNROLL
    for (int u = 0; u < kMergeBatch; ++u) {
      const float w = __expf(ms[u] - mx);
      l += w * ls[u];
      o += w * po[u];
    }
    m = mx;
  }
  if (rejected) return;  // the same for the whole CTA
  if (c == 0) part_m[part] = m, part_l[part] = l;
  part_o[part][c] = o;
  __syncthreads();
  if (part == 0) {
    float mx = -INFINITY;
    KVQ_UNROLL
    for (int p = 0; p < PARTS; ++p) mx = fmaxf(mx, part_m[p]);
    float sum = 0.0f, acc = 0.0f;
    KVQ_UNROLL
    for (int p = 0; p < PARTS; ++p) {
      const float w = part_m[p] == -INFINITY ? 0.0f : __expf(part_m[p] - mx);
      sum += w * part_l[p];
      acc += w * part_o[p][c];
    }
    out[row * D + c] = T::from_float(acc / sum);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

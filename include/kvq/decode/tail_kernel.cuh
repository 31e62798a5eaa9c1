// kvq/decode/tail_kernel.cuh - decode attention over a sequence's tail: the tokens after the
// records (hot ring rows, then the step's new tokens), read in the model dtype. Never a record:
// records_end (token_source.hpp) is where the hot rows begin.
// Attention sinks: the kernel instantiated with kSinks (kvq::decode takes it for a view with
// sinks; without them it is the kernel without that code) also attends a sequence's sink tokens
// [0, min(sinks, records_end)), which the records kernel masks: one more chunk of slot 0 (the
// sink buffer, or the ring rows while page 0 turns cold in this step), so the merge's slot
// accounting is unchanged.
//
// Work item = (slot, sequence, KV head x row tile of kDecodeRowsPerCta = 8 query rows), item index
// = slot + tail_slots * (sequence + batch * (head x row tile)). Slot n covers the plan.tail_span
// chunks of kDecodeTailChunk = 16 tokens from records_end + n * tail_span * 16; the CTA resolves
// the sequence and stages the query rows once, its warps take the slot's chunks round-robin (warp w:
// chunks w, w + 4, ...), each with its own online-softmax state, and the warps' states combine
// into partial slot max_splits + n. With plan.tail_ctas == 0 the grid has one CTA per item and
// runs after the records kernel; otherwise tail_ctas CTAs run beside it (its dependent launch,
// core/dependent_launch.cuh), CTA c taking items c, c + tail_ctas, ..., and every CTA waits for the
// records grid before it exits, so the merge after it sees both kernels' slots (plan.hpp,
// decode_tail_schedule, picks the mode and the span).
//
// A chunk is two m16n8k16 tensor-core products in the model dtype with fp32 accumulators, the
// records kernel's "none" path with rows read straight from global memory (16-byte loads; rows are
// 16-byte aligned, run_checks.hpp):
//   S^T (16 tokens x 8 rows) = K . Q^T   K as A: lane (g, i) loads tokens g and g + 8, channels
//                                        32q + 8i .. 32q + 8i + 7 of each 32-channel block q, which
//                                        serve k-steps 2q (channels 8i .. 8i + 3 of the block) and
//                                        2q + 1 (8i + 4 .. 8i + 7); Q^T as B in the same order
//   online softmax per row (max over the lanes of a row by shuffles), P^T by movmatrix
//   O^T (D x 8 rows) += V^T . P^T        V^T as A: lane (g, i) loads tokens 2i, 2i + 1, 2i + 8,
//                                        2i + 9, channels (D/8) g .. (D/8) g + D/8 - 1; m-tile mt's
//                                        rows g and g + 8 are channels (D/8) g + 2 mt and + 1
// Tokens past the slot read the slot's first row (finite) and are masked; future new tokens are
// masked per row (causal).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/token_source.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/decode/plan.hpp"
#include "kvq/decode/workspace.cuh"
#include "kvq/numeric/mma.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

static_assert(kDecodeWarps == kDecodeTailChunksInFlight, "a tail CTA's warps take one chunk each at a time");
static_assert(kDecodeTailChunk == 16 && kDecodeRowsPerCta == 8, "a tail chunk is one m16n8k16 tile");

template <class Cfg, bool kSinks = false>
__global__ void __launch_bounds__(kDecodeWarps * 32, Cfg::head_dim <= 128 ? 4 : 1) KVQ_HIDDEN
    decode_tail_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                       DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, RT = kDecodeRowsPerCta;
  constexpr int KB = D / 32;  // 32-channel blocks of a key row (two k-steps each)
  constexpr int MT = D / 16;  // k-steps of S, m-tiles of O, 32-bit words of a lane's value channels
  constexpr int VU = D / 64;  // 16-byte loads of a lane's value channels
  __shared__ SeqAttention s;
  __shared__ int bad;
  __shared__ union {
    float qs[RT][D];           // the item's query rows, until they are in registers
    WarpStates<RT, D> red;     // the warps' states at the item's end
  } sh;
  launch_dependents();  // the merge kernel may start (it waits for this grid before reading)
  const int group = a.num_q_heads / v.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + RT - 1) / RT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  const int64_t items = int64_t(plan.tail_slots) * a.batch * v.num_kv_heads * row_tiles;
  const int64_t first = plan.tail_ctas > 0 ? blockIdx.x : blockIdx.x + int64_t(plan.tail_slots) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  const int64_t step = plan.tail_ctas > 0 ? plan.tail_ctas : items;
  for (int64_t item = first; item < items; item += step) {
    const int slot = int(item % plan.tail_slots), b = int(item / plan.tail_slots % a.batch);
    const int zz = int(item / plan.tail_slots / a.batch);
    const int h = zz / row_tiles, row0 = (zz % row_tiles) * RT;
    __syncthreads();  // the previous item is done with the shared state
    resolve_sequence_for_cta(v, a, plan, b, P, s, bad);
    if (bad) {
      // Beside the records kernel, after its grid (and so the transition grid, which clears the
      // status word) is done; an error path: a rejected sequence is not computed anyway.
      wait_prior_grids();
      if (threadIdx.x == 0) reject_sequence(ws, b, flags);
      continue;
    }
    const int64_t all_end = s.len + s.q_len, span = tail_slot_tokens(plan);
    const int64_t first_t = records_end(s) + slot * span;
    const int64_t item_end = all_end < first_t + span ? all_end : first_t + span;
    const int rows = group * s.q_len;
    if (first_t >= item_end || row0 >= rows) continue;  // the merge reads only the slots that hold tokens
    const int nr = rows - row0 < RT ? rows - row0 : RT;

    // Q^T as B operands (the model dtype; zeros past the sequence's rows): k-step 2q + e of lane
    // (g, i) holds row g's channels 32q + 8i + 4e + {0, 1} and {2, 3}.
    stage_query_rows<T, RT, D>(sh.qs, a, s, h, group, row0, rows);
    uint32_t qb[MT][2];
    KVQ_UNROLL
    for (int kk = 0; kk < MT; ++kk) {
      const float* q = &sh.qs[g][32 * (kk / 2) + 8 * i + 4 * (kk % 2)];
      qb[kk][0] = pack2<T>(q[0], q[1]);
      qb[kk][1] = pack2<T>(q[2], q[3]);
    }
    __syncthreads();  // every warp has its operands: the shared space is free for the combine

    // The warp's running state of rows 2i and 2i + 1 (log2 units); the causal limit of each.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[MT][4];
    KVQ_UNROLL
    for (int mt = 0; mt < MT; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    const int64_t last[2] = {s.len + (row0 + 2 * i) / group, s.len + (row0 + 2 * i + 1) / group};
    const SeqAppend ap = as_append(s);
    // Attention sinks (kSinks: a view with sinks): tokens [0, ns), ns = min(sinks, records_end),
    // which the records kernel masks, are one more chunk of slot 0, taken by the warp with the
    // fewest chunks of the slot before its own: the chunk "starting" at sink_start = its first
    // chunk's start - 4 chunks (below first_t, so the loop's step then reaches its first chunk),
    // whose token sink_start + j is sink token j: the sink row below cold, else (page 0 turning
    // cold in this step) the ring row. Tokens j >= ns read sink token 0's row (finite) and are
    // masked; every query row sees the others (they lie below len).
    int64_t first_chunk = first_t + int64_t(kDecodeTailChunk) * warp, sink_start = -1;
    int ns = 0;
    if constexpr (kSinks) {
      const int64_t rec_end = records_end(s);
      ns = slot == 0 ? int(v.sinks < rec_end ? v.sinks : rec_end) : 0;
      const int64_t chunks = (item_end - first_t + kDecodeTailChunk - 1) / kDecodeTailChunk;
      if (ns > 0 && warp == int(chunks % kDecodeWarps))
        first_chunk = sink_start = first_chunk - int64_t(kDecodeTailChunk) * kDecodeWarps;
    }
    const auto sink_j = [&](int64_t t) { return t - sink_start < ns ? int(t - sink_start) : 0; };
    const auto row_k = [&](int64_t t) {
      if constexpr (kSinks)
        if (t < first_t) return sink_row(v, v.sink_k, v.hot_k, a.new_k, ap, s.cold, sink_j(t), h, D, P);
      return source_row(v, v.hot_k, a.new_k, ap, t < item_end ? t : first_t, h, D, P);
    };
    const auto row_v = [&](int64_t t) {
      if constexpr (kSinks)
        if (t < first_t) return sink_row(v, v.sink_v, v.hot_v, a.new_v, ap, s.cold, sink_j(t), h, D, P);
      return source_row(v, v.hot_v, a.new_v, ap, t < item_end ? t : first_t, h, D, P);
    };
    for (int64_t start = first_chunk; start < item_end; start += int64_t(kDecodeTailChunk) * kDecodeWarps) {
      uint4 k0[KB], k1[KB], vt[4][VU];
      {
        const T* r0 = row_k(start + g) + 8 * i;
        const T* r1 = row_k(start + g + 8) + 8 * i;
        KVQ_UNROLL
        for (int q = 0; q < KB; ++q) {
          k0[q] = *reinterpret_cast<const uint4*>(r0 + 32 * q);
          k1[q] = *reinterpret_cast<const uint4*>(r1 + 32 * q);
        }
        KVQ_UNROLL
        for (int j = 0; j < 4; ++j) {  // tokens 2i, 2i + 1, 2i + 8, 2i + 9
          const T* r = row_v(start + 2 * i + (j & 1) + 8 * (j >> 1)) + (D / 8) * g;
          KVQ_UNROLL
          for (int u = 0; u < VU; ++u) vt[j][u] = reinterpret_cast<const uint4*>(r)[u];
        }
      }
      // S^T: c[0], c[1] token g, rows 2i and 2i + 1; c[2], c[3] token g + 8.
      float sacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      KVQ_UNROLL
      for (int kk = 0; kk < MT; ++kk) {
        const uint4& x0 = k0[kk / 2];
        const uint4& x1 = k1[kk / 2];
        const uint32_t ka[4] = {kk % 2 ? x0.z : x0.x, kk % 2 ? x1.z : x1.x, kk % 2 ? x0.w : x0.y, kk % 2 ? x1.w : x1.y};
        mma16816<T>(sacc, ka, qb[kk][0], qb[kk][1]);
      }
      // Online softmax over the chunk (log2 units); the row max across the row's 8 lanes.
      float x[2][2], cr[2];
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        float mx = -INFINITY;
        KVQ_UNROLL
        for (int u = 0; u < 2; ++u) {
          const int64_t t = start + g + 8 * u;
          const float y = attention_logit(sacc[2 * u + hh], a.softmax_scale, a.softcap) * 1.4426950408889634f;
          bool keep = t < item_end && t <= last[hh];
          if constexpr (kSinks)
            if (start == sink_start) keep = t - sink_start < ns;
          x[u][hh] = keep ? y : -INFINITY;
          mx = fmaxf(mx, x[u][hh]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(m[hh], mx), m_use = m_new == -INFINITY ? 0.0f : m_new;
        cr[hh] = exp2_approx(m[hh] - m_use);
        m[hh] = m_new;
        KVQ_UNROLL
        for (int u = 0; u < 2; ++u) x[u][hh] = exp2_approx(x[u][hh] - m_use);
        l[hh] = l[hh] * cr[hh] + (x[0][hh] + x[1][hh]);
      }
      const uint32_t pb0 = movmatrix_trans(pack2<T>(x[0][0], x[0][1]));  // P^T, tokens 0-7
      const uint32_t pb1 = movmatrix_trans(pack2<T>(x[1][0], x[1][1]));  // tokens 8-15
      // O^T += V^T . P^T; m-tile mt's rows g, g + 8: channels (D/8) g + 2mt, + 1 (low, high halves).
      KVQ_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t w0 = (&vt[0][0].x)[mt], w1 = (&vt[1][0].x)[mt], w2 = (&vt[2][0].x)[mt], w3 = (&vt[3][0].x)[mt];
        const uint32_t va[4] = {__byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632), __byte_perm(w2, w3, 0x5410),
                                __byte_perm(w2, w3, 0x7632)};
        o[mt][0] *= cr[0], o[mt][2] *= cr[0];
        o[mt][1] *= cr[1], o[mt][3] *= cr[1];
        mma16816<T>(o[mt], va, pb0, pb1);
      }
    }

    // The warps' states (natural-log units) through shared memory, then the CTA combines them.
    KVQ_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      float lt = l[hh];
      lt += __shfl_xor_sync(0xffffffffu, lt, 4);
      lt += __shfl_xor_sync(0xffffffffu, lt, 8);
      lt += __shfl_xor_sync(0xffffffffu, lt, 16);
      const int r = 2 * i + hh;
      if (g == 0) {
        sh.red.m[warp][r] = m[hh] * 0.6931471805599453f;
        sh.red.l[warp][r] = lt;
      }
      KVQ_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        sh.red.acc[warp][r][(D / 8) * g + 2 * mt] = o[mt][hh];
        sh.red.acc[warp][r][(D / 8) * g + 2 * mt + 1] = o[mt][2 + hh];
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nr * D; idx += blockDim.x) {
      const int r = idx / D, c = idx % D, rg = row0 + r;
      combine_warps_and_store(&sh.red.acc[0][0][0], &sh.red.m[0][0], &sh.red.l[0][0], RT, D, r, c, ws, plan,
                              plan.max_splits + slot, packed_query_row(s.q0, rg, group, a.num_q_heads, h));
    }
  }
  if (plan.tail_ctas > 0) wait_prior_grids();  // the records grid is done: the merge may read its slots
}

}  // namespace detail
KVQ_NAMESPACE_END

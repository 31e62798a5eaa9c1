// kvq/decode/tail_kernel.cuh - decode attention over a sequence's tail: the tokens after the
// records (hot ring rows, then the step's new tokens), read in the model dtype. Never a record:
// records_end (token_source.hpp) is where the hot rows begin.
//
// Work item = (slot, sequence, KV head x row tile of kDecodeRowsPerCta query rows), item index =
// slot + tail_slots * (sequence + batch * (head x row tile)). Slot n covers the plan.tail_span
// chunks of kDecodeTailChunk tokens from records_end + n * tail_span * kDecodeTailChunk; the CTA
// resolves the sequence and stages the query rows once, walks the chunks with one online-softmax
// state and writes it to partial slot max_splits + n. With plan.tail_ctas == 0 the grid has one CTA
// per item and runs after the records kernel; otherwise tail_ctas CTAs run beside it (its
// dependent launch, core/dependent_launch.cuh), CTA c taking items c, c + tail_ctas, ..., and
// every CTA waits for the records grid before it exits, so the merge after it sees both kernels'
// slots (plan.hpp, decode_tail_schedule, picks the mode and the span). In a chunk, warp w takes the
// tokens w, w + 4, ... (kTailTokensPerWarp of them) and loads all their K/V elements before any
// math (lane l: channels l, l + 32, ...), so a warp waits for memory once a chunk. Then, per query
// row the CTA holds (padding rows skipped), the tokens' dots are summed over the warp in
// interleaved shuffle trees, future tokens are masked (causal over the new tokens) and the row's
// online softmax takes one update for all the warp's tokens. The warps' states combine through
// shared memory (combine_warps_and_store) once per item.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/token_source.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/decode/plan.hpp"
#include "kvq/decode/workspace.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kTailTokensPerWarp = kDecodeTailChunk / kDecodeWarps;
static_assert(kDecodeTailChunk % kDecodeWarps == 0, "a chunk splits evenly over the warps");

template <class Cfg>
__global__ void __launch_bounds__(kDecodeWarps * 32) KVQ_HIDDEN
    decode_tail_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                       DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, RT = kDecodeRowsPerCta, J = D / 32, TW = kTailTokensPerWarp;
  __shared__ SeqAttention s;
  __shared__ int bad;
  __shared__ float qs[RT][D];
  __shared__ WarpStates<RT, D> red;
  const int group = a.num_q_heads / v.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + RT - 1) / RT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
      if (threadIdx.x == 0) reject_sequence(ws, b, flags);
      continue;
    }
    const int64_t all_end = s.len + s.q_len, span = int64_t(plan.tail_span) * kDecodeTailChunk;
    const int64_t first_t = records_end(s) + slot * span;
    const int64_t item_end = all_end < first_t + span ? all_end : first_t + span;
    const int rows = group * s.q_len;
    if (first_t >= item_end || row0 >= rows) continue;  // the merge reads only the slots that hold tokens
    const int nr = rows - row0 < RT ? rows - row0 : RT;
    const SeqAppend ap = as_append(s);
    // The warp's tokens of the chunk from `start`, every load issued before the first use.
    float k[TW][J], val[TW][J];
    const auto load_chunk = [&](int64_t start) {
      KVQ_UNROLL
      for (int tw = 0; tw < TW; ++tw) {
        const int64_t t = start + warp + kDecodeWarps * tw;
        const bool here = t < item_end;
        const T* kr = here ? source_row(v, v.hot_k, a.new_k, ap, t, h, D, P) : nullptr;
        const T* vr = here ? source_row(v, v.hot_v, a.new_v, ap, t, h, D, P) : nullptr;
        KVQ_UNROLL
        for (int j = 0; j < J; ++j) {
          k[tw][j] = here ? kr[lane + 32 * j].to_float() : 0.0f;
          val[tw][j] = here ? vr[lane + 32 * j].to_float() : 0.0f;
        }
      }
    };
    load_chunk(first_t);  // in flight while the query rows are staged
    stage_query_rows<T, RT, D>(qs, a, s, h, group, row0, rows);

    float m[RT], l[RT], acc[RT][J];
    reset_row_states(m, l, acc);
    for (int64_t start = first_t;;) {  // the slot's chunks, one softmax state
      KVQ_UNROLL
      for (int r = 0; r < RT; ++r) {
        if (r >= nr) break;  // padding rows (uniform over the CTA)
        float dot[TW];
        KVQ_UNROLL
        for (int tw = 0; tw < TW; ++tw) {
          dot[tw] = 0.0f;
          KVQ_UNROLL
          for (int j = 0; j < J; ++j) dot[tw] += qs[r][lane + 32 * j] * k[tw][j];
        }
        KVQ_UNROLL
        for (int o = 16; o > 0; o >>= 1)
          KVQ_UNROLL
          for (int tw = 0; tw < TW; ++tw) dot[tw] += __shfl_xor_sync(0xffffffffu, dot[tw], o);
        const int64_t last = s.len + (row0 + r) / group;  // the row's own new token: later ones are future
        float x[TW], mx = m[r];
        KVQ_UNROLL
        for (int tw = 0; tw < TW; ++tw) {
          const int64_t t = start + warp + kDecodeWarps * tw;
          const float logit = attention_logit(dot[tw], a.softmax_scale, a.softcap);
          x[tw] = t < item_end && t <= last ? logit : -INFINITY;
          mx = fmaxf(mx, x[tw]);
        }
        if (mx == -INFINITY) continue;  // none of the warp's tokens is visible to this row yet
        const float corr = __expf(m[r] - mx);
        l[r] *= corr;
        KVQ_UNROLL
        for (int j = 0; j < J; ++j) acc[r][j] *= corr;
        KVQ_UNROLL
        for (int tw = 0; tw < TW; ++tw) {
          const float p = __expf(x[tw] - mx);
          l[r] += p;
          KVQ_UNROLL
          for (int j = 0; j < J; ++j) acc[r][j] += p * val[tw][j];
        }
        m[r] = mx;
      }
      start += kDecodeTailChunk;
      if (start >= item_end) break;
      load_chunk(start);
    }
    combine_and_store_rows<RT, D>(red, m, l, acc, nr, ws, plan, plan.max_splits + slot, a, s, h, group, row0);
  }
  if (plan.tail_ctas > 0) wait_prior_grids();  // the records grid is done: the merge may read its slots
}

}  // namespace detail
KVQ_NAMESPACE_END

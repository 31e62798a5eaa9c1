// kvq/decode/rows_kernel.cuh - the split kernel of decode attention for many query rows (GQA group
// x q_len above 16: speculative decoding) in configurations that store both roles in the model
// dtype ("none"), over the tokens the cache serves from records.
//
// CTA = (split, sequence, KV head x row tile of kDecodeManyRows = 64 rows). The records kernel
// (records_kernel.cuh) reads each K/V tile into registers for at most 16 rows, so with more rows
// its row-tile CTAs would each read the same tiles from shared memory and multiply them for 16 rows
// at a time. Here the CTA's 128 threads copy each tile of decode_rows_tile_tokens tokens once into
// shared memory (the prefill tile fill, kv_tile.cuh), and its 4 warps, 16 rows each, read it by
// ldmatrix: the prefill kernel's loop (kernels/mma_rows.cuh). A split's tokens are records only
// (the cold pool and the pages turning cold in this step), all before every query row's position,
// so the only mask is the split's end, given to the loop as the position of every row. The split's
// partial state goes to the workspace like the records kernel's (workspace.cuh); the tail and merge
// kernels are shared. The kernel serves every configuration, but with quantized roles its
// dequantization in shared memory (between two CTA barriers a tile) measured slower than the
// records kernel's unpacking in registers (on an H100, docs/PERF_NOTES.md): has_many_rows_kernel
// says which configurations take it.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/decode/plan.hpp"
#include "kvq/decode/workspace.cuh"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/kernels/mma_rows.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Whether decode sends plans of more than 16 rows a KV head to this kernel (decode_rows_per_cta).
template <class Cfg>
constexpr bool has_many_rows_kernel() {
  return !Codec<typename Cfg::k_quant>::quantized && !Codec<typename Cfg::v_quant>::quantized;
}

// The rows a split CTA of configuration Cfg carries for a plan of `shape` (what plan_decode<Cfg>
// chooses and kvq::decode checks a plan against); the shape's heads must divide.
template <class Cfg>
constexpr int planned_rows_per_cta(const DecodeShape& shape) {
  return decode_rows_per_cta(Cfg::head_dim, shape.num_q_heads / shape.num_kv_heads, shape.max_q_len, has_many_rows_kernel<Cfg>(),
                             int64_t(shape.batch) * shape.max_tokens);
}

template <class Cfg>
using DecodeRowsSmem = MmaRowsSmem<Cfg, kDecodeManyRows, decode_rows_tile_tokens(Cfg::head_dim)>;

template <class Cfg>
__global__ void __launch_bounds__(kPrefillWarps * 32) KVQ_HIDDEN
    decode_rows_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                       DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int BM = kDecodeManyRows, D = Cfg::head_dim, P = Cfg::page, BN = decode_rows_tile_tokens(D), OT = D / 8;
  static_assert(BM == 16 * kPrefillWarps, "one m-tile of 16 rows per warp");
  static_assert(kPrefillWarps == kDecodeWarps, "the split kernels' CTAs are kDecodeWarps warps (launch_split_kernel)");
  // Its own name: an extern __shared__ array is one symbol per translation unit.
  extern __shared__ __align__(16) uint8_t decode_rows_smem[];
  __shared__ SeqAttention s;
  __shared__ int bad;

  // The tail kernel (independent of this one) may take the room this grid leaves. This grid is
  // the transition kernel's dependent: it waits for it before reading a transition record or the
  // status words, and before exiting.
  launch_dependents();
  const SplitCta cta = split_cta(v, a, plan, BM);
  const int split = cta.split, b = cta.b, group = cta.group, h = cta.h, row0 = cta.row0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  resolve_sequence_for_cta(v, a, plan, b, P, s, bad);
  wait_prior_grids();
  if (bad) {
    if (threadIdx.x == 0) reject_sequence(ws, b, flags);
    return;
  }
  const int64_t rec_end = records_end(s);
  const int64_t start = int64_t(split) * plan.split_tokens;
  const int64_t end = rec_end < start + plan.split_tokens ? rec_end : start + plan.split_tokens;
  const int rows = group * s.q_len;
  if (start >= end || row0 >= rows) return;  // the merge reads only the splits that hold tokens
  if (!pages_valid(v, b, s, false, start, end, P)) {
    if (threadIdx.x == 0) reject_sequence(ws, b, flags);
    return;
  }

  // Keys [start, end): the split is a multiple of BN tokens (plan_decode), so its tiles end at its
  // end or at the records' end, never in the next split's pages.
  const uint8_t* transition = ws.transition + record_offset(int64_t(b) * plan.transition_pages, 0, v.num_kv_heads, Cfg::record_bytes);
  const TileSource<T> src{v, a.new_k, a.new_v, transition, as_append(s), s.cold, rec_end, end, b, h};
  stage_prefill_queries<T, BM, D>(decode_rows_smem, a, s, h, group, row0, rows);
  // Every row sees every key of the split: the only mask is its end (position end - 1 for every
  // row). A warp whose rows are all padding skips the math (warp_last below the first key).
  const int wr0 = row0 + 16 * warp;
  const int64_t pos[1][2] = {{end - 1, end - 1}};
  const int ntiles = int((end - start + BN - 1) / BN);
  MmaRowsState<BM, D> st;
  mma_rows_attention<Cfg, BM, BN>(decode_rows_smem, src, a, start, ntiles, pos, end - 1, wr0 < rows ? end - 1 : start - 1, st);

  // ---- the split's partial state: unnormalised output, (max, sum) in natural-log units ----
  KVQ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    float lt = st.l[0][hh];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int rg = wr0 + g + 8 * hh;
    if (rg >= rows) continue;
    const size_t at = slot_row(plan, split, packed_query_row(s.q0, rg, group, a.num_q_heads, h));
    float2* dst = reinterpret_cast<float2*>(ws.partial + at * D);
    KVQ_UNROLL
    for (int ot = 0; ot < OT; ++ot) dst[4 * ot + i] = make_float2(st.o[0][ot][2 * hh], st.o[0][ot][2 * hh + 1]);
    if (i == 0) {
      ws.stats[2 * at] = st.m[0][hh] * 0.6931471805599453f;
      ws.stats[2 * at + 1] = lt;
    }
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/prefill/prefill_kernel.cuh - the tensor-core kernel of chunked-prefill attention (mma.sync;
// the sm_80 path, and Hopper's where its wgmma kernels do not serve).
//
// CTA = (row tile, sequence, KV head). Its BM (64 or 128) query rows are chunk tokens x GQA
// heads of one KV head, token-major (row r = token r / group, query head h * group + r % group),
// so every K/V tile is read and dequantized once for the whole group. 4 warps, BM / 4 rows (1 or 2
// m-tiles of 16) each, over the keys [0, last row's position] with the causal mask (mma_rows.cuh),
// then each row is normalised and stored.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/kernels/mma_rows.cuh"
#include "kvq/prefill/plan.hpp"
#include "kvq/prefill/prefill_setup.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Tokens per K/V tile: 64, or 32 where the accumulators of 2 m-tiles per warp (BM 128) or of
// head dim 256 need the registers.
constexpr int prefill_tile_tokens(int head_dim, int rows_per_cta) {
  return head_dim > 128 || rows_per_cta > 16 * kPrefillWarps ? 32 : 64;
}

template <class Cfg, int BM>
using PrefillSmem = MmaRowsSmem<Cfg, BM, prefill_tile_tokens(Cfg::head_dim, BM)>;

template <class Cfg, int BM>
__global__ void __launch_bounds__(kPrefillWarps * 32) KVQ_HIDDEN
    prefill_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, PrefillPlan plan,
                   uint8_t* transition, typename Cfg::dtype* out, uint32_t* flags) {
  using T = typename Cfg::dtype;
  using L = PrefillSmem<Cfg, BM>;
  constexpr int D = Cfg::head_dim, BN = L::Tile::BN, OT = D / 8;
  constexpr int MW = BM / (16 * kPrefillWarps);  // m-tiles of 16 rows per warp
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ SeqAttention s;
  __shared__ int bad;

  const int tile = plan.row_tiles - 1 - int(blockIdx.x);  // the longest rows (latest tokens) first
  const int b = blockIdx.y, h = blockIdx.z;
  const int group = a.num_q_heads / v.num_kv_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  PrefillCtaRows cr;
  if (!prefill_cta_rows(v, a, plan, b, Cfg::page, BM, tile, flags, s, bad, cr)) return;
  const int rows = cr.rows, row0 = cr.row0;
  const TileSource<T> src = prefill_tile_source<Cfg>(v, a, plan, transition, s, cr.last_pos, b, h);
  stage_prefill_queries<T, BM, D>(smem, a, s, h, group, row0, rows);
  const int ntiles = int((src.kv_end + BN - 1) / BN);

  // This warp's MW m-tiles of 16 rows; this thread's rows g and g + 8 of each, and their
  // positions. Padding rows take the last real row's position (finite softmax, never stored).
  const int wr0 = row0 + 16 * MW * warp;
  auto pos_of = [&](int rg) { return s.len + (rg < rows ? rg : rows - 1) / group; };
  int64_t pos[MW][2];
  KVQ_UNROLL
  for (int mw = 0; mw < MW; ++mw) pos[mw][0] = pos_of(wr0 + 16 * mw + g), pos[mw][1] = pos_of(wr0 + 16 * mw + g + 8);
  MmaRowsState<BM, D> st;
  mma_rows_attention<Cfg, BM, BN>(smem, src, a, 0, ntiles, pos, pos_of(wr0), pos_of(wr0 + 16 * MW - 1), st);
  const float(&l)[MW][2] = st.l;
  const float(&o)[MW][OT][4] = st.o;

  // ---- normalise and store this thread's rows ----
  KVQ_UNROLL
  for (int mw = 0; mw < MW; ++mw)
    KVQ_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      float lt = l[mw][hh];
      lt += __shfl_xor_sync(0xffffffffu, lt, 1);
      lt += __shfl_xor_sync(0xffffffffu, lt, 2);
      const int rg = wr0 + 16 * mw + g + 8 * hh;
      if (rg >= rows) continue;
      const float inv = 1.0f / lt;
      uint32_t* dst = reinterpret_cast<uint32_t*>(out + packed_query_row(s.q0, rg, group, a.num_q_heads, h) * D);
      KVQ_UNROLL
      for (int ot = 0; ot < OT; ++ot) dst[4 * ot + i] = pack2<T>(o[mw][ot][2 * hh] * inv, o[mw][ot][2 * hh + 1] * inv);
    }
}

}  // namespace detail
KVQ_NAMESPACE_END

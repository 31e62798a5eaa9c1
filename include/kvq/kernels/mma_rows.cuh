// kvq/kernels/mma_rows.cuh - the mma.sync attention of one CTA's BM query rows over a range of
// keys: the main loop of the prefill kernel (prefill_kernel.cuh) and of decode's many-row kernel
// (decode/rows_kernel.cuh), which differ only in their key range, their masks and what they do
// with the final state.
//
// 4 warps, BM / 4 rows (MW = BM / 64 m-tiles of 16) each, FlashAttention-2 style over the BN-token
// tiles [t_begin, t_begin + ntiles BN):
//   S (16 rows x BN tokens) = Q . K^T   mma.m16n8k16, Q and K from shared memory by ldmatrix
//   online softmax per row in the log2 domain; key t is masked for a row whose position is below t
//   O (16 rows x D)        += P . V     P from the S accumulators, V by ldmatrix.trans
// K/V tiles come from kv_tile.cuh through a 3-stage pipeline: while tile j is multiplied, tile
// j + 2 is being copied (cp.async) and, after the math, tile j + 1 (landed) is dequantized in
// shared memory; block-table entries are fetched a tile earlier still. Nothing dequantized is
// written to global memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/token_source.hpp"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/kernels/tile_decode.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kPrefillWarps = 4;

// Dynamic shared memory: q [BM][D] (panels of 128-byte swizzled rows like the K/V tiles), three
// K/V buffers of BN tokens, two raw stages.
template <class Cfg, int BM, int BN>
struct MmaRowsSmem {
  using Tile = KvTile<Cfg, BN>;
  static constexpr size_t q_bytes = size_t(BM) * Cfg::head_dim * sizeof(typename Cfg::dtype);
  static constexpr int stages = 3;  // K/V buffers: tile j in use, j + 1 being dequantized, j + 2 in flight
  static constexpr size_t raw_stage = Tile::raw_bytes > 0 ? Tile::raw_bytes : 16;
  static constexpr size_t kv_offset = q_bytes;
  static constexpr size_t raw_offset = kv_offset + 2 * stages * Tile::rows_bytes;
  static constexpr size_t bytes = raw_offset + 2 * raw_stage;
};

// A warp's state after the loop: for each of its MW m-tiles, rows g and g + 8 (hh = 0, 1) of this
// thread (g = lane / 4): running max m (log2 units of the scaled logits; -inf while no key was
// visible), this thread's part of the sum l (its quad's lanes hold the rest), and the
// unnormalised output o, channel pairs 8 ot + 2 i (+1) (i = lane % 4) in o[mw][ot][2 hh], [2 hh + 1].
template <int BM, int D>
struct MmaRowsState {
  static constexpr int MW = BM / (16 * kPrefillWarps), OT = D / 8;
  static_assert(BM % (16 * kPrefillWarps) == 0, "whole m-tiles per warp");
  float m[MW][2], l[MW][2], o[MW][OT][4];
};

// CTA-wide. The caller has issued the cp.async of the BM query rows into the q area of `smem`
// (MmaRowsSmem's layout), not committed. Keys [t_begin, t_begin + ntiles BN) come from src (rows
// past src.kv_end are zeros: mask them through pos); pos: the positions of this thread's rows (key t
// is visible to a row when t <= its position); warp_first / warp_last: the least and the largest
// position of the warp's rows.
template <class Cfg, int BM, int BN>
__device__ inline void mma_rows_attention(uint8_t* smem, const TileSource<typename Cfg::dtype>& src,
                                          const AttentionBatch<typename Cfg::dtype>& a, int64_t t_begin, int ntiles,
                                          const int64_t (&pos)[BM / (16 * kPrefillWarps)][2], int64_t warp_first,
                                          int64_t warp_last, MmaRowsState<BM, Cfg::head_dim>& st) {
  using T = typename Cfg::dtype;
  using L = MmaRowsSmem<Cfg, BM, BN>;
  using Tile = typename L::Tile;
  constexpr int D = Cfg::head_dim, P = Cfg::page, KS = D / 16, NT = BN / 8, OT = D / 8;
  constexpr int MW = BM / (16 * kPrefillWarps);  // m-tiles of 16 rows per warp
  uint8_t* qs = smem;
  auto raw = [&](int j) { return smem + L::raw_offset + size_t(j & 1) * L::raw_stage; };
  auto kbuf = [&](int j) { return smem + L::kv_offset + size_t(2 * (j % L::stages)) * Tile::rows_bytes; };
  auto vbuf = [&](int j) { return smem + L::kv_offset + size_t(2 * (j % L::stages) + 1) * Tile::rows_bytes; };
  constexpr int TP = Tile::tile_pages;
  __shared__ int32_t page_ids[4][TP];  // block-table entries of tiles j .. j + 3 (ring of 4)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, i = lane & 3;

  for (int idx = threadIdx.x; idx < 3 * TP; idx += blockDim.x)
    page_ids[idx / TP][idx % TP] = src.fetch_page_id(t_begin + int64_t(idx / TP) * BN, idx % TP, P);
  __syncthreads();
  issue_tile<Cfg, BN, kPrefillWarps * 32>(src, t_begin, page_ids[0], kbuf(0), vbuf(0), raw(0), threadIdx.x);
  cp_async_commit();
  if (ntiles > 1) issue_tile<Cfg, BN, kPrefillWarps * 32>(src, t_begin + BN, page_ids[1], kbuf(1), vbuf(1), raw(1), threadIdx.x);
  cp_async_commit();
  // Attention sinks: tile 0's sink rows (SinkRows), loaded while its copies land, replace what the
  // fill wrote there once every thread's decode is done ("none" configurations have no sinks).
  constexpr bool has_sinks = Tile::k_staged || Tile::v_staged;
  const int sinks = has_sinks && t_begin == 0 ? src.sink_rows() : 0;
  SinkRows<Cfg, BN, kPrefillWarps * 32> sink;
  if (sinks > 0) sink.load(src, sinks, threadIdx.x);
  cp_async_wait<1>();
  __syncthreads();
  decode_tile<Cfg, BN, kPrefillWarps * 32>(src, t_begin, kbuf(0), vbuf(0), raw(0), threadIdx.x);
  if (sinks > 0) {
    __syncthreads();
    sink.store(kbuf(0), vbuf(0), sinks, threadIdx.x);
  }
  __syncthreads();

  const float scale_log2 = a.softmax_scale * 1.4426950408889634f;
  float(&m)[MW][2] = st.m;
  float(&l)[MW][2] = st.l;
  float(&o)[MW][OT][4] = st.o;
  KVQ_UNROLL
  for (int mw = 0; mw < MW; ++mw) {
    m[mw][0] = m[mw][1] = -INFINITY;
    l[mw][0] = l[mw][1] = 0.0f;
    KVQ_UNROLL
    for (int ot = 0; ot < OT; ++ot) o[mw][ot][0] = o[mw][ot][1] = o[mw][ot][2] = o[mw][ot][3] = 0.0f;
  }

  for (int j = 0; j < ntiles; ++j) {
    const int64_t t0 = t_begin + int64_t(j) * BN;
    // Page ids of tile j + 3: loaded now, stored after this tile's math (the load's latency hides
    // behind it); tile j + 2's copies start now and land while tiles j and j + 1 are processed.
    const int32_t next_id = int(threadIdx.x) < TP ? src.fetch_page_id(t0 + 3 * BN, threadIdx.x, P) : 0;
    if (j + 2 < ntiles) issue_tile<Cfg, BN, kPrefillWarps * 32>(src, t0 + 2 * BN, page_ids[(j + 2) % 4], kbuf(j + 2), vbuf(j + 2), raw(j + 2), threadIdx.x);
    cp_async_commit();
    if (t0 <= warp_last) {  // some key of the tile is visible to this warp's rows
      const uint8_t* ks = kbuf(j);
      const uint8_t* vs = vbuf(j);
      // ---- S = Q . K^T: each K fragment serves the warp's MW m-tiles ----
      float sacc[MW][NT][4];
      KVQ_UNROLL
      for (int mw = 0; mw < MW; ++mw)
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) sacc[mw][nt][0] = sacc[mw][nt][1] = sacc[mw][nt][2] = sacc[mw][nt][3] = 0.0f;
      KVQ_UNROLL
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t qa[MW][4];
        KVQ_UNROLL
        for (int mw = 0; mw < MW; ++mw)
          ldmatrix_x4(qa[mw], qs + size_t(panel_chunk(BM, 16 * (MW * warp + mw) + (lane & 7) + 8 * ((lane >> 3) & 1),
                                                      2 * kk + (lane >> 4))) * 16);
        KVQ_UNROLL
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t kb[4];
          ldmatrix_x4(kb, ks + size_t(Tile::swizzle(16 * np + 8 * (lane >> 4) + (lane & 7), 2 * kk + ((lane >> 3) & 1))) * 16);
          KVQ_UNROLL
          for (int mw = 0; mw < MW; ++mw) {
            mma16816<T>(sacc[mw][2 * np], qa[mw], kb[0], kb[1]);
            mma16816<T>(sacc[mw][2 * np + 1], qa[mw], kb[2], kb[3]);
          }
        }
      }
      // ---- online softmax (log2 domain), the mask where the tile reaches past a row's position ----
      const bool mask = t0 + BN - 1 > warp_first;
      uint32_t pa[MW][NT / 2][4];
      KVQ_UNROLL
      for (int mw = 0; mw < MW; ++mw) {
        float mx[2] = {-INFINITY, -INFINITY};
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt)
          KVQ_UNROLL
          for (int e = 0; e < 4; ++e) {
            float x = sacc[mw][nt][e];
            if (a.softcap > 0.0f)
              x = a.softcap * tanhf(x * a.softmax_scale / a.softcap) * 1.4426950408889634f;
            else
              x *= scale_log2;
            if (mask && t0 + 8 * nt + 2 * i + (e & 1) > pos[mw][e >> 1]) x = -INFINITY;
            sacc[mw][nt][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
          }
        float corr[2];
        KVQ_UNROLL
        for (int hh = 0; hh < 2; ++hh) {
          mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
          mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
          const float m_new = fmaxf(m[mw][hh], mx[hh]);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          corr[hh] = exp2f(m[mw][hh] - m_use);
          m[mw][hh] = m_new;
          l[mw][hh] *= corr[hh];
          mx[hh] = m_use;
        }
        KVQ_UNROLL
        for (int ot = 0; ot < OT; ++ot) {
          o[mw][ot][0] *= corr[0], o[mw][ot][1] *= corr[0];
          o[mw][ot][2] *= corr[1], o[mw][ot][3] *= corr[1];
        }
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          const float p0 = exp2f(sacc[mw][nt][0] - mx[0]), p1 = exp2f(sacc[mw][nt][1] - mx[0]);
          const float p2 = exp2f(sacc[mw][nt][2] - mx[1]), p3 = exp2f(sacc[mw][nt][3] - mx[1]);
          pa[mw][nt / 2][2 * (nt & 1)] = pack2<T>(p0, p1);      // row g
          pa[mw][nt / 2][2 * (nt & 1) + 1] = pack2<T>(p2, p3);  // row g + 8
          // The denominator sums the probabilities as rounded for the P . V mma: the output is then
          // a weighted mean with weights that sum to 1 exactly (values with a large common offset,
          // e.g. dequantized zero points, would otherwise carry the rounding bias of the sum).
          l[mw][0] += pair_sum<T>(pa[mw][nt / 2][2 * (nt & 1)]);
          l[mw][1] += pair_sum<T>(pa[mw][nt / 2][2 * (nt & 1) + 1]);
        }
      }
      // ---- O += P . V: each V fragment serves the warp's MW m-tiles ----
      KVQ_UNROLL
      for (int kt = 0; kt < BN / 16; ++kt)
        KVQ_UNROLL
        for (int cp = 0; cp < OT / 2; ++cp) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, vs + size_t(Tile::swizzle(16 * kt + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * cp + (lane >> 4))) * 16);
          KVQ_UNROLL
          for (int mw = 0; mw < MW; ++mw) {
            mma16816<T>(o[mw][2 * cp], pa[mw][kt], vb[0], vb[1]);
            mma16816<T>(o[mw][2 * cp + 1], pa[mw][kt], vb[2], vb[3]);
          }
        }
    }
    if (int(threadIdx.x) < TP) page_ids[(j + 3) % 4][threadIdx.x] = next_id;
    cp_async_wait<1>();  // tile j + 1 has landed (j + 2 may still be in flight)
    __syncthreads();
    if (j + 1 < ntiles) decode_tile<Cfg, BN, kPrefillWarps * 32>(src, t0 + BN, kbuf(j + 1), vbuf(j + 1), raw(j + 1), threadIdx.x);
    __syncthreads();
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

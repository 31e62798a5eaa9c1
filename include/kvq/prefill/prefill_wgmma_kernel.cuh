// kvq/prefill/prefill_wgmma_kernel.cuh - the Hopper (sm_90a) kernel of chunked-prefill attention:
// the structure of prefill_kernel.cuh with warpgroup MMAs (numeric/wgmma.cuh) instead of mma.sync.
//
// CTA = (row tile, sequence, KV head), 2 warpgroups of 4 warps; its kPrefillRowsLarge query rows
// are chunk tokens x GQA heads of one KV head, token-major, warpgroup w taking rows 64w .. 64w+63
// (warp j of it rows 16j .. 16j+15, the accumulator layout of wgmma.cuh). Per K/V tile of BN tokens:
//   S (64 x BN)  = Q . K^T   wgmma m64nBNk16, Q and K from shared memory (K-major panels)
//   online softmax per row in the log2 domain (ex2.approx), causal mask where the tile reaches
//   the chunk; P converted in registers to the A layout
//   O (64 x D)  += P . V     wgmma m64nDk16, P from registers, V from shared memory (MN-major)
// The O wgmma of tile j runs while the CTA dequantizes tile j + 1; the CTA-wide barrier that ends
// the iteration waits for it. K/V tiles come from kv_tile.cuh through the same 3-stage pipeline
// as the mma.sync kernel (tile j + 2 copied while j is multiplied and j + 1 dequantized), written
// in the 128-byte-swizzled panel layout the descriptors describe; every writer fences its shared
// memory writes for the async proxy before the barrier that publishes them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/numeric/wgmma.cuh"
#include "kvq/prefill/kv_tile.cuh"
#include "kvq/prefill/plan.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kPrefillWgmmaThreads = 256;  // two warpgroups

// Dynamic shared memory (offsets from the first 1024-byte boundary of the allocation, whose
// 1024 spare bytes pay for that alignment): q [D/64][BM][64] panels; three K/V buffers, each k
// then v as [D/64][BN][64] panels; two raw stages (quantized bytes of a tile).
template <class Cfg, int BN>
struct PrefillWgmmaSmem {
  using Tile = KvTile<Cfg, BN>;
  static constexpr int BM = kPrefillRowsLarge;
  static constexpr size_t q_bytes = size_t(BM) * Cfg::head_dim * sizeof(typename Cfg::dtype);
  static constexpr int stages = 3;
  static constexpr size_t raw_stage = Tile::raw_bytes > 0 ? Tile::raw_bytes : 16;
  static constexpr size_t kv_offset = q_bytes;
  static constexpr size_t raw_offset = kv_offset + 2 * stages * Tile::rows_bytes;
  static constexpr size_t bytes = raw_offset + 2 * raw_stage + 1024;
  static_assert(q_bytes % 1024 == 0 && Tile::rows_bytes % 1024 == 0, "panels start on 1024-byte boundaries");
};

// CTAs per multiprocessor the kernel is compiled for: 32-token tiles leave room for two (registers
// at most 128 a thread, ~90-100 KB of shared memory each), 64-token tiles for one.
template <int BN>
constexpr int prefill_wgmma_min_ctas() { return BN == 32 ? 2 : 1; }

template <class Cfg, int BN>
__global__ void __launch_bounds__(kPrefillWgmmaThreads, prefill_wgmma_min_ctas<BN>()) KVQ_HIDDEN
    prefill_wgmma_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, PrefillPlan plan,
                         uint8_t* transition, typename Cfg::dtype* out, uint32_t* flags) {
#if KVQ_WGMMA_DEVICE
  using T = typename Cfg::dtype;
  using L = PrefillWgmmaSmem<Cfg, BN>;
  using Tile = typename L::Tile;
  constexpr int D = Cfg::head_dim, P = Cfg::page, BM = L::BM, KS = D / 16, NB = BN / 8;
  static_assert(D == 64 || D == 128, "the wgmma kernel serves head dims 64 and 128");
  // Its own name: an extern __shared__ array is one symbol per translation unit.
  extern __shared__ __align__(16) uint8_t prefill_wgmma_smem[];
  const uint32_t raw_base = static_cast<uint32_t>(__cvta_generic_to_shared(prefill_wgmma_smem));
  const uint32_t pad = (1024u - raw_base % 1024u) % 1024u;
  uint8_t* const smem = prefill_wgmma_smem + pad;
  const uint32_t sbase = raw_base + pad;  // shared-window address of smem
  uint8_t* qs = smem;
  auto raw = [&](int j) { return smem + L::raw_offset + size_t(j & 1) * L::raw_stage; };
  auto kv_at = [&](int j, int role) { return L::kv_offset + size_t(2 * (j % L::stages) + role) * Tile::rows_bytes; };
  constexpr int TP = Tile::tile_pages;
  __shared__ int32_t page_ids[4][TP];  // block-table entries of tiles j .. j + 3 (ring of 4)
  __shared__ SeqAttention s;
  __shared__ int bad;

  const int tile = plan.row_tiles - 1 - int(blockIdx.x);  // the longest rows (latest tokens) first
  const int b = blockIdx.y, h = blockIdx.z;
  const int group = a.num_q_heads / v.num_kv_heads;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  PrefillCtaRows cr;
  if (!prefill_cta_rows(v, a, plan, b, P, BM, tile, flags, s, bad, cr)) return;
  const int rows = cr.rows, row0 = cr.row0;
  const TileSource<T> src = prefill_tile_source<Cfg>(v, a, plan, transition, s, cr.last_pos, b, h);
  stage_prefill_queries<T, BM, D>(qs, a, s, h, group, row0, rows);
  const int ntiles = int((src.kv_end + BN - 1) / BN);
  for (int idx = threadIdx.x; idx < 3 * TP; idx += blockDim.x)
    page_ids[idx / TP][idx % TP] = src.fetch_page_id(int64_t(idx / TP) * BN, idx % TP, P);
  __syncthreads();
  issue_tile<Cfg, BN>(src, 0, page_ids[0], smem + kv_at(0, 0), smem + kv_at(0, 1), raw(0));
  cp_async_commit();
  if (ntiles > 1) issue_tile<Cfg, BN>(src, BN, page_ids[1], smem + kv_at(1, 0), smem + kv_at(1, 1), raw(1));
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  decode_tile<Cfg, BN, kPrefillWgmmaThreads>(src, 0, smem + kv_at(0, 0), smem + kv_at(0, 1), raw(0));
  fence_proxy_async_shared();
  __syncthreads();

  // This thread's rows: g and g + 8 of its warp's 16 (CTA rows 64 wg + 16 warp + g, + 8) and their
  // positions. Padding rows take the last real row's position (finite softmax, never stored).
  const int wr0 = row0 + 64 * wg + 16 * warp;
  auto pos_of = [&](int rg) { return s.len + (rg < rows ? rg : rows - 1) / group; };
  const int64_t pos[2] = {pos_of(wr0 + g), pos_of(wr0 + g + 8)};
  const int64_t wg_first = pos_of(row0 + 64 * wg);
  const bool capped = a.softcap > 0.0f;
  const float scale_log2 = a.softmax_scale * 1.4426950408889634f;  // > 0 (check_attention_run)
  const float cap_pre = capped ? a.softmax_scale / a.softcap : 0.0f, cap_log2 = a.softcap * 1.4426950408889634f;
  // Descriptors: Q (this warpgroup's 64 rows of each panel) and K as K-major operands, V MN-major.
  const uint32_t q_addr = sbase + 64 * wg * 128;
  auto q_desc = [&](int kk) { return wgmma_desc(q_addr + (kk / 4) * BM * 128 + (kk % 4) * 32, 16, 1024); };
  auto k_desc = [&](int j, int kk) {
    return wgmma_desc(sbase + uint32_t(kv_at(j, 0)) + (kk / 4) * BN * 128 + (kk % 4) * 32, 16, 1024);
  };
  auto v_desc = [&](int j, int kt) { return wgmma_desc(sbase + uint32_t(kv_at(j, 1)) + kt * 2048, BN * 128, 1024); };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[D / 2];
  KVQ_UNROLL
  for (int r = 0; r < D / 2; ++r) o[r] = 0.0f;

  for (int j = 0; j < ntiles; ++j) {
    const int64_t t0 = int64_t(j) * BN;
    // Page ids of tile j + 3: loaded now, stored after this tile's math; tile j + 2's copies start now.
    const int32_t next_id = int(threadIdx.x) < TP ? src.fetch_page_id(t0 + 3 * BN, threadIdx.x, P) : 0;
    if (j + 2 < ntiles)
      issue_tile<Cfg, BN>(src, t0 + 2 * BN, page_ids[(j + 2) % 4], smem + kv_at(j + 2, 0), smem + kv_at(j + 2, 1), raw(j + 2));
    cp_async_commit();
    {  // every warpgroup runs every tile of the CTA (wgmma in a branch would be serialized; a tile
       // past all of one warpgroup's rows, at most one at the end, is masked to P = 0)
      // ---- S = Q . K^T ----
      float sacc[BN / 2];
      wgmma_fence();
      KVQ_UNROLL
      for (int kk = 0; kk < KS; ++kk) wgmma_ss<T, BN>(sacc, q_desc(kk), k_desc(j, kk), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_pin(sacc);
      // ---- online softmax (log2 domain), causal mask where the tile reaches the chunk ----
      // Without a softcap the logits stay raw: the max commutes with the positive scale, and each
      // probability is one FFMA and one EX2 (x scale log2(e) - m). With one, they are mapped to
      // log2 units first (uniform branch, kept out of the common path).
      if (capped) {
        KVQ_UNROLL
        for (int x = 0; x < BN / 2; ++x) sacc[x] = cap_log2 * tanhf(sacc[x] * cap_pre);
      }
      const float sc = capped ? 1.0f : scale_log2;
      if (t0 + BN - 1 > wg_first) {  // some key of the tile is past some row's position
        // Keys 8 nb + (e & 1) (+ t0 + 2i) past a row's position are masked: 32-bit limits per row.
        int lim[2];
        KVQ_UNROLL
        for (int hh = 0; hh < 2; ++hh) {
          const int64_t d = pos[hh] - t0 - 2 * i;
          lim[hh] = d < -1 ? -1 : d > BN ? BN : int(d);
        }
        KVQ_UNROLL
        for (int nb = 0; nb < NB; ++nb)
          KVQ_UNROLL
          for (int e = 0; e < 4; ++e)
            if (8 * nb + (e & 1) > lim[e >> 1]) sacc[4 * nb + e] = -INFINITY;
      }
      float mx[2] = {-INFINITY, -INFINITY};
      KVQ_UNROLL
      for (int nb = 0; nb < NB; ++nb)
        KVQ_UNROLL
        for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], sacc[4 * nb + e]);
      float corr[2];
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
        const float m_new = fmaxf(m[hh], mx[hh] * sc);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        corr[hh] = exp2_approx(m[hh] - m_use);
        m[hh] = m_new;
        l[hh] *= corr[hh];
        mx[hh] = m_use;
      }
      if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {  // a running max moved: rescale
        KVQ_UNROLL
        for (int nb = 0; nb < D / 8; ++nb) {
          o[4 * nb] *= corr[0], o[4 * nb + 1] *= corr[0];
          o[4 * nb + 2] *= corr[1], o[4 * nb + 3] *= corr[1];
        }
      }
      uint32_t pa[BN / 16][4];  // P in the A layout: k-step kt = tokens 16 kt .. 16 kt + 15
      KVQ_UNROLL
      for (int nb = 0; nb < NB; ++nb) {
        const float p0 = exp2_approx(fmaf(sacc[4 * nb], sc, -mx[0])), p1 = exp2_approx(fmaf(sacc[4 * nb + 1], sc, -mx[0]));
        const float p2 = exp2_approx(fmaf(sacc[4 * nb + 2], sc, -mx[1])), p3 = exp2_approx(fmaf(sacc[4 * nb + 3], sc, -mx[1]));
        pa[nb / 2][2 * (nb & 1)] = pack2<T>(p0, p1);      // row g
        pa[nb / 2][2 * (nb & 1) + 1] = pack2<T>(p2, p3);  // row g + 8
        l[0] += pair_sum<T>(pa[nb / 2][2 * (nb & 1)]);      // the probabilities as rounded for the
        l[1] += pair_sum<T>(pa[nb / 2][2 * (nb & 1) + 1]);  // P . V wgmma (prefill_kernel.cuh says why)
      }
      // ---- O += P . V (completes behind the dequantization of the next tile) ----
      wgmma_fence();
      KVQ_UNROLL
      for (int kt = 0; kt < BN / 16; ++kt) wgmma_rs<T, D, 1>(o, pa[kt], v_desc(j, kt), 1);
      wgmma_commit();
    }
    if (int(threadIdx.x) < TP) page_ids[(j + 3) % 4][threadIdx.x] = next_id;
    cp_async_wait<1>();  // tile j + 1 has landed (j + 2 may still be in flight)
    __syncthreads();
    if (j + 1 < ntiles) decode_tile<Cfg, BN, kPrefillWgmmaThreads>(src, t0 + BN, smem + kv_at(j + 1, 0), smem + kv_at(j + 1, 1), raw(j + 1));
    wgmma_wait<0>();  // tile j's buffers are free for tile j + 3 (issued next iteration)
    wgmma_pin(o);
    fence_proxy_async_shared();
    __syncthreads();
  }

  // ---- normalise and store this thread's rows ----
  KVQ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    float lt = l[hh];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int rg = wr0 + g + 8 * hh;
    if (rg >= rows) continue;
    const float inv = 1.0f / lt;
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + (size_t(s.q0 + rg / group) * a.num_q_heads + h * group + rg % group) * D);
    KVQ_UNROLL
    for (int nb = 0; nb < D / 8; ++nb) dst[4 * nb + i] = pack2<T>(o[4 * nb + 2 * hh] * inv, o[4 * nb + 2 * hh + 1] * inv);
  }
#else
  // Not sm_90a code: prefill_impl.cuh never launches this kernel without it (wgmma_available).
  (void)v, (void)a, (void)plan, (void)transition, (void)out, (void)flags;
  __trap();
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

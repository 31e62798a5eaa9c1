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
#include "kvq/prefill/tile_decode.cuh"
#include "kvq/prefill/plan.hpp"
#include "kvq/prefill/wgmma_softmax.cuh"

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
  constexpr int D = Cfg::head_dim, P = Cfg::page, BM = L::BM, KS = D / 16;
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
  issue_tile<Cfg, BN, kPrefillWgmmaThreads>(src, 0, page_ids[0], smem + kv_at(0, 0), smem + kv_at(0, 1), raw(0), threadIdx.x);
  cp_async_commit();
  if (ntiles > 1) issue_tile<Cfg, BN, kPrefillWgmmaThreads>(src, BN, page_ids[1], smem + kv_at(1, 0), smem + kv_at(1, 1), raw(1), threadIdx.x);
  cp_async_commit();
  // Attention sinks: tile 0's sink rows (SinkRows), loaded while its copies land, replace what the
  // fill wrote there once every thread's decode is done ("none" configurations have no sinks).
  constexpr bool has_sinks = Tile::k_staged || Tile::v_staged;
  const int sinks = has_sinks ? src.sink_rows() : 0;
  SinkRows<Cfg, BN, kPrefillWgmmaThreads> sink;
  if (sinks > 0) sink.load(src, sinks, threadIdx.x);
  cp_async_wait<1>();
  __syncthreads();
  decode_tile<Cfg, BN, kPrefillWgmmaThreads>(src, 0, smem + kv_at(0, 0), smem + kv_at(0, 1), raw(0), threadIdx.x);
  if (sinks > 0) {
    __syncthreads();
    sink.store(smem + kv_at(0, 0), smem + kv_at(0, 1), sinks, threadIdx.x);
  }
  fence_proxy_async_shared();
  __syncthreads();

  // This thread's rows: g and g + 8 of its warp's 16, CTA rows 64 wg + 16 warp + g, + 8 (wgmma_softmax.cuh).
  const int wr0 = row0 + 64 * wg + 16 * warp;
  const WgmmaSoftmaxRows sm = softmax_rows(a.softmax_scale, a.softcap, s.len, rows, group, row0 + 64 * wg, wr0, g, i);
  // Descriptors: Q (this warpgroup's 64 rows of each panel) and K as K-major operands, V MN-major.
  const uint32_t q_addr = sbase + 64 * wg * 128;
  auto q_desc = [&](int kk) { return kmajor_desc(q_addr, BM, kk); };
  auto k_desc = [&](int j, int kk) { return kmajor_desc(sbase + uint32_t(kv_at(j, 0)), BN, kk); };
  auto v_desc = [&](int j, int kt) { return mnmajor_desc(sbase + uint32_t(kv_at(j, 1)), BN, kt); };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[D / 2];
  KVQ_UNROLL
  for (int r = 0; r < D / 2; ++r) o[r] = 0.0f;

  for (int j = 0; j < ntiles; ++j) {
    const int64_t t0 = int64_t(j) * BN;
    // Page ids of tile j + 3: loaded now, stored after this tile's math; tile j + 2's copies start now.
    const int32_t next_id = int(threadIdx.x) < TP ? src.fetch_page_id(t0 + 3 * BN, threadIdx.x, P) : 0;
    if (j + 2 < ntiles)
      issue_tile<Cfg, BN, kPrefillWgmmaThreads>(src, t0 + 2 * BN, page_ids[(j + 2) % 4], smem + kv_at(j + 2, 0), smem + kv_at(j + 2, 1), raw(j + 2), threadIdx.x);
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
      // ---- online softmax (wgmma_softmax.cuh) ----
      float corr[2];
      softmax_probabilities<BN>(sacc, sm, t0, m, l, corr);
      rescale_rows<D>(o, corr);
      uint32_t pa[BN / 16][4];
      pack_probabilities<T, BN>(sacc, pa, l);
      // ---- O += P . V (completes behind the dequantization of the next tile) ----
      wgmma_fence();
      KVQ_UNROLL
      for (int kt = 0; kt < BN / 16; ++kt) wgmma_rs<T, D, 1>(o, pa[kt], v_desc(j, kt), 1);
      wgmma_commit();
    }
    if (int(threadIdx.x) < TP) page_ids[(j + 3) % 4][threadIdx.x] = next_id;
    cp_async_wait<1>();  // tile j + 1 has landed (j + 2 may still be in flight)
    __syncthreads();
    if (j + 1 < ntiles) decode_tile<Cfg, BN, kPrefillWgmmaThreads>(src, t0 + BN, smem + kv_at(j + 1, 0), smem + kv_at(j + 1, 1), raw(j + 1), threadIdx.x);
    wgmma_wait<0>();  // tile j's buffers are free for tile j + 3 (issued next iteration)
    wgmma_pin(o);
    fence_proxy_async_shared();
    __syncthreads();
  }

  store_rows<T, D>(o, l, wr0 + g, rows, group, s.q0, a.num_q_heads, h, i, out);
#else
  // Not sm_90a code: prefill_impl.cuh never launches this kernel without it (wgmma_available).
  (void)v, (void)a, (void)plan, (void)transition, (void)out, (void)flags;
  __trap();
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/prefill/prefill_ws_kernel.cuh - the warp-specialized Hopper (sm_90a) kernel of chunked-prefill
// attention: two warpgroups fill K/V tiles, two warpgroups multiply, handing tiles over through
// mbarriers instead of CTA-wide barriers (the structure of FlashAttention-3).
//
// CTA = (row tile, sequence, KV head), 4 warpgroups, kPrefillRowsLarge query rows (chunk tokens x
// GQA heads of one KV head, token-major, as in prefill_kernel.cuh).
//   warpgroups 0 and 1, the producers: per K/V tile of BN tokens, the copy of its bytes (a tile
//     inside one record of two quantized roles: bulk copies of its staged page by one producer
//     thread, issue_tile_bulk; any other: cp.async by all of them, issue_tile, quantized records
//     into a raw slot, model-dtype rows straight into the stage), then the dequantization of the
//     record rows into the stage (decode_tile), a proxy fence and an arrive on the stage's `full`
//     barrier; a tile with nothing to dequantize is handed over by its copies' completion
//     (cp.async-tracked arrivals), not by the producer loop. The raw slots have mbarriers of their
//     own (`raw_full`: its bytes landed; `raw_free`: every producer thread is done with it), so the
//     producers never wait for each other where a role is quantized.
//     Attention sinks: the consumers overwrite tile 0's sink rows once it is complete (SinkRows).
//     They run up to `stages` - 1 tiles ahead; whatever writes a stage first waits on its `empty`
//     barrier (the copies of model-dtype rows, else the decode). Two warpgroups, not one: a
//     thread's decode is a chain of shared loads, math and stores, and with one warp per scheduler
//     the quantized formats wait on it (one producer warpgroup measured 10-30 % slower on an H200).
//   warpgroups 2 and 3, the consumers: 64 query rows each, per tile
//       S_j = Q . K_j^T                 (wgmma, both operands in shared memory)
//       O  += P_{j-1} . V_{j-1}         (wgmma, P from registers; issued right behind S_j)
//       softmax of S_j                  (while P_{j-1} . V_{j-1} runs on the tensor cores)
//       wait for O, release stage j-1, rescale O, P_j to registers
//     so the softmax of one tile overlaps the P . V product of the previous one, and the two
//     consumer warpgroups overlap each other's softmax with their products.
// Shared memory (offsets from the first 1024-byte boundary of the dynamic allocation): q panels
// [D/64][BM][64]; `stages` K/V stages, each k then v as [D/64][BN][64] panels (kv_tile.cuh);
// `stages` raw slots of a tile's quantized bytes (quantized roles only); `stages` (3 to 5) is as
// many as fit (PrefillWsSmem).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/numeric/mbarrier.cuh"
#include "kvq/numeric/cluster.cuh"
#include "kvq/numeric/wgmma.cuh"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/kernels/tile_decode.cuh"
#include "kvq/prefill/plan.hpp"
#include "kvq/prefill/prefill_setup.cuh"
#include "kvq/prefill/policy.hpp"
#include "kvq/prefill/wgmma_softmax.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kPrefillWsProducers = 256;  // two producer warpgroups (threads 0 .. 255)
constexpr int kPrefillWsThreads = kPrefillWsProducers + 256;  // + two consumer warpgroups
// Registers a thread (setmaxnreg; the CTA's 65,536 split between the roles): the consumers keep S,
// P and O of 64 rows in registers (160 hold them without spills for 64-token tiles), the producers
// a tile chunk's decode (96: fewer spills of their loop state than with 88).
// 128-token tiles (the "none" configurations) hold an S tile of 64 x 128 in registers: 208 / 48.
template <int BN>
KVQ_HD_CONSTEXPR int prefill_ws_consumer_regs() { return BN == 128 ? 208 : 160; }
template <int BN>
KVQ_HD_CONSTEXPR int prefill_ws_producer_regs() { return 65536 / kPrefillWsProducers - prefill_ws_consumer_regs<BN>(); }  // 96 / 48
constexpr int kPrefillWsTile = 64;      // K/V tokens per tile of the quantized configurations
// The tile of configuration Cfg: 128 tokens when neither role is quantized (the tile's k and v
// rows, 64 KB a stage, leave room for three stages), else 64.
template <class Cfg>
KVQ_HD_CONSTEXPR int prefill_ws_tile() {
  return !Codec<typename Cfg::k_quant>::quantized && !Codec<typename Cfg::v_quant>::quantized ? 128 : kPrefillWsTile;
}

// Stages: as many as fit in the 227 KB of shared memory a CTA may have on sm_90, the kernel's only
// architecture (cudaDevAttrMaxSharedMemoryPerBlockOptin of every Hopper GPU), at most Policy::kWsMaxStages:
// the producer issues tile j + stages - 1 when the consumers release tile j - 1, so the stage
// count is how far ahead of the math the copies run.
constexpr size_t kPrefillWsSmemLimit = 227 * 1024 - 512;  // dynamic bytes: the kernel's static ones fit in the rest

template <class Cfg, int BN, class Policy>
struct PrefillWsSmem {
  using Tile = KvTile<Cfg, BN>;
  static constexpr int BM = kPrefillRowsLarge;
  static constexpr size_t q_bytes = size_t(BM) * Cfg::head_dim * sizeof(typename Cfg::dtype);
  static constexpr size_t raw_slot = Tile::raw_bytes > 0 ? (Tile::raw_bytes + 15) / 16 * 16 : 0;
  static constexpr size_t fixed = q_bytes + 1024, per_stage = 2 * Tile::rows_bytes + raw_slot;
  static constexpr int fit = int((kPrefillWsSmemLimit - fixed) / per_stage);
  static constexpr int stages = fit < Policy::kWsMaxStages ? fit : Policy::kWsMaxStages;
  static_assert(stages >= 3, "at least three stages (two tiles in flight while one is consumed)");
  static constexpr size_t kv_offset = q_bytes;
  static constexpr size_t raw_offset = kv_offset + 2 * stages * Tile::rows_bytes;
  static constexpr size_t bytes = raw_offset + stages * raw_slot + 1024;
  static_assert(q_bytes % 1024 == 0 && Tile::rows_bytes % 1024 == 0, "panels start on 1024-byte boundaries");
};

// Paired CTAs: where both roles are quantized and both have the fast decode path
// (full_tiles_split_by_role), the kernel runs in clusters of two CTAs, adjacent row tiles of one
// (sequence, KV head), which attend to the same record prefix. Each full record tile (the tiles
// below StagedPage::raw_only_tiles) is dequantized once for both: rank 0 dequantizes its keys, rank 1
// its values, each chunk stored into its own stage and, by st.async (cluster.cuh), into the
// partner's same stage, completing on the partner's `full` barrier (whose thread 0 announces the
// bytes with its arrival). So each CTA's producers decode half of those tiles; their per-tile chain
// is what limits the quantized kernels (docs/PERF_NOTES.md). A CTA writes the partner's stage once
// the partner's consumers released its previous tile (`peer_empty`, which the partner's consumer warps
// arrive on). A CTA without a partner (ragged batches, the padding CTA of an odd row-tile count, a
// launch without clusters) runs unpaired. Policy::kWsPairs false compiles the unpaired kernel.
template <class Cfg, int BN, class Policy>
KVQ_HD_CONSTEXPR bool prefill_ws_paired() {
  return Policy::kWsPairs && full_tiles_split_by_role<Cfg, BN, kPrefillWsProducers>();
}
constexpr int kPrefillWsConsumerWarps = (kPrefillWsThreads - kPrefillWsProducers) / 32;  // what peer_empty counts

// Policy: a PrefillPolicy (prefill/policy.hpp).
template <class Cfg, int BN, class Policy>
__global__ void __launch_bounds__(kPrefillWsThreads, 1) KVQ_HIDDEN  // 1: ptxas needs the entry register count for setmaxnreg
    prefill_ws_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, PrefillPlan plan,
                      uint8_t* transition, typename Cfg::dtype* out, uint32_t* flags) {
#if KVQ_WGMMA_DEVICE
  using T = typename Cfg::dtype;
  using L = PrefillWsSmem<Cfg, BN, Policy>;
  using Tile = typename L::Tile;
  constexpr int D = Cfg::head_dim, P = Cfg::page, BM = L::BM, KS = D / 16, S = L::stages, TP = Tile::tile_pages;
  static_assert(D == 64 || D == 128, "the wgmma kernels serve head dims 64 and 128");
  extern __shared__ __align__(16) uint8_t prefill_ws_smem[];
  const uint32_t raw_base = static_cast<uint32_t>(__cvta_generic_to_shared(prefill_ws_smem));
  const uint32_t pad = (1024u - raw_base % 1024u) % 1024u;
  uint8_t* const smem = prefill_ws_smem + pad;
  const uint32_t sbase = raw_base + pad;  // shared-window address of smem
  auto kv_at = [&](int j, int role) { return L::kv_offset + size_t(2 * (j % S) + role) * Tile::rows_bytes; };
  __shared__ uint64_t full[S], empty[S];  // stage j % S holds tile j: filled / released
  // Raw slot j % S (quantized roles): every producer thread's copies of tile j landed / every
  // producer thread is done with tile j (its decode, and the page ids it stored for tile j + S).
  __shared__ uint64_t raw_full[S], raw_free[S];
  constexpr int PR = S + 1;                // page-id ring: tiles j .. j + S
  __shared__ int32_t page_ids[PR][TP];    // block-table entries of tiles j .. j + S
  __shared__ uint64_t peer_empty[S];     // paired tile j: the partner's consumers released it (count: their warps)
  __shared__ SeqAttention s;
  __shared__ int bad;

  constexpr bool kPairs = prefill_ws_paired<Cfg, BN, Policy>();
  const int tile = prefill_cta_tile(plan.row_tiles, blockIdx.x);  // the longest rows (latest tokens) first
  if (kPairs && tile < 0) return;  // the padding CTA of an odd row-tile count (no rows, not paired)
  const int b = blockIdx.y, h = blockIdx.z;
  const int group = a.num_q_heads / v.num_kv_heads;
  // Warp-uniform as far as the compiler can tell (a shuffle's result), so that the wgmma of the
  // consumer branch is not treated as divergent code.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  PrefillCtaRows cr;
  if (!prefill_cta_rows(v, a, plan, b, P, BM, tile, flags, s, bad, cr)) return;
  const int rows = cr.rows, row0 = cr.row0;
  const TileSource<T> src = prefill_tile_source<Cfg>(v, a, plan, transition, s, cr.last_pos, b, h);
  const int ntiles = int((src.kv_end + BN - 1) / BN);
  // Paired with the partner (rank ^ 1, CTA blockIdx.x ^ 1) when both hold rows of the sequence
  // (each CTA decides it from the same sequence, so both decide alike), the prefix has full record
  // tiles and the launch made clusters of two: tiles j < n_pair are then decoded by role.
  const int peer_tile = prefill_cta_tile(plan.row_tiles, blockIdx.x ^ 1u);
  const int full_tiles = kPairs ? Tile::raw_only_tiles(src.rec_end) : 0;
  const bool paired = kPairs && full_tiles > 0 && peer_tile >= 0 && peer_tile * BM < rows && cluster_size() == 2u;
  const int n_pair = paired ? full_tiles : 0;  // tiles j < n_pair are decoded by role
  stage_prefill_queries<T, BM, D>(smem, a, s, h, group, row0, rows);
  cp_async_commit();
  for (int idx = threadIdx.x; idx < S * TP; idx += blockDim.x)  // tiles 0 .. S - 1
    page_ids[idx / TP][idx % TP] = src.fetch_page_id(int64_t(idx / TP) * BN, idx % TP, P);
  if (threadIdx.x < S) {
    mbarrier_init(&full[threadIdx.x], kPrefillWsProducers);  // every producer thread arrives
    mbarrier_init(&empty[threadIdx.x], 256);  // every consumer thread arrives
    if (Tile::k_staged || Tile::v_staged) {
      mbarrier_init(&raw_full[threadIdx.x], kPrefillWsProducers);  // every producer thread's copies
      mbarrier_init(&raw_free[threadIdx.x], kPrefillWsProducers);  // every producer thread
    }
    if (kPairs) {
      mbarrier_init(&peer_empty[threadIdx.x], kPrefillWsConsumerWarps);  // every consumer warp of the partner
      fence_mbarrier_init_cluster();
    }
  }
  cp_async_wait<0>();
  fence_proxy_async_shared();
  __syncthreads();
  if (paired) cluster_sync();  // the partner's barriers are initialised before either touches them

  if (wg < kPrefillWsProducers / 128) {
    setmaxnreg_dec<prefill_ws_producer_regs<BN>()>();
    // ---- producer: tiles up to j + S - 1 in flight while tile j is dequantized ----
    // Tile j is handed over through full[j % S] by two kinds of arrival from every producer thread:
    // cp_async_mbarrier_arrive right after its copies are issued (the phase stays open until they
    // land), and its own arrive, at issue for a tile with nothing to dequantize (model-dtype rows
    // only: the consumers then wait on the copies, not on this loop) or after decode_tile.
    // Stage j % S is free once the consumers released tile j - S: copies that write the stage
    // wait for that at issue; a tile of record tokens only copies into its raw slot and waits just
    // before its decode writes the stage, so the producers dequantize up to S - 1 tiles ahead.
    // The producers never meet at a barrier (where a role is quantized): the decode of tile j waits
    // on raw_full[j % S] (every producer thread's copies of it landed), and the refill of a raw slot
    // on raw_free of its previous tile (every producer thread done with it).
    constexpr bool staged = Tile::k_staged || Tile::v_staged;
    const unsigned tid = threadIdx.x;
    // Barrier b of stage s lives at b_at + 8 s (shared-window addresses, computed once); the loop
    // below tracks tile j's stage and phase instead of dividing by S each time.
    const uint32_t full_at = mbarrier_address(full), empty_at = mbarrier_address(empty);
    const uint32_t raw_full_at = mbarrier_address(raw_full), raw_free_at = mbarrier_address(raw_free);
    const uint32_t peer_empty_at = mbarrier_address(peer_empty);
    // Tile i issues raw bytes only when i < n_raw, by bulk copies when i < n_bulk, and is
    // dequantized when i < n_dec (the tile classes of staged_page.hpp: two ints compared a tile,
    // not 64-bit token positions).
    const int n_raw = Tile::raw_only_tiles(src.rec_end), n_bulk = Tile::bulk_tiles(src.rec_end, src.kv_end);
    const int n_dec = Tile::decoding_tiles(src.rec_end);
    // ntiles again, from a different expression: the compiler keeps this one in a uniform register,
    // while the CTA-wide ntiles, live across both roles' code, is spilled and reloaded twice a tile.
    const int n_all = Tile::tiles(src.kv_end);
    // Tile i into stage si (page ids from ring entry pi); when i >= S, `prev` is the parity of the
    // phase of tile i - S, the stage's previous tile (its release, and its raw slot's).
    auto issue = [&](int i, int si, int pi, uint32_t prev) {
      const int64_t t0 = int64_t(i) * BN;
      if (i >= S && i >= n_raw) mbarrier_wait(empty_at + 8 * si, prev);
      if (staged && i >= S) mbarrier_wait(raw_free_at + 8 * si, prev);  // tile i - S is done with the slot
      uint8_t* const raw_i = smem + L::raw_offset + size_t(si) * L::raw_slot;
      if (i < n_bulk) {
        // The common tile: one thread (lane 0 of warp i % 8, in turn) copies the page's runs in bulk;
        // the other producer threads only arrive. Its handover to the consumers follows its decode.
        if (tid == 32u * unsigned(i % (kPrefillWsProducers / 32))) {
          mbarrier_arrive_expect_tx(raw_full_at + 8 * si, uint32_t(Tile::page_bytes));
          issue_tile_bulk<Cfg, BN>(src, t0, page_ids[pi], raw_i, raw_full_at + 8 * si);
        } else {
          mbarrier_arrive(raw_full_at + 8 * si);
        }
        return;
      }
      uint8_t* const kv_i = smem + L::kv_offset + size_t(2 * si) * Tile::rows_bytes;
      issue_tile<Cfg, BN, kPrefillWsProducers>(src, t0, page_ids[pi], kv_i, kv_i + Tile::rows_bytes, raw_i, tid);
      cp_async_mbarrier_arrive(full_at + 8 * si);
      if (staged) cp_async_mbarrier_arrive_noinc(raw_full_at + 8 * si);
      if (i >= n_dec) mbarrier_arrive(full_at + 8 * si);
    };
    KVQ_UNROLL
    for (int j = 0; j < S - 1; ++j) {
      if (j < n_all) issue(j, j, j, 0u);
      cp_async_commit();
    }
    int s = 0, pi = S - 1;  // tile j's stage; the page-id ring entry of tile j + S - 1
    uint32_t phase = 0;      // parity of tile j's phase of its stage
    for (int j = 0; j < n_all; ++j) {
      // Tile j + S - 1 goes to the stage before tile j's and reuses it after tile j - 1, whose phase
      // parity is `phase` unless tile j opened a new round of the ring.
      const int si = s == 0 ? S - 1 : s - 1;
      const uint32_t prev = s == 0 ? phase ^ 1u : phase;
      const int pn = pi == PR - 1 ? 0 : pi + 1;  // the page-id entry of tile j + S
      // Page ids of tile j + S: loaded now, stored before this thread's raw_free arrive for tile j
      // (staged) or before the barrier of the next iteration (else); issue(j + S), one iteration
      // later, waits on that arrive (or barrier), which publishes them.
      const int32_t next_id = int(tid) < TP ? src.fetch_page_id(int64_t(j + S) * BN, tid, P) : 0;
      if constexpr (staged) {
        // Every producer thread's copies of tile j (decode reads them all), also for a tile that
        // does not decode: its slot's phases must not run ahead of its copies.
        mbarrier_wait(raw_full_at + 8 * s, phase);
        if (j < n_dec) {  // the same for every producer thread
          // Tile j - S released (at once when issue(j) waited already: tile j is not consumed
          // before this thread's arrive).
          if (j >= S) mbarrier_wait(empty_at + 8 * s, phase ^ 1u);
          const uint8_t* const raw_j = smem + L::raw_offset + size_t(s) * L::raw_slot;
          bool decoded = false;
          if constexpr (kPairs) {
            if (j < n_pair) {
              // This CTA's role of tile j, into its stage and (st.async, chunk by chunk as they are
              // decoded) into the partner's, once the partner's consumers released tile j - S.
              if (j >= S) mbarrier_wait(peer_empty_at + 8 * s, phase ^ 1u);
              const unsigned rank = cluster_rank();
              const PairChunks out{rank ^ 1u, peer_address(full_at + 8 * s, rank ^ 1u)};
              decode_full_tile_role<Cfg, BN, kPrefillWsProducers>(rank ? Role::kValue : Role::kKey,
                                                                  smem + L::kv_offset + size_t(2 * s + int(rank)) * Tile::rows_bytes,
                                                                  raw_j, tid, out);
              fence_proxy_async_shared();  // this thread's writes, for the consumers' wgmma
              if (tid == 0)
                mbarrier_arrive_expect_tx(full_at + 8 * s, uint32_t(Tile::rows_bytes));  // + the partner's role
              else
                mbarrier_arrive(full_at + 8 * s);
              decoded = true;
            }
          }
          if (!decoded) {
            uint8_t* const kv_j = smem + L::kv_offset + size_t(2 * s) * Tile::rows_bytes;
            decode_tile<Cfg, BN, kPrefillWsProducers>(src, int64_t(j) * BN, kv_j, kv_j + Tile::rows_bytes, raw_j, tid);
            fence_proxy_async_shared();  // this thread's writes, for the consumers' wgmma
            mbarrier_arrive(full_at + 8 * s);
          }
        }
        if (int(tid) < TP) page_ids[pn][tid] = next_id;
        mbarrier_arrive(raw_free_at + 8 * s);
        if (j + S - 1 < n_all) issue(j + S - 1, si, pi, prev);
        cp_async_commit();
      } else {
        // Nothing to dequantize: the barrier publishes the page ids stored in the last iteration.
        named_barrier_sync(1, kPrefillWsProducers);
        if (j + S - 1 < n_all) issue(j + S - 1, si, pi, prev);
        cp_async_commit();
        if (int(tid) < TP) page_ids[pn][tid] = next_id;
      }
      pi = pn;
      if (++s == S) s = 0, phase ^= 1u;
    }
  } else {
    // ---- consumers: consumer warpgroup cw takes CTA rows 64 cw .. 64 cw + 63 ----
    setmaxnreg_inc<prefill_ws_consumer_regs<BN>()>();
    const int cw = wg - kPrefillWsProducers / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane >> 2, i = lane & 3;
    const uint32_t peer_empty_remote = kPairs ? peer_address(mbarrier_address(peer_empty), cluster_rank() ^ 1u) : 0u;
    // This thread's rows: g and g + 8 of its warp's 16 (wgmma_softmax.cuh).
    const int wr0 = row0 + 64 * cw + 16 * warp;
    const WgmmaSoftmaxRows sm = softmax_rows(a.softmax_scale, a.softcap, s.len, rows, group, row0 + 64 * cw, wr0, g, i);
    // Descriptors: Q (this warpgroup's 64 rows of each panel) and K as K-major operands, V MN-major.
    const uint32_t q_addr = sbase + 64 * cw * 128;
    auto q_desc = [&](int kk) { return kmajor_desc(q_addr, BM, kk); };
    auto k_desc = [&](int j, int kk) { return kmajor_desc(sbase + uint32_t(kv_at(j, 0)), BN, kk); };
    auto v_desc = [&](int j, int kt) { return mnmajor_desc(sbase + uint32_t(kv_at(j, 1)), BN, kt); };
    auto issue_s = [&](float(&sacc)[BN / 2], int j) {
      KVQ_UNROLL
      for (int kk = 0; kk < KS; ++kk) wgmma_ss<T, BN>(sacc, q_desc(kk), k_desc(j, kk), kk > 0);
      wgmma_commit();
    };
    auto issue_pv = [&](float(&o)[D / 2], const uint32_t(&pa)[BN / 16][4], int j) {
      KVQ_UNROLL
      for (int kt = 0; kt < BN / 16; ++kt) wgmma_rs<T, D, 1>(o, pa[kt], v_desc(j, kt), 1);
      wgmma_commit();
    };

    // Every consumer warpgroup runs every tile of the CTA (a wgmma under a branch is serialized);
    // a tile past all of one warpgroup's rows, at most one at the end, is masked to P = 0.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[D / 2], sacc[BN / 2], corr[2];
    uint32_t pa[BN / 16][4];
    KVQ_UNROLL
    for (int r = 0; r < D / 2; ++r) o[r] = 0.0f;
    // Attention sinks: tile 0's rows [0, sinks) come from sink_k / sink_v or the ring, not from the
    // records the producers decoded (SinkRows). The consumers load them while tile 0 is filled and
    // overwrite them once it is complete (its `full` phase: every write of it, the partner's
    // included, has landed), so the producers' loop and the pairing do not change.
    const int sinks = Tile::k_staged || Tile::v_staged ? src.sink_rows() : 0;  // "none" has no sinks
    SinkRows<Cfg, BN, kPrefillWsThreads - kPrefillWsProducers> sink;
    if (sinks > 0) sink.load(src, sinks, threadIdx.x - kPrefillWsProducers);
    mbarrier_wait(&full[0], 0);
    if (sinks > 0) {
      sink.store(smem + kv_at(0, 0), smem + kv_at(0, 1), sinks, threadIdx.x - kPrefillWsProducers);
      fence_proxy_async_shared();  // this thread's writes, for both warpgroups' wgmma
      named_barrier_sync(2, kPrefillWsThreads - kPrefillWsProducers);
    }
    fence_proxy_async_shared();
    wgmma_fence();
    issue_s(sacc, 0);
    wgmma_wait<0>();
    wgmma_pin(sacc);
    softmax_probabilities<BN>(sacc, sm, 0, m, l, corr);
    pack_probabilities<T, BN>(sacc, pa, l);
    for (int j = 1; j < ntiles; ++j) {
      mbarrier_wait(&full[j % S], uint32_t((j / S) & 1));
      fence_proxy_async_shared();  // the stage's cp.async rows (completed, not fenced by their issuer), for wgmma
      wgmma_fence();
      issue_s(sacc, j);
      issue_pv(o, pa, j - 1);
      wgmma_wait<1>();  // S_j done (P_{j-1} . V_{j-1} may still run)
      wgmma_pin(sacc);
      softmax_probabilities<BN>(sacc, sm, int64_t(j) * BN, m, l, corr);
      wgmma_wait<0>();  // O complete: stage j - 1 is free, O may be rescaled, pa rewritten
      wgmma_pin(o);
      mbarrier_arrive(&empty[(j - 1) % S]);
      if (j - 1 + S < n_pair) {  // the partner writes tile j - 1 + S into this stage too
        __syncwarp();
        if (lane == 0) mbarrier_arrive_cluster(peer_empty_remote + 8u * unsigned((j - 1) % S));
      }
      rescale_rows<D>(o, corr);
      pack_probabilities<T, BN>(sacc, pa, l);
    }
    wgmma_fence();
    issue_pv(o, pa, ntiles - 1);
    wgmma_wait<0>();
    wgmma_pin(o);
    store_rows<T, D>(o, l, wr0 + g, rows, group, s.q0, a.num_q_heads, h, i, out);
  }
  if (paired) cluster_sync();  // neither CTA exits while the other may still store into it or arrive on it
#else
  // Not sm_90a code: prefill_impl.cuh never launches this kernel without it (wgmma_available).
  (void)v, (void)a, (void)plan, (void)transition, (void)out, (void)flags;
  __trap();
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

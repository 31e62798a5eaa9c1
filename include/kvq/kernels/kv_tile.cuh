// kvq/kernels/kv_tile.cuh - one K/V tile of the prefill kernel: BN consecutive tokens of one
// sequence and KV head, in the model dtype in shared memory, filled from wherever the contract
// says each token lives (attention/token_source.hpp).
//
// Shared memory (per buffer):
//   k, v  [D / 64 panels][BN][64] of T: 128-byte rows, 16-byte chunk c of row r at chunk c ^ (r % 8)
//         of its row (numeric/wgmma.cuh, panel_chunk): the layout wgmma reads with 128-byte
//         swizzle descriptors, and the 8 rows an ldmatrix reads hit 8 different bank groups.
//   raw   the quantized bytes of the tile (only for quantized roles): BN / SP staged pages of SP
//         tokens (staged_page.hpp, the layout and where each byte comes from in the record).
// Filling a tile is two steps so the copy overlaps the math of the tiles before it:
//   issue_tile():      cp.async of the raw bytes of record tokens (quantized roles) and of the
//                      model-dtype rows (hot ring, new tokens, "none" records) straight into k / v;
//                      zeros past the end. issue_tile_bulk(): the raw bytes of a tile inside one
//                      record by one thread's bulk copies (the warp-specialized kernel's common tile);
//   decode_tile():     after the copy landed, the record tokens of quantized roles are dequantized
//                      from raw into k / v (tile_decode.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/attention/token_source.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/numeric/bulk_copy.cuh"
#include "kvq/numeric/mma.cuh"
#include "kvq/numeric/wgmma.cuh"
#include "kvq/kernels/staged_page.hpp"
#include "kvq/attention/pages_valid.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg, int TileTokens>
struct KvTile : StagedPage<Cfg, TileTokens> {
  using Page = StagedPage<Cfg, TileTokens>;
  using T = typename Cfg::dtype;
  using Page::BN;
  using Page::D;
  using Page::k_staged;
  using Page::P;
  using Page::v_staged;
  static_assert(BN == 32 || BN == 64 || BN == 128, "tiles of 32, 64 or 128 tokens");
  static constexpr int tile_pages = P < BN ? BN / P : 1;  // pages a tile touches (tiles never straddle a page)
  static constexpr int chunks = D / 8;           // 16-byte chunks per row
  static_assert(BN < 128 || (!k_staged && !v_staged), "128-token tiles carry model-dtype rows only");
  static constexpr size_t rows_bytes = size_t(BN) * D * sizeof(T);  // k or v of one buffer

  KVQ_DEVICE static int swizzle(int row, int chunk) { return panel_chunk(BN, row, chunk); }

  // The tile classes (tiles copied raw only, in bulk, dequantized) are StagedPage's.
};

// What the fill of a tile needs to know about its sequence and KV head.
template <class T>
struct TileSource {
  CacheView<T> v;
  const T* new_k;
  const T* new_v;
  const uint8_t* transition;  // this sequence's transition records, [page - cold/P][num_kv_heads][record]
  SeqAppend seq;              // the step seen as an append (source_row)
  int64_t cold, rec_end, kv_end;
  int b, h;

  // Page ids of the tile starting at t0 (prefetched into shared memory: tile_pages entries,
  // meaningful for pool pages only), so that issuing a tile's copies waits on no global load.
  KVQ_DEVICE int32_t fetch_page_id(int64_t t0, int p, int page) const {
    const int64_t pg = t0 / page + p;
    return pg * page < cold && pg * page < rec_end ? v.block_table[int64_t(b) * v.max_pages_per_seq + pg] : 0;
  }
  KVQ_DEVICE const uint8_t* record(int64_t t, int64_t t0, const int32_t* ids, int page, size_t record_bytes) const {
    const int64_t pg = t / page;
    return t < cold ? v.cold + record_offset(ids[pg - t0 / page], h, v.num_kv_heads, record_bytes)
                    : transition + record_offset(pg - cold / page, h, v.num_kv_heads, record_bytes);
  }
  // Attention sinks (token_source.hpp): tokens [0, sink_rows()) are record tokens that are never
  // read from their record (min(sinks, rec_end); 0 without sinks or records).
  KVQ_DEVICE int sink_rows() const { return rec_end < v.sinks ? int(rec_end) : v.sinks; }
};

// cp.async of tile [t0, t0 + BN) into (k, v, raw) by NT threads (this one is `tid` of them); the
// caller commits the group.
template <class Cfg, int BN_, int NT>
KVQ_DEVICE void issue_tile(const TileSource<typename Cfg::dtype>& src, int64_t t0, const int32_t* ids, uint8_t* k, uint8_t* v,
                           uint8_t* raw, unsigned tid) {
  using Tile = KvTile<Cfg, BN_>;
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, BN = Tile::BN, SP = Tile::SP, CH = Tile::chunks;
  constexpr RecordOffsets o = Cfg::record;
  if constexpr (P >= BN) {
    // The common tile: all its tokens in one record (pages of at least BN tokens; the tile ends
    // before the records and the keys do). One record address for the tile; every copy is an
    // offset from it (the general path below re-derives the record for every 16-byte chunk).
    if (t0 + BN <= src.rec_end && t0 + BN <= src.kv_end) {
      const uint8_t* rec = src.record(t0, t0, ids, P, Cfg::record_bytes);
      const int off = int(t0 % P);
      if constexpr (Tile::k_staged || Tile::v_staged) {
        constexpr int page_chunks = int(Tile::page_bytes / 16);
        for (unsigned idx = tid; idx < unsigned(page_chunks); idx += NT)
          cp_async16(raw + size_t(idx) * 16, Tile::staged_source(rec, off, size_t(idx) * 16));
      }
      constexpr int unstaged = (Tile::k_staged ? 0 : 1) + (Tile::v_staged ? 0 : 1);
      if constexpr (unstaged > 0) {
        for (unsigned idx = tid; idx < unsigned(unstaged * BN * CH); idx += NT) {  // unsigned: shifts, not divisions
          const bool is_v = Tile::k_staged || idx >= unsigned(BN * CH);
          const int r = int(idx % unsigned(BN * CH) / unsigned(CH)), c = int(idx % unsigned(CH));
          cp_async16((is_v ? v : k) + size_t(Tile::swizzle(r, c)) * 16,
                     rec + (is_v ? o.v_codes : o.k_codes) + (size_t(off + r) * D + 8 * c) * sizeof(T));
        }
      }
      return;
    }
  }
  if constexpr (P < BN && BN == 2 * P && !Tile::k_staged && !Tile::v_staged) {
    // A tile of two whole records' rows (a 128-token tile over pages of 64): one record address
    // per page, every copy an offset from one of the two.
    if (t0 + BN <= src.rec_end && t0 + BN <= src.kv_end) {
      const uint8_t* rec0 = src.record(t0, t0, ids, P, Cfg::record_bytes);
      const uint8_t* rec1 = src.record(t0 + P, t0, ids, P, Cfg::record_bytes);
      for (unsigned idx = tid; idx < unsigned(2 * BN * CH); idx += NT) {
        const bool is_v = idx >= unsigned(BN * CH);
        const int r = int(idx % unsigned(BN * CH) / unsigned(CH)), c = int(idx % unsigned(CH));
        const uint8_t* rec = r < P ? rec0 : rec1;
        cp_async16((is_v ? v : k) + size_t(Tile::swizzle(r, c)) * 16,
                   rec + (is_v ? o.v_codes : o.k_codes) + (size_t(r % P) * D + 8 * c) * sizeof(T));
      }
      return;
    }
  }
  if (t0 >= src.rec_end && t0 >= src.seq.len_old && t0 + BN <= src.kv_end) {
    // A tile of the step's fresh rows only (new_k / new_v; a prefill chunk's own keys): one base
    // per role, rows num_kv_heads * D elements apart (source_row's second case, hoisted).
    const size_t stride = size_t(src.v.num_kv_heads) * D;
    const size_t first = size_t(src.seq.new_begin + (t0 - src.seq.len_old)) * stride + size_t(src.h) * D;
    for (unsigned idx = tid; idx < unsigned(2 * BN * CH); idx += NT) {
      const bool is_v = idx >= unsigned(BN * CH);
      const int r = int(idx % unsigned(BN * CH) / unsigned(CH)), c = int(idx % unsigned(CH));
      const T* row = (is_v ? src.new_v : src.new_k) + first + size_t(r) * stride;
      cp_async16((is_v ? v : k) + size_t(Tile::swizzle(r, c)) * 16, row + 8 * c);
    }
    return;
  }
  if constexpr (Tile::k_staged || Tile::v_staged) {
    constexpr int page_chunks = int(Tile::page_bytes / 16);
    for (int idx = int(tid); idx < Tile::staged_pages * page_chunks; idx += NT) {
      const int sp = idx / page_chunks;
      const int64_t ts = t0 + int64_t(sp) * SP;
      if (ts >= src.rec_end) continue;
      const size_t at = size_t(idx % page_chunks) * 16;
      cp_async16(raw + size_t(sp) * Tile::page_bytes + at,
                 Tile::staged_source(src.record(ts, t0, ids, P, Cfg::record_bytes), int(ts % P), at));
    }
  }
  // Model-dtype rows: every row of a "none" role, the hot / new rows of a quantized one.
  for (int idx = int(tid); idx < 2 * BN * CH; idx += NT) {
    const bool is_v = idx >= BN * CH;
    const int r = (idx % (BN * CH)) / CH, c = idx % CH;
    const int64_t t = t0 + r;
    const bool staged = is_v ? Tile::v_staged : Tile::k_staged;
    if (staged && t < src.rec_end) continue;
    uint8_t* dst = (is_v ? v : k) + size_t(Tile::swizzle(r, c)) * 16;
    if (t >= src.kv_end) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      continue;
    }
    const T* row;
    if (t < src.rec_end)
      row = reinterpret_cast<const T*>(src.record(t, t0, ids, P, Cfg::record_bytes) + (is_v ? o.v_codes : o.k_codes)) +
            size_t(t % P) * D;
    else
      row = source_row(src.v, is_v ? src.v.hot_v : src.v.hot_k, is_v ? src.new_v : src.new_k, src.seq, t, src.h, D, P);
    cp_async16(dst, row + 8 * c);
  }
}

// The raw bytes of a bulk-copyable tile [t0, t0 + BN) (bulk_tiles) by one thread: a bulk copy per run of its
// staged page, completing on the barrier at shared-window address `bar` (the caller announced
// Tile::page_bytes on it).
template <class Cfg, int BN_>
KVQ_DEVICE void issue_tile_bulk(const TileSource<typename Cfg::dtype>& src, int64_t t0, const int32_t* ids, uint8_t* raw,
                                uint32_t bar) {
  using Tile = KvTile<Cfg, BN_>;
  const uint8_t* rec = src.record(t0, t0, ids, Cfg::page, Cfg::record_bytes);
  const int off = int(t0 % Cfg::page);
  KVQ_UNROLL
  for (int i = 0; i < Tile::kRuns; ++i) {
    const typename Tile::StagedRun r = Tile::staged_run(i, off);
    if (r.bytes > 0) bulk_copy_to_shared(raw + r.dst, rec + r.src, uint32_t(r.bytes), bar);
  }
}

// Attention sinks (attention/token_source.hpp): tokens t < src.sink_rows() are never read from a
// record, but from sink_k / sink_v where t < cold, else from the ring (page 0 turning cold in this
// step; source_row). They lie in a sequence's first tile (sinks <= kMaxSinks < 32 <= BN), whose
// issue_tile / decode_tile filled them from the record (the encoder's copy of token `sinks`):
// SinkRows overwrites them in the tile's k / v buffers, both roles, in two steps so that the
// caller can put a barrier between the other threads' writes of those rows and its own:
//   load():   this thread's 16-byte chunks of the rows into registers (global loads);
//   store():  into the tile buffers (a plain st.shared; the caller fences for wgmma).
// Only for the tile at token 0 of a sequence with sink_rows() > 0: the others never run it.
template <class Cfg, int BN_, int NT>
struct SinkRows {
  using Tile = KvTile<Cfg, BN_>;
  using T = typename Cfg::dtype;
  static constexpr int CH = Tile::chunks, n = (2 * kMaxSinks * CH + NT - 1) / NT;  // chunks a thread, at most
  static_assert(kMaxSinks < Tile::BN, "every sink token lies in the first tile");
  uint4 x[n];

  // Item idx: chunk idx % CH of row idx / (2 CH), keys for even idx / CH, values for odd.
  struct Item {
    int r, c;
    bool is_v;
  };
  static KVQ_DEVICE Item item(unsigned idx) {
    return Item{int(idx / unsigned(2 * CH)), int(idx % unsigned(CH)), bool((idx / unsigned(CH)) & 1u)};
  }
  KVQ_DEVICE void load(const TileSource<T>& src, int rows, unsigned tid) {
    constexpr int D = Cfg::head_dim;
    KVQ_UNROLL
    for (int i = 0; i < n; ++i) {
      const unsigned idx = tid + unsigned(i * NT);
      if (idx >= unsigned(2 * CH * rows)) break;
      const Item it = item(idx);
      const T* row = sink_row(src.v, it.is_v ? src.v.sink_v : src.v.sink_k, it.is_v ? src.v.hot_v : src.v.hot_k,
                              it.is_v ? src.new_v : src.new_k, src.seq, src.cold, it.r, src.h, D, Cfg::page);
      x[i] = *reinterpret_cast<const uint4*>(row + 8 * it.c);
    }
  }
  KVQ_DEVICE void store(uint8_t* k, uint8_t* v, int rows, unsigned tid) const {
    KVQ_UNROLL
    for (int i = 0; i < n; ++i) {
      const unsigned idx = tid + unsigned(i * NT);
      if (idx >= unsigned(2 * CH * rows)) break;
      const Item it = item(idx);
      *reinterpret_cast<uint4*>((it.is_v ? v : k) + size_t(Tile::swizzle(it.r, it.c)) * 16) = x[i];
    }
  }
};

// The query rows of a CTA into shared memory (the prefill kernels and decode's many-row kernel).

// cp.async of the CTA's BM query rows into panels (zeros past the sequence's rows); the caller commits.
template <class T, int BM, int D>
__device__ inline void stage_prefill_queries(uint8_t* qs, const AttentionBatch<T>& a, const SeqAttention& s, int h,
                                             int group, int row0, int rows) {
  constexpr int CH = D / 8;
  for (int idx = threadIdx.x; idx < BM * CH; idx += blockDim.x) {
    const int r = idx / CH, c = idx % CH, rg = row0 + r;
    uint8_t* dst = qs + size_t(panel_chunk(BM, r, c)) * 16;
    if (rg < rows)
      cp_async16(dst, a.q + packed_query_row(s.q0, rg, group, a.num_q_heads, h) * D + 8 * c);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

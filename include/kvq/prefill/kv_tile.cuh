// kvq/prefill/kv_tile.cuh - one K/V tile of the prefill kernel: BN consecutive tokens of one
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
//                      from raw into k / v: a full tile by the fast path (FullTile: all loads first,
//                      codes read as fp16 subnormals), any other by the general path (decode_chunk
//                      and its pieces); both give the host reference's values bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kvq/attention/token_source.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/numeric/bulk_copy.cuh"
#include "kvq/numeric/mma.cuh"
#include "kvq/numeric/wgmma.cuh"
#include "kvq/quant/chunk_decode.hpp"
#include "kvq/prefill/plan.hpp"
#include "kvq/prefill/staged_page.hpp"
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

  // True when issue_tile writes only the raw slot of tile [t0, t0 + BN) (every token a record
  // token of two quantized roles): its copies need not wait for the k / v buffers to be free;
  // only decode_tile, which writes them, does.
  KVQ_DEVICE static bool issues_raw_only(int64_t t0, int64_t rec_end) {
    return k_staged && v_staged && t0 + BN <= rec_end;
  }
  // True when decode_tile has rows to dequantize in tile [t0, t0 + BN) (record tokens of a quantized role).
  KVQ_DEVICE static bool decodes(int64_t t0, int64_t rec_end) { return (k_staged || v_staged) && t0 < rec_end; }
  // True when tile [t0, t0 + BN) is one staged page of a single record of two quantized roles
  // (pages of at least BN tokens, every token a record token below kv_end): issue_tile_bulk's tile.
  KVQ_DEVICE static bool bulk_copyable(int64_t t0, int64_t rec_end, int64_t kv_end) {
    return P >= BN && k_staged && v_staged && t0 + BN <= rec_end && t0 + BN <= kv_end;
  }
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

// The raw bytes of a bulk_copyable tile [t0, t0 + BN) by one thread: a bulk copy per run of its
// staged page, completing on `bar` (the caller announced Tile::page_bytes on it).
template <class Cfg, int BN_>
KVQ_DEVICE void issue_tile_bulk(const TileSource<typename Cfg::dtype>& src, int64_t t0, const int32_t* ids, uint8_t* raw,
                                uint64_t* bar) {
  using Tile = KvTile<Cfg, BN_>;
  const uint8_t* rec = src.record(t0, t0, ids, Cfg::page, Cfg::record_bytes);
  const int off = int(t0 % Cfg::page);
  KVQ_UNROLL
  for (int i = 0; i < Tile::kRuns; ++i) {
    const typename Tile::StagedRun r = Tile::staged_run(i, off);
    if (r.bytes > 0) bulk_copy_to_shared(raw + r.dst, rec + r.src, uint32_t(r.bytes), bar);
  }
}

// Row r, channels 8c .. 8c+7 of a tile buffer (k or v) in the model dtype.
template <class T>
KVQ_DEVICE void store_chunk(uint8_t* at, const float (&x)[kDecodeChunk]) {
  *reinterpret_cast<uint4*>(at) =
      make_uint4(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]), pack2<T>(x[4], x[5]), pack2<T>(x[6], x[7]));
}
template <class Tile>
KVQ_DEVICE void store_tile_chunk(uint8_t* dst, int r, int c, const float (&x)[kDecodeChunk]) {
  store_chunk<typename Tile::T>(dst + size_t(Tile::swizzle(r, c)) * 16, x);
}

// Channel chunk c of rows r0 + dr of a tile buffer where dr's low three bits and r0's do not
// overlap: (r0 + dr) % 8 = r0 % 8 ^ dr % 8, so the swizzled chunk (panel_chunk) is row r0's
// start + 8 dr + (x ^ dr % 8), x = (c ^ r0) % 8: one base and one XOR per row, nothing per row
// for a thread to keep across its loop.
struct TileRun {
  uint8_t* base;  // chunk 0 of row r0 of c's panel
  int x;
  template <class Tile>
  KVQ_DEVICE static TileRun of(uint8_t* dst, int r0, int c) {
    return TileRun{dst + size_t(panel_chunk(Tile::BN, r0, c) - ((c ^ r0) & 7)) * 16, (c ^ r0) & 7};
  }
  KVQ_DEVICE uint8_t* at(int dr) const { return base + 128 * dr + 16 * (x ^ (dr & 7)); }
};

// Staged rows [0, rows) of one role (sections at `codes` / `params` of each staged page) into dst,
// an item being 8 channels of one row (decode_chunk), by NT threads (this one is `tid`).
template <class Tile, class Q, Role R, int NT>
KVQ_DEVICE void decode_tile_rows(const uint8_t* raw, int rows, size_t codes, size_t params, uint8_t* dst, unsigned tid) {
  constexpr int CH = Tile::chunks, SP = Tile::SP;
  for (unsigned idx = tid; idx < unsigned(rows * CH); idx += NT) {
    const int r = int(idx / CH), c = int(idx % CH);
    const uint8_t* page = raw + size_t(unsigned(r) / SP) * Tile::page_bytes;
    float x[kDecodeChunk];
    decode_chunk<Q, R, Tile::D, SP, typename Tile::T>(page + codes, page + params, int(unsigned(r) % SP), 8 * c, x);
    store_tile_chunk<Tile>(dst, r, c, x);
  }
}

// A full tile (every row a record row of one staged page: P >= BN) of a quantized role is
// dequantized by the fast path below when a thread's share fits it: all the thread's shared loads
// of both roles issue before its first store (a st.shared between items keeps the compiler from
// hoisting the next item's ld.shared, as it cannot tell the raw slot from the stage), trip counts
// are fixed, and keys convert their parameters once per thread. INT2 / INT4 codes are read as fp16
// subnormals (subnormal_code.hpp: one AND for the codes of two elements, one conversion each, no
// I2F). The values are those of the general path, bit for bit (decode_key_word_subnormal,
// decode_value_pair_subnormal, decode_int8_words: host-tested against the element decode).
// FullTile<Tile, Q, Role, NT> names a role's fast path (fits: whether it serves this tile shape).
//   keys:   thread tid takes channel chunk tid % (D/8) of `rows` consecutive rows from
//           (tid / (D/8)) x rows on, all in one key group (Q::group a multiple of `rows`);
//   values: item tid + i NT (i < items) is channel chunk idx % (D/8) of token pair idx / (D/8),
//           its chunk inside one value group (Q::group a multiple of 8).
template <class Tile, class Q, int NT>
struct FullTileKeys {
  static constexpr int CH = Tile::chunks, rows = Tile::BN * CH / NT, n = rows >= 1 ? rows : 1;
  static constexpr bool fits = Q::kind == QuantKind::kAsym && Tile::SP == Tile::BN && Tile::BN * CH % NT == 0 && rows >= 1 &&
                               rows <= 8 && (rows & (rows - 1)) == 0 && Q::group % n == 0;
  uint32_t w[n];  // the chunk's code word of rows r0 .. r0 + rows - 1 (key_chunk_word)
  KeyChunkParams par;
  int c, r0;

  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    c = int(tid % unsigned(CH));
    r0 = int(tid / unsigned(CH)) * rows;
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) w[i] = key_chunk_word<Q, Tile::D>(raw + Tile::kc, r0 + i, 8 * c);
    par = key_chunk_params<Q, Tile::D>(raw + Tile::kp, r0, 8 * c);
  }
  KVQ_DEVICE void store(uint8_t* k, unsigned) const {
    const TileRun run = TileRun::of<Tile>(k, r0, c);  // r0 a multiple of rows, a power of two
    const KeyChunkParams sp = subnormal_key_params<Q>(par);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      float x[kDecodeChunk];
      decode_key_word_subnormal<Q>(w[i], sp, x);
      store_chunk<typename Tile::T>(run.at(i), x);
    }
  }
};

template <class Tile, class Q, int NT>
struct FullTileValues {
  static constexpr int CH = Tile::chunks, items = Tile::BN / 2 * CH / NT, n = items >= 1 ? items : 1;
  static constexpr int words = Q::kind == QuantKind::kAsym ? 2 * kDecodeChunk * Q::bits / 32 : 1;  // a chunk's words of a pair
  static constexpr bool fits = Q::kind == QuantKind::kAsym && Tile::SP == Tile::BN && Tile::BN / 2 * CH % NT == 0 &&
                               items >= 1 && NT % CH == 0 && 2 * NT / CH % 8 == 0 && Q::group % kDecodeChunk == 0;
  uint32_t w[n][words];
  AsymParams par[n][2];  // of the pair's two tokens

  KVQ_DEVICE static int token(unsigned tid, int i) { return 2 * int((tid + unsigned(i * NT)) / CH); }
  KVQ_DEVICE static int chunk(unsigned tid, int i) { return int((tid + unsigned(i * NT)) % CH); }
  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    constexpr int D = Tile::D;
    KVQ_UNROLL
    for (int i = 0; i < items; ++i) {
      const int t = token(tid, i), c0 = 8 * chunk(tid, i);
      const uint32_t* pw = reinterpret_cast<const uint32_t*>(raw + Tile::vc) + code_slot<Q::bits, D>(Role::kValue, t, c0).word;
      KVQ_UNROLL
      for (int j = 0; j < words; ++j) w[i][j] = pw[j];
      par[i][0] = asym_params_at<Q, Role::kValue, D, Tile::SP>(raw + Tile::vp, t, c0);
      par[i][1] = asym_params_at<Q, Role::kValue, D, Tile::SP>(raw + Tile::vp, t + 1, c0);
    }
  }
  KVQ_DEVICE void store(uint8_t* v, unsigned tid) const {
    // Item i's pair is 2 i NT / (D/8) rows (a multiple of 8) below item 0's, in the same chunk.
    const TileRun run = TileRun::of<Tile>(v, token(tid, 0), chunk(tid, 0));
    KVQ_UNROLL
    for (int i = 0; i < items; ++i) {
      float x[2][kDecodeChunk];
      decode_value_pair_subnormal<Q>(w[i], par[i][0], par[i][1], x);
      KVQ_UNROLL
      for (int parity = 0; parity < 2; ++parity) store_chunk<typename Tile::T>(run.at(2 * i * NT / CH + parity), x[parity]);
    }
  }
};

// INT8 roles (keys or values): thread tid takes channel chunk tid % (D/8) of `rows` consecutive
// rows from (tid / (D/8)) x rows on; a row chunk's 8 codes are one 8-byte load, its scale one float.
template <class Tile, class Q, Role R, int NT>
struct FullTileInt8 {
  static constexpr int CH = Tile::chunks, rows = Tile::BN * CH / NT, n = rows >= 1 ? rows : 1;
  static constexpr bool fits = Q::kind == QuantKind::kInt8 && Tile::SP == Tile::BN && Tile::BN * CH % NT == 0 && rows >= 1 &&
                               rows <= 8 && (rows & (rows - 1)) == 0;
  static constexpr size_t codes = R == Role::kKey ? Tile::kc : Tile::vc, params = R == Role::kKey ? Tile::kp : Tile::vp;
  uint2 w[n];
  float scale[n];
  int c, r0;

  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    c = int(tid % unsigned(CH));
    r0 = int(tid / unsigned(CH)) * rows;
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      w[i] = *reinterpret_cast<const uint2*>(raw + codes + size_t(r0 + i) * Tile::D + 8 * c);
      scale[i] = reinterpret_cast<const float*>(raw + params)[r0 + i];
    }
  }
  KVQ_DEVICE void store(uint8_t* dst, unsigned) const {
    const TileRun run = TileRun::of<Tile>(dst, r0, c);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      float x[kDecodeChunk];
      decode_int8_words(w[i].x, w[i].y, scale[i], x);
      store_chunk<typename Tile::T>(run.at(i), x);
    }
  }
};

// A role without a fast path ("none" roles are not staged; asymmetric roles whose thread share
// does not fit are decoded by the general path).
struct NoFullTile {
  static constexpr bool fits = false;
  KVQ_DEVICE void load(const uint8_t*, unsigned) {}
  KVQ_DEVICE void store(uint8_t*, unsigned) const {}
};

template <class Tile, class Q, Role R, int NT>
using FullTile = std::conditional_t<
    Q::kind == QuantKind::kInt8, FullTileInt8<Tile, Q, R, NT>,
    std::conditional_t<Q::kind == QuantKind::kAsym,
                       std::conditional_t<R == Role::kKey, FullTileKeys<Tile, Q, NT>, FullTileValues<Tile, Q, NT>>, NoFullTile>>;

// The general path of one role: staged rows [0, rows) of the keys into k.
template <class Tile, class Q, int NT>
KVQ_DEVICE void decode_key_rows(const uint8_t* raw, int rows, uint8_t* k, unsigned tid) {
  constexpr int D = Tile::D, SP = Tile::SP, CH = Tile::chunks;
  if constexpr (Q::kind == QuantKind::kAsym) {
    // A thread keeps one channel chunk (NT is a multiple of D / 8) and walks rows NT / (D / 8)
    // apart, converting its chunk's parameters once per key group instead of once per row.
    static_assert(NT % CH == 0, "a thread keeps one channel chunk of the keys");
    const int c = int(tid % unsigned(CH));
    KeyChunkParams par;
    int par_id = -1;  // staged page x SP + first token of the key group whose parameters par holds
    for (int r = int(tid / unsigned(CH)); r < rows; r += NT / CH) {  // r >= 0: its divisions are shifts
      const uint8_t* page = raw + size_t(unsigned(r) / SP) * Tile::page_bytes;
      const int t = int(unsigned(r) % SP), id = (r - t) + int(unsigned(t) / Q::group) * Q::group;
      if (id != par_id) {
        par = key_chunk_params<Q, D>(page + Tile::kp, t, 8 * c);
        par_id = id;
      }
      float x[kDecodeChunk];
      decode_key_chunk<Q, D>(page + Tile::kc, t, 8 * c, par, x);
      store_tile_chunk<Tile>(k, r, c, x);
    }
  } else {
    decode_tile_rows<Tile, Q, Role::kKey, NT>(raw, rows, Tile::kc, Tile::kp, k, tid);
  }
}

// The general path of one role: staged rows [0, rows) of the values into v.
template <class Tile, class Q, int NT>
KVQ_DEVICE void decode_value_rows(const uint8_t* raw, int rows, uint8_t* v, unsigned tid) {
  constexpr int D = Tile::D, SP = Tile::SP, CH = Tile::chunks;
  if constexpr (Q::kind == QuantKind::kAsym) {
    // A thread decodes one channel chunk of a token pair: both tokens' codes are in the same
    // words (packing.hpp), loaded once. Rows are even from every staged page's start (SP even).
    for (unsigned idx = tid; idx < unsigned((rows + 1) / 2 * CH); idx += NT) {
      const int r = 2 * int(idx / CH), c = int(idx % CH), t = int(unsigned(r) % SP);
      const uint8_t* page = raw + size_t(unsigned(r) / SP) * Tile::page_bytes;
      const uint32_t* words =
          reinterpret_cast<const uint32_t*>(page + Tile::vc) + code_slot<Q::bits, D>(Role::kValue, t, 8 * c).word;
      float x[kDecodeChunk];
      decode_value_chunk<Q, D, SP>(words, page + Tile::vp, t, 0, 8 * c, x);
      store_tile_chunk<Tile>(v, r, c, x);
      if (r + 1 < rows) {
        decode_value_chunk<Q, D, SP>(words, page + Tile::vp, t + 1, 1, 8 * c, x);
        store_tile_chunk<Tile>(v, r + 1, c, x);
      }
    }
  } else {
    decode_tile_rows<Tile, Q, Role::kValue, NT>(raw, rows, Tile::vc, Tile::vp, v, tid);
  }
}

// Dequantizes the record tokens of tile [t0, t0 + BN) of the quantized roles from raw into k / v,
// with NT threads (this one is `tid` of them): a full tile by the fast path where the role fits it,
// else by the general path.
template <class Cfg, int BN_, int NT>
KVQ_DEVICE void decode_tile(const TileSource<typename Cfg::dtype>& src, int64_t t0, uint8_t* k, uint8_t* v, const uint8_t* raw,
                            unsigned tid) {
  using Tile = KvTile<Cfg, BN_>;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  constexpr int BN = Tile::BN;
  static_assert(Tile::SP % 2 == 0, "staged pages hold whole token pairs");
  if constexpr (Tile::k_staged || Tile::v_staged) {
    const int64_t rows64 = src.rec_end - t0;
    const int rows = rows64 <= 0 ? 0 : rows64 >= BN ? BN : int(rows64);
    using FK = FullTile<Tile, KQ, Role::kKey, NT>;
    using FV = FullTile<Tile, VQ, Role::kValue, NT>;
    if constexpr (FK::fits || FV::fits) {
      if (rows == BN) {
        FK fk;
        FV fv;
        if constexpr (FK::fits) fk.load(raw, tid);
        if constexpr (FV::fits) fv.load(raw, tid);
        if constexpr (FK::fits) fk.store(k, tid);
        else if constexpr (Tile::k_staged) decode_key_rows<Tile, KQ, NT>(raw, rows, k, tid);
        if constexpr (FV::fits) fv.store(v, tid);
        else if constexpr (Tile::v_staged) decode_value_rows<Tile, VQ, NT>(raw, rows, v, tid);
        return;
      }
    }
    if constexpr (Tile::k_staged) decode_key_rows<Tile, KQ, NT>(raw, rows, k, tid);
    if constexpr (Tile::v_staged) decode_value_rows<Tile, VQ, NT>(raw, rows, v, tid);
  }
}

// ---- what both prefill kernels (prefill_kernel.cuh, prefill_wgmma_kernel.cuh) do before their loop ----

// The query rows of a prefill CTA: `rows` = GQA group x q_len of its sequence (0 when the
// sequence was rejected), the CTA's first row `row0`, and the position of its last row.
struct PrefillCtaRows {
  int rows, row0;
  int64_t last_pos;
};

// CTA-wide (both barriers reached by every thread): thread 0 resolves sequence b into the shared
// `s` / `bad`; then the CTA's rows; every CTA of a sequence checks all its pages (all or none
// write; an invalid one sets kFlagBadSequence). False: the CTA has nothing to do and returns.
template <class T>
__device__ inline bool prefill_cta_rows(const CacheView<T>& v, const AttentionBatch<T>& a, const PrefillPlan& plan, int b,
                                        int page, int bm, int tile, uint32_t* flags, SeqAttention& s, int& bad,
                                        PrefillCtaRows& r) {
  const int group = a.num_q_heads / v.num_kv_heads;
  if (threadIdx.x == 0) {
    s = resolve_attention(v, a, b, page);
    bad = s.status != Status::kSuccess || s.q_len > plan.shape.max_q_len || s.q0 + s.q_len > plan.shape.total_q ||
          s.len + s.q_len > plan.shape.max_tokens;
  }
  __syncthreads();
  r.rows = bad ? 0 : group * s.q_len;
  r.row0 = tile * bm;
  if (r.row0 >= r.rows && tile != 0) return false;
  r.last_pos = r.rows > 0 ? s.len + (min(r.rows, r.row0 + bm) - 1) / group : 0;
  if (!pages_valid(v, b, s, bad, 0, bad ? 0 : s.len + s.q_len, page)) {
    if (threadIdx.x == 0) atomicOr(flags, uint32_t(kFlagBadSequence));
    return false;
  }
  return r.row0 < r.rows;
}

// The tile source of the CTA's sequence b and KV head h (keys up to its last row's position).
template <class Cfg>
__device__ inline TileSource<typename Cfg::dtype> prefill_tile_source(const CacheView<typename Cfg::dtype>& v,
                                                                      const AttentionBatch<typename Cfg::dtype>& a,
                                                                      const PrefillPlan& plan, uint8_t* transition,
                                                                      const SeqAttention& s, int64_t last_pos, int b, int h) {
  return TileSource<typename Cfg::dtype>{
      v, a.new_k, a.new_v,
      transition + record_offset(int64_t(b) * plan.transition_pages, 0, v.num_kv_heads, Cfg::record_bytes), as_append(s),
      s.cold, records_end(s), last_pos + 1, b, h};
}

// cp.async of the CTA's BM query rows into panels (zeros past the sequence's rows); the caller commits.
template <class T, int BM, int D>
__device__ inline void stage_prefill_queries(uint8_t* qs, const AttentionBatch<T>& a, const SeqAttention& s, int h,
                                             int group, int row0, int rows) {
  constexpr int CH = D / 8;
  for (int idx = threadIdx.x; idx < BM * CH; idx += blockDim.x) {
    const int r = idx / CH, c = idx % CH, rg = row0 + r;
    uint8_t* dst = qs + size_t(panel_chunk(BM, r, c)) * 16;
    if (rg < rows)
      cp_async16(dst, a.q + (size_t(s.q0 + rg / group) * a.num_q_heads + h * group + rg % group) * D + 8 * c);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

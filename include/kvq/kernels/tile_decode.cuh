// kvq/kernels/tile_decode.cuh - the second step of filling a prefill K/V tile (kv_tile.cuh): the
// record tokens of quantized roles, landed in the tile's raw slot as staged pages
// (staged_page.hpp), dequantized into the tile's k / v buffers in the model dtype (panel layout,
// kv_tile.cuh). decode_tile takes a full tile by the fast path (FullTile: all of a thread's loads
// first, INT2 / INT4 codes read as fp16 subnormals) and any other by the general path (decode_chunk
// and its pieces); both give the host reference's values bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kvq/cache/config.hpp"
#include "kvq/numeric/cluster.cuh"
#include "kvq/numeric/mma.cuh"
#include "kvq/numeric/wgmma.cuh"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/cache/chunk_decode.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Where a decoded 16-byte chunk goes: this CTA's tile buffer (LocalChunks), or that and the same
// place in the paired CTA's (PairChunks: st.async completing on the partner's `full` barrier;
// prefill_ws_kernel.cuh).
struct LocalChunks {
  KVQ_DEVICE void put(uint8_t* at, uint4 v) const { *reinterpret_cast<uint4*>(at) = v; }
};
struct PairChunks {
  unsigned peer;      // the partner's rank in the cluster
  uint32_t peer_bar;  // the partner's barrier (shared::cluster address)
  KVQ_DEVICE void put(uint8_t* at, uint4 v) const {
    *reinterpret_cast<uint4*>(at) = v;
    store_to_peer(peer_address(static_cast<uint32_t>(__cvta_generic_to_shared(at)), peer), v, peer_bar);
  }
};

// Row r, channels 8c .. 8c+7 of a tile buffer (k or v) in the model dtype.
template <class T, class Out = LocalChunks>
KVQ_DEVICE void store_chunk(uint8_t* at, const float (&x)[kDecodeChunk], const Out& out = Out{}) {
  out.put(at, make_uint4(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]), pack2<T>(x[4], x[5]), pack2<T>(x[6], x[7])));
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
//   keys:   ThreadRows (a thread's rows in one key group: Q::group a multiple of `rows`);
//   values: item tid + i NT (i < items) is channel chunk idx % (D/8) of token pair idx / (D/8),
//           its chunk inside one value group (Q::group a multiple of 8).
// The rows a thread of the keys' and INT8 roles' fast paths takes: channel chunk tid % (D/8) of
// `rows` consecutive rows from (tid / (D/8)) x rows on (`fits`: the tile splits evenly into such
// runs, of a power of two rows, so that TileRun addresses them).
template <class Tile, int NT>
struct ThreadRows {
  static constexpr int CH = Tile::chunks, rows = Tile::BN * CH / NT, n = rows >= 1 ? rows : 1;
  static constexpr bool fits =
      Tile::SP == Tile::BN && Tile::BN * CH % NT == 0 && rows >= 1 && rows <= 8 && (rows & (rows - 1)) == 0;
  KVQ_DEVICE static int chunk(unsigned tid) { return int(tid % unsigned(CH)); }
  KVQ_DEVICE static int first_row(unsigned tid) { return int(tid / unsigned(CH)) * rows; }
};

template <class Tile, class Q, int NT>
struct FullTileKeys : ThreadRows<Tile, NT> {
  using Rows = ThreadRows<Tile, NT>;
  using Rows::n, Rows::rows;
  static constexpr bool fits = Q::kind == QuantKind::kAsym && Rows::fits && Q::group % n == 0;
  uint32_t w[n];  // the chunk's code word of rows r0 .. r0 + rows - 1 (key_chunk_word)
  KeyChunkParams par;
  int c, r0;

  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    c = Rows::chunk(tid);
    r0 = Rows::first_row(tid);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) w[i] = key_chunk_word<Q, Tile::D>(raw + Tile::kc, r0 + i, 8 * c);
    par = key_chunk_params<Q, Tile::D>(raw + Tile::kp, r0, 8 * c);
  }
  template <class Out = LocalChunks>
  KVQ_DEVICE void store(uint8_t* k, unsigned, const Out& out = Out{}) const {
    const TileRun run = TileRun::of<Tile>(k, r0, c);  // r0 a multiple of rows, a power of two
    const KeyChunkParams sp = subnormal_key_params<Q>(par);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      float x[kDecodeChunk];
      decode_key_word_subnormal<Q>(w[i], sp, x);
      store_chunk<typename Tile::T>(run.at(i), x, out);
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
  template <class Out = LocalChunks>
  KVQ_DEVICE void store(uint8_t* v, unsigned tid, const Out& out = Out{}) const {
    // Item i's pair is 2 i NT / (D/8) rows (a multiple of 8) below item 0's, in the same chunk.
    const TileRun run = TileRun::of<Tile>(v, token(tid, 0), chunk(tid, 0));
    KVQ_UNROLL
    for (int i = 0; i < items; ++i) {
      float x[2][kDecodeChunk];
      decode_value_pair_subnormal<Q>(w[i], par[i][0], par[i][1], x);
      KVQ_UNROLL
      for (int parity = 0; parity < 2; ++parity) store_chunk<typename Tile::T>(run.at(2 * i * NT / CH + parity), x[parity], out);
    }
  }
};

// INT8 roles (keys or values), on ThreadRows: a row chunk's 8 codes are one 8-byte load, its scale
// one float.
template <class Tile, class Q, Role R, int NT>
struct FullTileInt8 : ThreadRows<Tile, NT> {
  using Rows = ThreadRows<Tile, NT>;
  using Rows::n, Rows::rows;
  static constexpr bool fits = Q::kind == QuantKind::kInt8 && Rows::fits;
  static constexpr size_t codes = R == Role::kKey ? Tile::kc : Tile::vc, params = R == Role::kKey ? Tile::kp : Tile::vp;
  uint2 w[n];
  float scale[n];
  int c, r0;

  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    c = Rows::chunk(tid);
    r0 = Rows::first_row(tid);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      w[i] = *reinterpret_cast<const uint2*>(raw + codes + size_t(r0 + i) * Tile::D + 8 * c);
      scale[i] = reinterpret_cast<const float*>(raw + params)[r0 + i];
    }
  }
  template <class Out = LocalChunks>
  KVQ_DEVICE void store(uint8_t* dst, unsigned, const Out& out = Out{}) const {
    const TileRun run = TileRun::of<Tile>(dst, r0, c);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      float x[kDecodeChunk];
      decode_int8_words(w[i].x, w[i].y, scale[i], x);
      store_chunk<typename Tile::T>(run.at(i), x, out);
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

// Whether paired CTAs (prefill_ws_kernel.cuh) can split tile j's decode by role: both roles are
// staged and both have the fast path, so each full record tile is one role's FullTile per CTA.
template <class Cfg, int BN_, int NT>
KVQ_HD_CONSTEXPR bool full_tiles_split_by_role() {
  using Tile = KvTile<Cfg, BN_>;
  return Tile::k_staged && Tile::v_staged && FullTile<Tile, typename Cfg::k_quant, Role::kKey, NT>::fits &&
         FullTile<Tile, typename Cfg::v_quant, Role::kValue, NT>::fits;
}

// One role of a full record tile (every one of its BN tokens a record token) from raw into dst
// (that role's buffer) and, through `out`, the partner CTA's same buffer, with NT threads: the
// other role is the partner's.
template <class Cfg, int BN_, int NT>
KVQ_DEVICE void decode_full_tile_role(Role role, uint8_t* dst, const uint8_t* raw, unsigned tid, const PairChunks& out) {
  using Tile = KvTile<Cfg, BN_>;
  static_assert(full_tiles_split_by_role<Cfg, BN_, NT>(), "both roles have the fast path");
  if (role == Role::kKey) {
    FullTile<Tile, typename Cfg::k_quant, Role::kKey, NT> f;
    f.load(raw, tid);
    f.store(dst, tid, out);
  } else {
    FullTile<Tile, typename Cfg::v_quant, Role::kValue, NT> f;
    f.load(raw, tid);
    f.store(dst, tid, out);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

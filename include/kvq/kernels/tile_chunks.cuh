// kvq/kernels/tile_chunks.cuh - the machinery the prefill tile codecs (tile_codec.cuh) share:
// where a decoded 16-byte chunk of model-dtype values goes in a tile buffer (kv_tile.cuh's panel
// layout; this CTA's or also the paired CTA's), the rows a thread takes on a fast path, and the
// general path that decodes any staged rows a chunk at a time through the format's codec
// (decode_chunk, codec/codec.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/cache/chunk_decode.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/numeric/cluster.cuh"
#include "kvq/numeric/mma.cuh"
#include "kvq/numeric/wgmma.cuh"

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

// A role without a fast path ("none" roles are not staged; asymmetric roles whose thread share
// does not fit are decoded by the general path).
struct NoFullTile {
  static constexpr bool fits = false;
  KVQ_DEVICE void load(const uint8_t*, unsigned) {}
  KVQ_DEVICE void store(uint8_t*, unsigned) const {}
};

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/kernels/int8_tile_codec.cuh - TileCodec<Int8> (tile_codec.cuh): INT8 roles of a prefill tile
// into model-dtype rows. Fast path (a full tile): a thread's rows of one chunk, each chunk's 8 codes
// one 8-byte load and its scale one float (decode_int8_words); general path: decode_chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/codec/int8_codec.hpp"
#include "kvq/kernels/tile_chunks.cuh"
#include "kvq/kernels/tile_codec_fwd.cuh"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// INT8 roles (keys or values), on ThreadRows: a row chunk's 8 codes are one 8-byte load, its scale
// one float.
template <class Tile, class Q, Role R, int NT>
struct FullTileInt8 : ThreadRows<Tile, NT> {
  using Rows = ThreadRows<Tile, NT>;
  using Rows::n, Rows::rows;
  static constexpr bool fits = Rows::fits;
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

template <>
struct TileCodec<Int8> {
  using Q = Int8;
  template <class Tile, Role R, int NT>
  using Full = FullTileInt8<Tile, Q, R, NT>;

  // General path: staged rows [0, rows) of role R into dst (k or v), a chunk at a time.
  template <class Tile, Role R, int NT>
  KVQ_DEVICE static void decode_rows(const uint8_t* raw, int rows, uint8_t* dst, unsigned tid) {
    if constexpr (R == Role::kKey)
      decode_tile_rows<Tile, Q, Role::kKey, NT>(raw, rows, Tile::kc, Tile::kp, dst, tid);
    else
      decode_tile_rows<Tile, Q, Role::kValue, NT>(raw, rows, Tile::vc, Tile::vp, dst, tid);
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

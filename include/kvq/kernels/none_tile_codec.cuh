// kvq/kernels/none_tile_codec.cuh - TileCodec<NoQuant> (tile_codec.cuh): a "none" role is never
// staged (issue_tile copies its rows straight into the tile buffer), so it has no fast path and its
// general path, a chunk at a time through decode_chunk, is never reached by the prefill kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/codec/none_codec.hpp"
#include "kvq/kernels/tile_chunks.cuh"
#include "kvq/kernels/tile_codec_fwd.cuh"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <>
struct TileCodec<NoQuant> {
  using Q = NoQuant;
  template <class Tile, Role R, int NT>
  using Full = NoFullTile;

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

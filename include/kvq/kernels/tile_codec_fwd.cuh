// kvq/kernels/tile_codec_fwd.cuh - the primary template of a format's prefill tile codec (the concept
// is described in tile_codec.cuh; asym_tile_codec.cuh, int8_tile_codec.cuh and none_tile_codec.cuh
// are the specializations).
#pragma once

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Q>
struct TileCodec;

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/kernels/none_record_codec.cuh - the decode operand codecs of "none" (record_codec.cuh): keys
// and values are model-dtype rows; a key pair is a word of the row as is, a value pair the same
// channel of two token rows (one byte permute). No parameters, nothing to fold.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kvq/kernels/record_codec_fwd.cuh"
#include "kvq/numeric/mma.cuh"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg>
struct KeyOperand<NoQuant, Cfg> {
  static constexpr int param_bytes = 0;
  static constexpr bool supported = true;
  static constexpr bool scaled_query = false, group_scales = false, token_scales = false, constant_offset = false;
  static constexpr float unit = 1.0f;
  KVQ_DEVICE static void copy_params(uint32_t, const uint8_t*, size_t, int, int) {}
  KVQ_HD_CONSTEXPR static int pos(int q) { return q; }
  KVQ_DEVICE static uint32_t pair(uint32_t x, int) { return x; }
  KVQ_HD_CONSTEXPR static uint32_t neg_offset(int) { return 0u; }
  template <int NT>
  KVQ_DEVICE static void scale_logits(const uint8_t*, int, float (&)[NT][4]) {}
};

template <class Cfg>
struct ValueOperand<NoQuant, Cfg> {
  static constexpr int groups = 1, param_part = 0, param_bytes = 0;
  static constexpr bool supported = true, packed = false, blocked = false;
  KVQ_DEVICE static void copy_params(uint32_t, const uint8_t*, size_t, int, int) {}

  // Token pair p: rows 2p and 2p + 1.
  template <class Tile>
  KVQ_DEVICE static void load(const uint8_t* tile, int p, int g, typename Tile::VPair& v) {
    Tile::load_v_unit(tile + Tile::vc + (2 * p) * Tile::v_unit, g, v.w0);
    Tile::load_v_unit(tile + Tile::vc + (2 * p + 1) * Tile::v_unit, g, v.w1);
  }
  // Channel u of the pair as A operand: (token 2p, token 2p + 1).
  template <class Tile>
  KVQ_DEVICE static uint32_t pair(const typename Tile::VPair& v, int u) {
    const int w = u / Tile::v_cpw, e = u % Tile::v_cpw;
    return __byte_perm(v.w0[w], v.w1[w], e ? 0x7632u : 0x5410u);
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/kernels/int8_record_codec.cuh - the decode operand codecs of INT8 (record_codec.cuh).
// Keys enter the fp16 mma as exact subnormals (x + 128) 2^-24 (quant/int8_subnormal.hpp: one XOR a
// word, one byte permute a pair) against the query scaled per row into fp16 range (q 2^-e); the
// offset leaves through a per-row bias computed once (offset_pair), the token scale multiplies the
// logits and 2^24 (unit) joins their scale factor. Values are dequantized in registers: the codes
// of a channel of two tokens as an exact pair of T, times the tokens' scales.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kvq/kernels/record_codec_fwd.cuh"
#include "kvq/kernels/record_loads.cuh"
#include "kvq/numeric/and_or.hpp"
#include "kvq/numeric/mma.cuh"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/int8_subnormal.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg>
struct KeyOperand<Int8, Cfg> {
  static constexpr int param_bytes = 4 * 16;  // 16 fp32 token scales
  static constexpr bool supported = true;
  static constexpr bool scaled_query = true, group_scales = false, token_scales = true, constant_offset = true;
  static constexpr float unit = kInt8SubnormalUnit;
  static constexpr uint32_t offset_pair = kInt8SubnormalNegOffsetPair;  // -128 2^-24, both halves
  KVQ_DEVICE static void copy_params(uint32_t dst, const uint8_t* rec, size_t params, int t0, int lane) {
    copy_part<param_bytes>(dst, rec + params + t0 * 4, lane);
  }
  KVQ_HD_CONSTEXPR static int pos(int q) { return q; }
  // (code + 128) 2^-24 in fp16 (the XOR is shared by the word's two pairs).
  KVQ_DEVICE static uint32_t pair(uint32_t x, int pw) {
    return int8_subnormal_pair(int8_subnormal_word(x), 2 * pw, 2 * pw + 1);  // exact
  }
  KVQ_HD_CONSTEXPR static uint32_t neg_offset(int) { return 0u; }
  // Rows g and g + 8 of S^T times their tokens' scales (kp: the tile's staged scales).
  template <int NT>
  KVQ_DEVICE static void scale_logits(const uint8_t* kp, int g, float (&sacc)[NT][4]) {
    const float* ks = reinterpret_cast<const float*>(kp);
    const float s0 = ks[g], s1 = ks[g + 8];
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) sacc[nt][0] *= s0, sacc[nt][1] *= s0, sacc[nt][2] *= s1, sacc[nt][3] *= s1;
  }
};

template <class Cfg>
struct ValueOperand<Int8, Cfg> {
  using T = typename Cfg::dtype;
  using H = Half2Consts<T>;
  static constexpr int groups = 1, param_part = 4 * 16, param_bytes = param_part;  // 16 fp32 token scales
  static constexpr bool supported = true, packed = false, blocked = false;
  KVQ_DEVICE static void copy_params(uint32_t dst, const uint8_t* rec, size_t params, int t0, int lane) {
    copy_part<param_part>(dst, rec + params + t0 * 4, lane);
  }

  // Token pair p: rows 2p and 2p + 1 and their scales.
  template <class Tile>
  KVQ_DEVICE static void load(const uint8_t* tile, int p, int g, typename Tile::VPair& v) {
    Tile::load_v_unit(tile + Tile::vc + (2 * p) * Tile::v_unit, g, v.w0);
    Tile::load_v_unit(tile + Tile::vc + (2 * p + 1) * Tile::v_unit, g, v.w1);
    const float* sc = reinterpret_cast<const float*>(tile + Tile::vp);
    v.s[0] = pack2<T>(sc[2 * p], sc[2 * p + 1]);
  }
  // INT8 bytes e0 (low half) and e1 (high half) of x as an exact pair of T (the values' codes).
  KVQ_DEVICE static uint32_t int8_pair(uint32_t x, uint32_t y, int e0, int e1) {
    const uint32_t t = __byte_perm(x, y, uint32_t(e0) | (uint32_t(e1) << 8));
    const uint32_t lo = and_or(t, 0x007f007fu, H::magic), hi = and_or(t, 0x00800080u, H::magic);
    return hfma2<T>(hi, H::neg_one, lo);  // (magic + low 7 bits) - (magic + 128 * sign)
  }
  // Channel u of the pair as A operand: (token 2p, token 2p + 1), dequantized in T.
  template <class Tile>
  KVQ_DEVICE static uint32_t pair(const typename Tile::VPair& v, int u) {
    const int w = u / Tile::v_cpw, e = u % Tile::v_cpw;
    return hmul2<T>(int8_pair(v.w0[w], v.w1[w], e, 4 + e), v.s[0]);
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/kernels/asym_record_codec.cuh - the decode operand codecs of INT2 / INT4 (record_codec.cuh).
// Keys enter the fp16 mma as exact (offset + code) pairs (quant/offset_code.hpp: a shift and one
// LOP3); the per-channel scale is folded into the query once per key group (Q'' = (q 2^-e) scale)
// and the offsets and zero points into a per-row bias (group_scales: the records kernel's
// group_bias). Values: a packed word holds a channel of a token pair in its two half-words
// (quant/packing.hpp), so one shift and one mask give the pair.
//   Blocked (Gv a multiple of 32): lane g takes channels 32B + 4g .. +3 of every 32-channel block
//     B; the codes enter as exact fp16 subnormals code * 2^(q - 24) (quant/subnormal_values.hpp: a
//     shift and one AND), the token's group scale is in the probabilities (P' = P s), the factor
//     2^(q - 24) of each channel leaves the fp32 sums once per split (code_unit), and one running
//     sum per block restores O = 2^(24 - q) A + sum P z (block_params).
//   Otherwise: (magic + code) by one OR, the code by one exact subtraction, scale and zero point
//     by one fma.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kvq/kernels/record_codec_fwd.cuh"
#include "kvq/kernels/record_loads.cuh"
#include "kvq/numeric/and_or.hpp"
#include "kvq/numeric/mma.cuh"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/offset_code.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/subnormal_values.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <int Bits, int G, class Cfg>
struct KeyOperand<IntAsym<Bits, G>, Cfg> {
  static constexpr int D = Cfg::head_dim;
  static constexpr int param_bytes = 4 * D;  // scale[D] then zero[D] of the tile's key group (fp16)
  static constexpr bool supported = G % 16 == 0;  // a 16-token tile lies in one key group
  static constexpr bool scaled_query = true, group_scales = true, token_scales = false, constant_offset = false;
  static constexpr float unit = 1.0f;
  // Copied only on the first tile of a group.
  KVQ_DEVICE static void copy_params(uint32_t dst, const uint8_t* rec, size_t params, int t0, int lane) {
    if (t0 % G == 0) copy_part<param_bytes>(dst, rec + params + (t0 / G) * 4 * D, lane);
  }
  // INT2 takes a word's positions in the order 0 1 2 3 5 6 4 7, so that the two pairs of every
  // k-step carry the offsets (64, 16) or (4, 4) (quant/offset_code.hpp) and two quads of key
  // offsets serve all k-steps; INT4 in order ((64, 64) and (256, 16)).
  KVQ_HD_CONSTEXPR static int pos(int q) { return Bits == 2 && q >= 4 ? (0x7465 >> (4 * (q - 4))) & 0xF : q; }
  KVQ_DEVICE static uint32_t pair(uint32_t x, int pw) { return offset_code_pair<Bits>(x, Bits * pw); }  // exact
  KVQ_HD_CONSTEXPR static uint32_t neg_offset(int pw) { return offset_code_neg_offset_pair<Bits>(Bits * pw); }
  template <int NT>
  KVQ_DEVICE static void scale_logits(const uint8_t*, int, float (&)[NT][4]) {}
};

template <int Bits, int G, class Cfg>
struct ValueOperand<IntAsym<Bits, G>, Cfg> {
  using T = typename Cfg::dtype;
  using H = Half2Consts<T>;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, kTokens = 16;
  static constexpr int groups = D / G;
  // scale[16][D/Gv] then zero[16][D/Gv] (fp16)
  static constexpr int param_part = kTokens * groups * 2, param_bytes = 2 * param_part;
  static constexpr bool supported = G % (16 / Bits) == 0;  // a packed word (8 or 4 channels) in one group
  static constexpr bool packed = true, blocked = G % 32 == 0;

  KVQ_DEVICE static void copy_params(uint32_t dst, const uint8_t* rec, size_t params, int t0, int lane) {
    constexpr int cpp = param_part / 16;  // chunks of the scales (then as many of the zero points)
    if constexpr (2 * cpp <= 32) {        // one copy per lane: lanes cpp .. 2cpp-1 take the zero points
      const int jump = lane >= cpp ? P * groups * 2 - param_part : 0;
      if (lane < 2 * cpp) cp_async16(dst, rec + params + t0 * groups * 2 + jump);
    } else {
      copy_part<param_part>(dst, rec + params + t0 * groups * 2, lane);
      copy_part<param_part>(dst + param_part, rec + params + (P + t0) * groups * 2, lane);
    }
  }

  // Token pair p: its words and, per word, the (scale, zero) pairs of tokens (2p, 2p+1).
  template <class Tile>
  KVQ_DEVICE static void load(const uint8_t* tile, int p, int g, typename Tile::VPair& v) {
    Tile::load_v_unit(tile + Tile::vc + p * Tile::v_unit, g, v.w0);
    const uint16_t* sc = reinterpret_cast<const uint16_t*>(tile + Tile::vp);
    const uint16_t* ze = sc + kTokens * groups;
    constexpr bool one_group = !Tile::v_chunked && G % (D / 8) == 0;
    KVQ_UNROLL
    for (int w = 0; w < Tile::v_words; ++w) {
      if (one_group && w > 0) {
        v.s[w] = v.s[0], v.z[w] = v.z[0];
        continue;
      }
      const int Gi = Tile::v_channel(g, w * Tile::v_cpw) / G;
      v.s[w] = params_pair<T>(sc[(2 * p) * groups + Gi], sc[(2 * p + 1) * groups + Gi]);
      v.z[w] = params_pair<T>(ze[(2 * p) * groups + Gi], ze[(2 * p + 1) * groups + Gi]);
    }
  }
  // Channel u of the pair as A operand: (token 2p, token 2p+1), dequantized in T.
  template <class Tile>
  KVQ_DEVICE static uint32_t pair(const typename Tile::VPair& v, int u) {
    const int w = u / Tile::v_cpw, e = u % Tile::v_cpw;
    constexpr uint32_t mask = packed_pair_mask(Bits, 0);
    const uint32_t x = and_or(v.w0[w] >> (Bits * e), mask, H::magic);
    const uint32_t code = hfma2<T>(x, H::one, H::neg_magic);  // exact
    return hfma2<T>(code, v.s[w], v.z[w]);
  }

  // ---- blocked values ----
  // Word of block B lane g reads in a token-pair unit, and the bit of its first channel there
  // (both half-words).
  KVQ_DEVICE static int block_word(int B, int g) { return blocked_value_word<Bits>(B, g); }
  KVQ_DEVICE static int lane_bit(int g) { return blocked_value_lane_bit<Bits>(g); }
  template <class Tile>
  KVQ_DEVICE static void load_blocked(const uint8_t* tile, int p, int g, typename Tile::VBlockPair& v) {
    const uint32_t* unit = reinterpret_cast<const uint32_t*>(tile + Tile::vc + p * Tile::v_unit);
    KVQ_UNROLL
    for (int B = 0; B < Tile::v_blocks; ++B) v.w[B] = unit[block_word(B, g)];
  }
  // List index u as A operand: the codes of channel v_channel(g, u), tokens (2p, 2p+1), as fp16
  // subnormals code * 2^(q - 24), q = subnormal_value_bit(u % 4) (one shift a word, shared by its
  // four channels for INT2, and one AND a pair). No offset: the mma's sums of list index u carry
  // the factor 2^(q - 24), which code_unit(u) removes once per split.
  template <class Tile>
  KVQ_DEVICE static uint32_t pair_blocked(const typename Tile::VBlockPair& v, int u, int lane_bit) {
    return subnormal_value_pair<Bits>(v.w[u / 4], lane_bit, u % 4);
  }
  // 2^(24 - q) of list index u (the same for every lane).
  KVQ_DEVICE static float code_unit(int u) { return subnormal_unit(subnormal_value_bit<Bits>(u % 4)); }
  // Scale (which 0) or zero point (which 1) of block B for tokens (2p, 2p+1), as an fp16 pair.
  template <class Tile>
  KVQ_DEVICE static uint32_t block_params(const uint8_t* tile, int p, int B, int which) {
    const uint16_t* prm = reinterpret_cast<const uint16_t*>(tile + Tile::vp) + which * kTokens * groups;
    const int Gi = 32 * B / G;
    return uint32_t(prm[(2 * p) * groups + Gi]) | (uint32_t(prm[(2 * p + 1) * groups + Gi]) << 16);
  }
  // Scales of every block for tokens (2p, 2p+1), as fp16 pairs: each token's row of group scales
  // is read whole (one load of groups * 2 bytes), then one byte permute per block.
  template <class Tile>
  KVQ_DEVICE static void block_scales(const uint8_t* tile, int p, uint32_t (&s)[Tile::v_blocks]) {
    if constexpr (groups >= 2) {
      constexpr int N = groups / 2;
      uint32_t a[N], b[N];
      load_words(tile + Tile::vp + (2 * p) * groups * 2, a);
      load_words(tile + Tile::vp + (2 * p + 1) * groups * 2, b);
      KVQ_UNROLL
      for (int B = 0; B < Tile::v_blocks; ++B) {
        const int Gi = 32 * B / G;
        s[B] = __byte_perm(a[Gi / 2], b[Gi / 2], Gi % 2 ? 0x7632u : 0x5410u);
      }
    } else {
      KVQ_UNROLL
      for (int B = 0; B < Tile::v_blocks; ++B) s[B] = block_params<Tile>(tile, p, B, 0);
    }
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

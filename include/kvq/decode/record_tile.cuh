// kvq/decode/record_tile.cuh - a 16-token tile of one cold record (one page x one KV head),
// staged in shared memory, and the tensor-core operands the decode kernel reads from it.
//
// Staged tile (every part a multiple of 16 bytes, copied with 16-byte cp.async):
//   k_codes : 16 tokens of K codes, token-major, as in the record
//   k_params: INT2/INT4: scale[D] then zero[D] of the tile's key group (fp16), copied only on the
//             first tile of a group; INT8: 16 fp32 token scales; "none": empty
//   v_codes : 16 tokens of V codes (8 token pairs for INT2/INT4, pair-major, as in the record)
//   v_params: INT2/INT4: scale[16][D/Gv] then zero[16][D/Gv] (fp16); INT8: 16 fp32 scales
//
// Operands (mma.cuh has the fragment layouts; g = lane / 4, i = lane % 4):
//   K tile as A of S^T = K Q^T (rows = tokens, k = channels). Lane (g, i) reads tokens g and g+8
//     and only its own quarter of each row: D/4 channels (k_word_offset); its pair j feeds the
//     virtual k index 2i (+8 for odd j) of k-step j/2. The Q operand uses the same channel map
//     (k_channel), so the product is the ordinary dot product.
//   V tile as A of O^T = V^T P^T (rows = channels, k = tokens). Lane (g, i) reads token pairs i
//     and i+4. A packed INT2/INT4 V word already holds a channel of a token pair in its two
//     half-words (quant/packing.hpp), so one shift and one mask give the pair.
//     Blocked (INT2/INT4 values, Gv a multiple of 32): lane g takes channels 32B + 4g .. +3 of
//       every 32-channel block B, so m-tile mt (block mt/2, channels 4g + 2(mt%2) and +1) lies in
//       one value group; rows g / g+8 of m-tile mt are list indices u = 2mt / 2mt+1, channel
//       32(u/4) + 4g + u%4 (v_channel).
//     Otherwise: lane g reads its own eighth of each row, D/8 consecutive channels; m-tile mt row
//       g is its channel 2mt, row g+8 its channel 2mt+1.
// How each format's codes become these operands and where its scales and zero points fold in is
// its operand codec's (kernels/record_codec.cuh: KeyOperand, ValueOperand); this file holds the
// staged layout and the lane maps, which depend on the formats' bit widths only.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvq/cache/config.hpp"
#include "kvq/kernels/record_codec.cuh"
#include "kvq/kernels/record_loads.cuh"
#include "kvq/numeric/mma.cuh"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg>
struct RecordTile {
  using T = typename Cfg::dtype;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  using K = KeyOperand<KQ, Cfg>;    // the formats' operand codecs (kernels/record_codec.cuh)
  using V = ValueOperand<VQ, Cfg>;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, kTokens = 16;

  // Whether this kernel family serves the configuration (e.g. INT2/INT4: a 16-token tile must lie
  // in one key group, and a packed V word (8 or 4 channels) in one value group).
  static constexpr bool supported = K::supported && V::supported;

  // ---- staged bytes ----
  static constexpr int k_row = D * KQ::bits / 8;  // one token's K codes
  static constexpr int v_row = D * VQ::bits / 8;  // one token's V codes
  static constexpr int v_groups = V::groups;
  static constexpr int k_param_bytes = K::param_bytes;
  static constexpr int v_param_part = V::param_part;
  static constexpr int v_param_bytes = V::param_bytes;
  static constexpr int kc = 0;
  static constexpr int kp = kc + kTokens * k_row;
  static constexpr int vc = kp + k_param_bytes;
  static constexpr int vp = vc + kTokens * v_row;
  static constexpr int bytes = vp + v_param_bytes;
  static_assert(kp % 16 == 0 && vc % 16 == 0 && vp % 16 == 0 && bytes % 16 == 0, "tile parts are 16-byte chunks");

  // Issues lane `lane`'s copies of the key part (k_codes, k_params) of tile t0 (token offset in
  // the page, a multiple of 16) of a record. dst: the stage's shared-memory address + 16 * lane;
  // rec: the record + 16 * lane. With t0 a compile-time constant every address is a register plus
  // an immediate.
  KVQ_DEVICE static void copy_keys(uint32_t dst, const uint8_t* rec, int t0, int lane) {
    constexpr RecordOffsets o = Cfg::record;
    copy_part<kTokens * k_row>(dst + kc, rec + o.k_codes + t0 * k_row, lane);
    K::copy_params(dst + kp, rec, o.k_params, t0, lane);
  }
  // The value part (v_codes, v_params) of the same tile: the parts are disjoint, so a stage's keys
  // can be refilled while its values are still read.
  KVQ_DEVICE static void copy_values(uint32_t dst, const uint8_t* rec, int t0, int lane) {
    constexpr RecordOffsets o = Cfg::record;
    copy_part<kTokens * v_row>(dst + vc, rec + o.v_codes + t0 * v_row, lane);
    V::copy_params(dst + vp, rec, o.v_params, t0, lane);
  }

  // ---- K operand ----
  static constexpr int k_share = k_row / 4;  // bytes of a K row lane i reads
  static constexpr int k_words = k_share / 4;
  static constexpr bool k_chunked = k_share > 16;
  static constexpr int k_pairs_per_word = 16 / KQ::bits;  // "none": 1, INT8: 2, INT4: 4, INT2: 8
  static_assert(k_words * k_pairs_per_word == D / 8, "a lane holds D/8 channel pairs");

  KVQ_HD_CONSTEXPR static int k_word_offset(int i, int w) {
    return k_chunked ? (i + 4 * (w / 4)) * 16 + 4 * (w % 4) : i * k_share + 4 * w;
  }
  // Position in its word (the pair's bit is KQ::bits times it) of lane i's pair j, which feeds
  // k-step j / 2: the codec's order (KeyOperand::pos; INT2 reorders a word's positions so that two
  // quads of key offsets serve all k-steps).
  KVQ_HD_CONSTEXPR static int k_pos(int j) { return K::pos(j % k_pairs_per_word); }
  // Channel of lane i's pair j (j = 2 * kstep + half), and of its pair at position index jp
  // (the word's pairs in bit order).
  KVQ_HD_CONSTEXPR static int k_pos_channel(int i, int jp) {
    return k_word_offset(i, jp / k_pairs_per_word) * 8 / KQ::bits + 2 * (jp % k_pairs_per_word);
  }
  KVQ_HD_CONSTEXPR static int k_channel(int i, int j) {
    return k_pos_channel(i, j - j % k_pairs_per_word + k_pos(j));
  }

  // Lane i's words of token r's K row.
  KVQ_DEVICE static void load_k(const uint8_t* tile, int r, int i, uint32_t (&w)[k_words]) {
    load_share<k_share, 4>(tile + kc + r * k_row, i, w);
  }

  // Whether the key mma takes the query scaled into fp16 range per row (q 2^-e, row max |q| 2^-e in
  // [0.5, 1)): INT2/INT4 keys (exact codes against q * scale; 3 more mantissa bits than bf16) and
  // INT8 keys (exact subnormal codes against q 2^-e). Its element type is fp16 then, else the
  // model dtype.
  static constexpr bool k_scaled_query = K::scaled_query;
  using KMma = std::conditional_t<k_scaled_query, fp16, T>;

  // Pair j of lane i as A operand (KeyOperand::pair: INT2/INT4 (offset + code) in fp16, INT8
  // (code + 128) 2^-24 in fp16, "none" the values).
  KVQ_DEVICE static uint32_t k_pair(const uint32_t (&w)[k_words], int j) {
    return K::pair(w[j / k_pairs_per_word], k_pos(j));
  }
  // Lane i's 2 * D/16 key-parameter pairs (scales or zero points of its channels, fp16), in pair
  // order j (pair j covers channels k_channel(i, j) and +1): read in position order, with 16-byte
  // loads where the lane's positions run in aligned fours (every layout but the chunked ones), then
  // renamed (the order is a compile-time permutation: no instructions).
  KVQ_HD_CONSTEXPR static bool k_param_runs4() {
    for (int i = 0; i < 4; ++i)
      for (int jp = 0; jp < D / 8; ++jp)
        if (k_pos_channel(i, jp) / 2 != k_pos_channel(i, jp - jp % 4) / 2 + jp % 4 || k_pos_channel(i, jp - jp % 4) / 2 % 4 != 0)
          return false;
    return true;
  }
  KVQ_DEVICE static void load_k_param_pairs(const uint8_t* params, int i, uint32_t (&w)[D / 8]) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(params);
    uint32_t x[D / 8];  // position order
    if constexpr (k_param_runs4()) {
      KVQ_UNROLL
      for (int r = 0; r < D / 32; ++r) {
        const uint4 y = *reinterpret_cast<const uint4*>(p + k_pos_channel(i, 4 * r) / 2);
        x[4 * r] = y.x, x[4 * r + 1] = y.y, x[4 * r + 2] = y.z, x[4 * r + 3] = y.w;
      }
    } else {
      KVQ_UNROLL
      for (int jp = 0; jp < D / 8; ++jp) x[jp] = p[k_pos_channel(i, jp) / 2];
    }
    KVQ_UNROLL
    for (int j = 0; j < D / 8; ++j) w[j] = x[j - j % k_pairs_per_word + k_pos(j)];
  }
  // -offset of pair j (both halves), for the key bias: the A operand of -offset . Q''. Pairs 2kk
  // and 2kk + 1 of every word-sized run of k-steps sit at the same positions, and k_pos makes the
  // quads {k_neg_offset(2kk) x 2, k_neg_offset(2kk + 1) x 2} take at most two values: quad
  // k_offset_quad(kk) of k_offset_quads().
  KVQ_HD_CONSTEXPR static uint32_t k_neg_offset(int j) {
    return K::neg_offset(k_pos(j));
  }
  KVQ_HD_CONSTEXPR static bool k_same_offsets(int kk, int kk2) {
    return k_neg_offset(2 * kk) == k_neg_offset(2 * kk2) && k_neg_offset(2 * kk + 1) == k_neg_offset(2 * kk2 + 1);
  }
  KVQ_HD_CONSTEXPR static int k_second_quad() {  // the first k-step whose quad differs from k-step 0's (0: none)
    for (int kk = 0; kk < D / 16; ++kk)
      if (!k_same_offsets(kk, 0)) return kk;
    return 0;
  }
  KVQ_HD_CONSTEXPR static int k_offset_quad(int kk) { return k_same_offsets(kk, 0) ? 0 : 1; }
  KVQ_HD_CONSTEXPR static bool k_two_offset_quads() {
    for (int kk = 0; kk < D / 16; ++kk)
      if (!k_same_offsets(kk, 0) && !k_same_offsets(kk, k_second_quad())) return false;
    return true;
  }
  static_assert(!K::group_scales || k_two_offset_quads(), "two key-offset quads serve every k-step");
  // Word e (0-3) of quad q: {pair 2kk's offset, the same, pair 2kk + 1's, the same} of its k-step.
  KVQ_HD_CONSTEXPR static uint32_t k_offset_quad_word(int q, int e) {
    return k_neg_offset(2 * (q == 0 ? 0 : k_second_quad()) + e / 2);
  }

  // ---- V operand ----
  static constexpr bool v_packed = V::packed;
  static constexpr int v_unit = v_packed ? 2 * v_row : v_row;  // a token pair (packed) or a token row
  static constexpr int v_share = v_unit / 8;                   // bytes of a unit lane g reads
  static constexpr int v_words = v_share / 4;
  static constexpr bool v_chunked = v_share > 16;
  static constexpr int v_cpw = v_packed ? 16 / VQ::bits : 32 / VQ::bits;  // channels per word of a unit
  static_assert(v_words * v_cpw == D / 8, "a lane holds D/8 channels");

  KVQ_DEVICE static int v_word_offset(int g, int w) {
    return v_chunked ? (g + 8 * (w / 4)) * 16 + 4 * (w % 4) : g * v_share + 4 * w;
  }
  // Blocked values (ValueOperand::blocked: INT2/INT4 with value groups of a multiple of 32
  // channels): lane g takes channels 32B + 4g .. +3 of every 32-channel block B (see the header).
  static constexpr bool v_blocked = V::blocked;
  static constexpr int v_blocks = D / 32;

  // Channel of lane g's list index u (m-tile mt: rows g / g+8 are u = 2mt / 2mt+1).
  KVQ_DEVICE static int v_channel(int g, int u) {
    if constexpr (v_blocked)
      return 32 * (u / 4) + 4 * g + u % 4;
    else
      return v_word_offset(g, u / v_cpw) / 4 * v_cpw + u % v_cpw;
  }

  KVQ_DEVICE static void load_v_unit(const uint8_t* unit, int g, uint32_t (&w)[v_words]) {
    load_share<v_share, 8>(unit, g, w);
  }

  // What lane (g, i) holds of one token pair p of the tile: its words and the pair's scales.
  struct VPair {
    uint32_t w0[v_words];  // packed: the pair's words; else token 2p's row
    uint32_t w1[v_words];  // else: token 2p+1's row (unused when packed)
    uint32_t s[v_packed ? v_words : 1], z[v_packed ? v_words : 1];  // per word: (scale, zero) of tokens (2p, 2p+1)
  };

  KVQ_DEVICE static void load_v(const uint8_t* tile, int p, int g, VPair& v) { V::template load<RecordTile>(tile, p, g, v); }

  // ---- blocked values (ValueOperand's) ----
  struct VBlockPair {
    uint32_t w[v_blocks];  // one token pair's word of each block
  };
  KVQ_DEVICE static int v_lane_bit(int g) {
    if constexpr (v_blocked)
      return V::lane_bit(g);
    else
      return 0;
  }
  KVQ_DEVICE static void load_v_blocked(const uint8_t* tile, int p, int g, VBlockPair& v) {
    V::template load_blocked<RecordTile>(tile, p, g, v);
  }
  KVQ_DEVICE static uint32_t v_pair_blocked(const VBlockPair& v, int u, int lane_bit) {
    return V::template pair_blocked<RecordTile>(v, u, lane_bit);
  }
  KVQ_DEVICE static float v_code_unit(int u) { return V::code_unit(u); }
  KVQ_DEVICE static void v_block_scales(const uint8_t* tile, int p, uint32_t (&s)[v_blocks]) {
    V::template block_scales<RecordTile>(tile, p, s);
  }
  KVQ_DEVICE static uint32_t v_block_params(const uint8_t* tile, int p, int B, int which) {
    return V::template block_params<RecordTile>(tile, p, B, which);
  }

  // Channel u of the pair as A operand: (token 2p, token 2p+1), dequantized in T.
  KVQ_DEVICE static uint32_t v_pair(const VPair& v, int u) { return V::template pair<RecordTile>(v, u); }
};

}  // namespace detail
KVQ_NAMESPACE_END

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
// INT2/INT4 keys enter the mma as exact fp16 (offset + code) pairs (quant/offset_code.hpp: a
// shift and one LOP3): the per-channel scale is in the query operand, the offsets and the zero
// points in a per-row bias. Blocked values enter as exact fp16 subnormals code * 2^(q - 24)
// (quant/subnormal_values.hpp: a shift and one AND): the token's group scale is in the
// probabilities (P' = P s, the B operand), the factor 2^(q - 24) of each channel leaves the fp32
// sums once per split, and one running sum per block restores O = 2^(24 - q) A + sum P z.
// Other INT2/INT4 values: (magic + code) by one OR, the code by one exact subtraction, scale and
// zero point by one fma. INT8 keys enter the fp16 mma as exact subnormals (x + 128) 2^-24
// (quant/int8_subnormal.hpp: one XOR a word, one byte permute a pair); the offset leaves through a
// per-row bias, and the token scale and 2^24 multiply the logits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvq/cache/config.hpp"
#include "kvq/numeric/and_or.hpp"
#include "kvq/numeric/mma.cuh"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/int8_subnormal.hpp"
#include "kvq/quant/offset_code.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/subnormal_values.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg>
struct RecordTile {
  using T = typename Cfg::dtype;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  using H = Half2Consts<T>;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, kTokens = 16;
  static constexpr bool k_asym = KQ::kind == QuantKind::kAsym, k_int8 = KQ::kind == QuantKind::kInt8;
  static constexpr bool v_asym = VQ::kind == QuantKind::kAsym, v_int8 = VQ::kind == QuantKind::kInt8;

  // Whether this kernel family serves the configuration: a 16-token tile must lie in one key
  // group, and a packed V word (8 or 4 channels) in one value group.
  static constexpr bool supported = (!k_asym || KQ::group % kTokens == 0) && (!v_asym || VQ::group % (16 / VQ::bits) == 0);

  // ---- staged bytes ----
  static constexpr int k_row = D * KQ::bits / 8;  // one token's K codes
  static constexpr int v_row = D * VQ::bits / 8;  // one token's V codes
  static constexpr int v_groups = v_asym ? D / VQ::group : 1;
  static constexpr int k_param_bytes = k_asym ? 4 * D : k_int8 ? 4 * kTokens : 0;
  static constexpr int v_param_part = v_asym ? kTokens * v_groups * 2 : v_int8 ? 4 * kTokens : 0;
  static constexpr int v_param_bytes = v_asym ? 2 * v_param_part : v_param_part;
  static constexpr int kc = 0;
  static constexpr int kp = kc + kTokens * k_row;
  static constexpr int vc = kp + k_param_bytes;
  static constexpr int vp = vc + kTokens * v_row;
  static constexpr int bytes = vp + v_param_bytes;
  static_assert(kp % 16 == 0 && vc % 16 == 0 && vp % 16 == 0 && bytes % 16 == 0, "tile parts are 16-byte chunks");

  // Lane `lane`'s share of a part's 16-byte copies: chunks lane, lane + 32, ... `dst` (a
  // shared-memory address) and `src` are already advanced by 16 * lane.
  template <int Bytes>
  KVQ_DEVICE static void copy_part(uint32_t dst, const uint8_t* src, int lane) {
    static_assert(Bytes % 16 == 0, "16-byte chunks");
    constexpr int n = Bytes / 16;
    KVQ_UNROLL
    for (int c = 0; c < n / 32; ++c) cp_async16(dst + 512 * c, src + 512 * c);
    if constexpr (n % 32 != 0)
      if (lane < n % 32) cp_async16(dst + 512 * (n / 32), src + 512 * (n / 32));
  }

  // Issues lane `lane`'s copies of the key part (k_codes, k_params) of tile t0 (token offset in
  // the page, a multiple of 16) of a record. dst: the stage's shared-memory address + 16 * lane;
  // rec: the record + 16 * lane. With t0 a compile-time constant every address is a register plus
  // an immediate.
  KVQ_DEVICE static void copy_keys(uint32_t dst, const uint8_t* rec, int t0, int lane) {
    constexpr RecordOffsets o = Cfg::record;
    copy_part<kTokens * k_row>(dst + kc, rec + o.k_codes + t0 * k_row, lane);
    if constexpr (k_asym) {
      if (t0 % KQ::group == 0) copy_part<k_param_bytes>(dst + kp, rec + o.k_params + (t0 / KQ::group) * 4 * D, lane);
    } else if constexpr (k_int8) {
      copy_part<k_param_bytes>(dst + kp, rec + o.k_params + t0 * 4, lane);
    }
  }
  // The value part (v_codes, v_params) of the same tile: the parts are disjoint, so a stage's keys
  // can be refilled while its values are still read.
  KVQ_DEVICE static void copy_values(uint32_t dst, const uint8_t* rec, int t0, int lane) {
    constexpr RecordOffsets o = Cfg::record;
    copy_part<kTokens * v_row>(dst + vc, rec + o.v_codes + t0 * v_row, lane);
    if constexpr (v_asym) {
      constexpr int cpp = v_param_part / 16;  // chunks of the scales (then as many of the zero points)
      if constexpr (2 * cpp <= 32) {          // one copy per lane: lanes cpp .. 2cpp-1 take the zero points
        const int jump = lane >= cpp ? P * v_groups * 2 - v_param_part : 0;
        if (lane < 2 * cpp) cp_async16(dst + vp, rec + o.v_params + t0 * v_groups * 2 + jump);
      } else {
        copy_part<v_param_part>(dst + vp, rec + o.v_params + t0 * v_groups * 2, lane);
        copy_part<v_param_part>(dst + vp + v_param_part, rec + o.v_params + (P + t0) * v_groups * 2, lane);
      }
    } else if constexpr (v_int8) {
      copy_part<v_param_part>(dst + vp, rec + o.v_params + t0 * 4, lane);
    }
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
  // k-step j / 2. INT2 takes a word's positions in the order 0 1 2 3 5 6 4 7, so that the two pairs
  // of every k-step carry the offsets (64, 16) or (4, 4) (quant/offset_code.hpp) and two quads of
  // key offsets serve all k-steps; the others in order (INT4: (64, 64) and (256, 16)).
  KVQ_HD_CONSTEXPR static int k_pos(int j) {
    const int q = j % k_pairs_per_word;
    return k_asym && KQ::bits == 2 && q >= 4 ? (0x7465 >> (4 * (q - 4))) & 0xF : q;
  }
  // Channel of lane i's pair j (j = 2 * kstep + half), and of its pair at position index jp
  // (the word's pairs in bit order).
  KVQ_HD_CONSTEXPR static int k_pos_channel(int i, int jp) {
    return k_word_offset(i, jp / k_pairs_per_word) * 8 / KQ::bits + 2 * (jp % k_pairs_per_word);
  }
  KVQ_HD_CONSTEXPR static int k_channel(int i, int j) {
    return k_pos_channel(i, j - j % k_pairs_per_word + k_pos(j));
  }

  template <int N>
  KVQ_DEVICE static void load_words(const uint8_t* p, uint32_t (&w)[N]) {
    if constexpr (N % 4 == 0) {
      KVQ_UNROLL
      for (int m = 0; m < N / 4; ++m) {
        const uint4 x = *reinterpret_cast<const uint4*>(p + 16 * m);
        w[4 * m] = x.x, w[4 * m + 1] = x.y, w[4 * m + 2] = x.z, w[4 * m + 3] = x.w;
      }
    } else if constexpr (N == 2) {
      const uint2 x = *reinterpret_cast<const uint2*>(p);
      w[0] = x.x, w[1] = x.y;
    } else {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    }
  }

  // The `Share` bytes of a row that lane index `x` of `Lanes` reads: contiguous when at most 16,
  // else 16-byte chunks x, x + Lanes, ... (spreads the lanes of one load over the banks).
  template <int Share, int Lanes, int N>
  KVQ_DEVICE static void load_share(const uint8_t* row, int x, uint32_t (&w)[N]) {
    static_assert(N * 4 == Share, "one word per 4 bytes of the share");
    if constexpr (Share > 16) {
      KVQ_UNROLL
      for (int m = 0; m < N / 4; ++m) {
        uint32_t c[4];
        load_words(row + (x + Lanes * m) * 16, c);
        KVQ_UNROLL
        for (int e = 0; e < 4; ++e) w[4 * m + e] = c[e];
      }
    } else {
      load_words(row + x * Share, w);
    }
  }

  // Lane i's words of token r's K row.
  KVQ_DEVICE static void load_k(const uint8_t* tile, int r, int i, uint32_t (&w)[k_words]) {
    load_share<k_share, 4>(tile + kc + r * k_row, i, w);
  }

  // INT8 bytes e0 (low half) and e1 (high half) of x as an exact pair of T (the values' codes).
  KVQ_DEVICE static uint32_t int8_pair(uint32_t x, uint32_t y, int e0, int e1) {
    const uint32_t t = __byte_perm(x, y, uint32_t(e0) | (uint32_t(e1) << 8));
    const uint32_t lo = and_or(t, 0x007f007fu, H::magic), hi = and_or(t, 0x00800080u, H::magic);
    return hfma2<T>(hi, H::neg_one, lo);  // (magic + low 7 bits) - (magic + 128 * sign)
  }

  // Whether the key mma takes the query scaled into fp16 range per row (q 2^-e, row max |q| 2^-e in
  // [0.5, 1)): INT2/INT4 keys (exact codes against q * scale; 3 more mantissa bits than bf16) and
  // INT8 keys (exact subnormal codes against q 2^-e). Its element type is fp16 then, else the
  // model dtype.
  static constexpr bool k_scaled_query = k_asym || k_int8;
  using KMma = std::conditional_t<k_scaled_query, fp16, T>;

  // Pair j of lane i as A operand: INT2/INT4 (offset + code) in fp16, INT8 (code + 128) 2^-24 in
  // fp16 (the XOR is shared by the word's two pairs), "none" the values.
  KVQ_DEVICE static uint32_t k_pair(const uint32_t (&w)[k_words], int j) {
    const uint32_t x = w[j / k_pairs_per_word];
    const int pw = k_pos(j);
    if constexpr (k_asym) {
      return offset_code_pair<KQ::bits>(x, KQ::bits * pw);  // exact
    } else if constexpr (k_int8) {
      return int8_subnormal_pair(int8_subnormal_word(x), 2 * pw, 2 * pw + 1);  // exact
    } else {
      return x;
    }
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
    return k_asym ? offset_code_neg_offset_pair<(k_asym ? KQ::bits : 2)>(KQ::bits * k_pos(j)) : 0u;
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
  static_assert(!k_asym || k_two_offset_quads(), "two key-offset quads serve every k-step");
  // Word e (0-3) of quad q: {pair 2kk's offset, the same, pair 2kk + 1's, the same} of its k-step.
  KVQ_HD_CONSTEXPR static uint32_t k_offset_quad_word(int q, int e) {
    return k_neg_offset(2 * (q == 0 ? 0 : k_second_quad()) + e / 2);
  }

  // ---- V operand ----
  static constexpr bool v_packed = v_asym;
  static constexpr int v_unit = v_packed ? 2 * v_row : v_row;  // a token pair (packed) or a token row
  static constexpr int v_share = v_unit / 8;                   // bytes of a unit lane g reads
  static constexpr int v_words = v_share / 4;
  static constexpr bool v_chunked = v_share > 16;
  static constexpr int v_cpw = v_packed ? 16 / VQ::bits : 32 / VQ::bits;  // channels per word of a unit
  static_assert(v_words * v_cpw == D / 8, "a lane holds D/8 channels");

  KVQ_DEVICE static int v_word_offset(int g, int w) {
    return v_chunked ? (g + 8 * (w / 4)) * 16 + 4 * (w % 4) : g * v_share + 4 * w;
  }
  // Blocked values: INT2/INT4 with value groups of a multiple of 32 channels (see the header).
  static constexpr bool v_blocked = v_asym && VQ::group % 32 == 0;
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

  KVQ_DEVICE static void load_v(const uint8_t* tile, int p, int g, VPair& v) {
    if constexpr (v_packed) {
      load_v_unit(tile + vc + p * v_unit, g, v.w0);
      const uint16_t* sc = reinterpret_cast<const uint16_t*>(tile + vp);
      const uint16_t* ze = sc + kTokens * v_groups;
      constexpr bool one_group = !v_chunked && VQ::group % (D / 8) == 0;
      KVQ_UNROLL
      for (int w = 0; w < v_words; ++w) {
        if (one_group && w > 0) {
          v.s[w] = v.s[0], v.z[w] = v.z[0];
          continue;
        }
        const int G = v_channel(g, w * v_cpw) / VQ::group;
        v.s[w] = params_pair<T>(sc[(2 * p) * v_groups + G], sc[(2 * p + 1) * v_groups + G]);
        v.z[w] = params_pair<T>(ze[(2 * p) * v_groups + G], ze[(2 * p + 1) * v_groups + G]);
      }
    } else {
      load_v_unit(tile + vc + (2 * p) * v_unit, g, v.w0);
      load_v_unit(tile + vc + (2 * p + 1) * v_unit, g, v.w1);
      if constexpr (v_int8) {
        const float* sc = reinterpret_cast<const float*>(tile + vp);
        v.s[0] = pack2<T>(sc[2 * p], sc[2 * p + 1]);
      }
    }
  }

  // ---- blocked values ----
  // Word of block B lane g reads in a token-pair unit, and the bit of its first channel there
  // (both half-words).
  KVQ_DEVICE static int v_block_word(int B, int g) { return blocked_value_word<VQ::bits>(B, g); }
  KVQ_DEVICE static int v_lane_bit(int g) { return blocked_value_lane_bit<VQ::bits>(g); }

  struct VBlockPair {
    uint32_t w[v_blocks];  // one token pair's word of each block
  };
  KVQ_DEVICE static void load_v_blocked(const uint8_t* tile, int p, int g, VBlockPair& v) {
    const uint32_t* unit = reinterpret_cast<const uint32_t*>(tile + vc + p * v_unit);
    KVQ_UNROLL
    for (int B = 0; B < v_blocks; ++B) v.w[B] = unit[v_block_word(B, g)];
  }
  // List index u as A operand: the codes of channel v_channel(g, u), tokens (2p, 2p+1), as fp16
  // subnormals code * 2^(q - 24), q = subnormal_value_bit(u % 4) (quant/subnormal_values.hpp: one
  // shift a word, shared by its four channels for INT2, and one AND a pair). No offset: the mma's
  // sums of list index u carry the factor 2^(q - 24), which v_code_unit(u) removes once per split.
  KVQ_DEVICE static uint32_t v_pair_blocked(const VBlockPair& v, int u, int lane_bit) {
    return subnormal_value_pair<VQ::bits>(v.w[u / 4], lane_bit, u % 4);
  }
  // 2^(24 - q) of list index u (the same for every lane).
  KVQ_DEVICE static float v_code_unit(int u) { return subnormal_unit(subnormal_value_bit<VQ::bits>(u % 4)); }
  // Scales of every block for tokens (2p, 2p+1), as fp16 pairs: each token's row of group scales
  // is read whole (one load of v_groups * 2 bytes), then one byte permute per block.
  KVQ_DEVICE static void v_block_scales(const uint8_t* tile, int p, uint32_t (&s)[v_blocks]) {
    if constexpr (v_groups >= 2) {
      constexpr int N = v_groups / 2;
      uint32_t a[N], b[N];
      load_words(tile + vp + (2 * p) * v_groups * 2, a);
      load_words(tile + vp + (2 * p + 1) * v_groups * 2, b);
      KVQ_UNROLL
      for (int B = 0; B < v_blocks; ++B) {
        const int G = 32 * B / VQ::group;
        s[B] = __byte_perm(a[G / 2], b[G / 2], G % 2 ? 0x7632u : 0x5410u);
      }
    } else {
      KVQ_UNROLL
      for (int B = 0; B < v_blocks; ++B) s[B] = v_block_params(tile, p, B, 0);
    }
  }
  // Scale (which 0) or zero point (which 1) of block B for tokens (2p, 2p+1), as an fp16 pair.
  KVQ_DEVICE static uint32_t v_block_params(const uint8_t* tile, int p, int B, int which) {
    const uint16_t* prm = reinterpret_cast<const uint16_t*>(tile + vp) + which * kTokens * v_groups;
    const int G = 32 * B / VQ::group;
    return uint32_t(prm[(2 * p) * v_groups + G]) | (uint32_t(prm[(2 * p + 1) * v_groups + G]) << 16);
  }

  // Channel u of the pair as A operand: (token 2p, token 2p+1), dequantized in T.
  KVQ_DEVICE static uint32_t v_pair(const VPair& v, int u) {
    const int w = u / v_cpw, e = u % v_cpw;
    if constexpr (v_packed) {
      constexpr uint32_t mask = packed_pair_mask(VQ::bits, 0);
      const uint32_t x = and_or(v.w0[w] >> (VQ::bits * e), mask, H::magic);
      const uint32_t code = hfma2<T>(x, H::one, H::neg_magic);  // exact
      return hfma2<T>(code, v.s[w], v.z[w]);
    } else if constexpr (v_int8) {
      return hmul2<T>(int8_pair(v.w0[w], v.w1[w], e, 4 + e), v.s[0]);
    } else {
      return __byte_perm(v.w0[w], v.w1[w], e ? 0x7632u : 0x5410u);
    }
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/codec/asym_codec.hpp - Codec<IntAsym<Bits, G>> (codec.hpp): INT2 / INT3 / INT4 codes packed in
// 32-bit words (packing.hpp; INT3 in two planes), an fp16 scale and zero point per group (keys: one
// channel x G tokens; values: one token x G channels), value = fma(code, scale, zero)
// (docs/FORMAT.md 3.3-3.5, 4.2). The chunk decode's pieces that kernels use one by one are in
// asym_chunk.hpp (INT2 / INT4 only: the decode and prefill kernels do not read INT3 yet).
#pragma once

#include <cstdint>

#include "kvq/codec/asym_chunk.hpp"
#include "kvq/codec/asym_params.hpp"
#include "kvq/codec/chunk.hpp"
#include "kvq/codec/codec_fwd.hpp"
#include "kvq/core/platform.hpp"
#include "kvq/numeric/bits.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/group_codec.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/scalar.hpp"

KVQ_NAMESPACE_BEGIN

template <int Bits, int G>
struct Codec<IntAsym<Bits, G>> {
  using Q = IntAsym<Bits, G>;
  static constexpr bool quantized = true;
  // fma of an integer code with an fp16 scale and zero point: 0 or at least 2^-24 in magnitude
  // (never an fp32 subnormal), a NaN only the canonical one, and |value| < 16 * 65504 + 65504, so
  // bf16's round-to-nearest-even pair conversion gives exactly from_float_saturate's bits.
  static constexpr bool bf16_pair_exact = true;

  // The parameters of tokens [off, off + n) (off a multiple of n, or of G for keys): keys the
  // scale and zero rows of the key groups covering them (one group when n < G), one run; values
  // their scales, then their zero points (two runs).
  template <Role R, int D, int P>
  KVQ_HD_CONSTEXPR static ParamRun param_run(int i, int off, int n) {
    if constexpr (R == Role::kKey) {
      return i == 0 ? ParamRun{size_t(off / G) * D * 4, size_t(n >= G ? n / G : 1) * D * 4} : ParamRun{0, 0};
    } else {
      constexpr size_t groups = D / G;
      const size_t half = size_t(n) * groups * 2;
      return i == 0 ? ParamRun{size_t(off) * groups * 2, half} : ParamRun{size_t(P) * groups * 2 + size_t(off) * groups * 2, half};
    }
  }

  template <Role R, int D, int P, class T>
  KVQ_HD static float decode_element(const uint8_t* codes, const uint8_t* params, int t, int c) {
    const uint32_t code = read_code<Q::bits, D, P>(R, codes, t, c);
    const AsymParams p = asym_params_at<Q, R, D, P>(params, t, c);
    return asym_decode(code, f16_bits_to_f32(p.zero), f16_bits_to_f32(p.scale));
  }

  template <Role R, int D, int P, class T>
  KVQ_HD static void decode_chunk(const uint8_t* codes, const uint8_t* params, int t, int c0, float (&out)[kDecodeChunk]) {
    // The 8 codes sit in one packed word (keys; INT2 values) or two (INT4 values): code_slot of
    // the first channel gives the word and the shift of element 0 (packing.hpp); the parameters
    // come from asym_params_at, once for the chunk where a value group covers it. Codes and fp16
    // parameters of all 8 elements first, the conversions and fmas after: in this order the
    // dequantize kernel issues all the loads of a thread's items before their math (converting the
    // key parameters up front instead cost the kernel a fifth of its INT2 throughput on an H200).
    uint32_t code[kDecodeChunk];
    AsymParams par[kDecodeChunk];
    if constexpr (Q::bits == 3) {  // two planes: element by element (the host reference's reads)
      KVQ_UNROLL
      for (int e = 0; e < kDecodeChunk; ++e) {
        code[e] = read_code<3, D, P>(R, codes, t, c0 + e);
        par[e] = asym_params_at<Q, R, D, P>(params, t, c0 + e);
      }
    } else if constexpr (R == Role::kKey) {
      const uint32_t w = key_chunk_word<Q, D>(codes, t, c0);
      const uint16_t* row = key_params_row<Q, D>(params, t);
      uint16_t scale[kDecodeChunk], zero[kDecodeChunk];
      load8_u16(row + c0, scale);
      load8_u16(row + D + c0, zero);
      KVQ_UNROLL
      for (int e = 0; e < kDecodeChunk; ++e) {
        code[e] = key_chunk_code<Q>(w, e);
        par[e] = AsymParams{scale[e], zero[e]};
      }
    } else {
      const uint32_t* words = reinterpret_cast<const uint32_t*>(codes) + code_slot<Q::bits, D>(R, t, c0).word;
      const AsymParams whole = asym_params_at<Q, R, D, P>(params, t, c0);
      KVQ_UNROLL
      for (int e = 0; e < kDecodeChunk; ++e) {
        code[e] = value_chunk_code<Q>(words, e, t & 1);
        par[e] = value_element_params<Q, D, P>(params, t, c0, e, whole);
      }
    }
    KVQ_UNROLL
    for (int e = 0; e < kDecodeChunk; ++e) out[e] = asym_decode(code[e], f16_bits_to_f32(par[e].zero), f16_bits_to_f32(par[e].scale));
  }

  // Four passes, cut the same way for one host thread and a device block, each after `sync`:
  // (1) the min and max of each 8-element chunk of a group (keys: 8 tokens of one channel; values:
  // 8 channels of one token) into scratch (skipped for groups of at most 8: a group is one chunk); (2) each group's range from its chunks (fminf / fmaxf
  // are exact, so the order does not matter; kMse then walks the whole group), its scale and zero
  // point into the record; (3) each chunk's 8 codes, from the stored parameters, into scratch
  // (over the chunk ranges, which pass 2 consumed); (4) one thread a packed word. The bytes are
  // encode_asym_group's of each group (tests/host/test_packing.cpp).
  KVQ_EXEC_CHECK_DISABLE
  template <Role R, int D, int P, class T, class Row, class Sync>
  KVQ_HD static void encode_section(Row&& row, uint8_t* codes, uint8_t* params, uint8_t* scratch, int tid, int nthreads,
                                    Sync&& sync, uint32_t& flags, KeyClip key_clip) {
    constexpr int C = G < kDecodeChunk ? G : kDecodeChunk;  // elements a chunk (a whole group below 8)
    constexpr int kChunks = P * D / C;                      // chunks of the section
    constexpr int kPerGroup = G / C;                        // chunks of a group
    static_assert(G % C == 0, "groups are whole chunks");
    uint16_t* p16 = reinterpret_cast<uint16_t*>(params);
    float* lo_of = reinterpret_cast<float*>(scratch);  // [kChunks], then hi_of: P * D bytes in all
    float* hi_of = lo_of + kChunks;
    // Chunk i (C elements): keys channel c = i % D of tokens C (i / D) ..; values token
    // t = i / (D / C), channels C (i % (D / C)) ... Element k of chunk i at (token, channel):
    auto elem_t = [](int i, int k) { return R == Role::kKey ? (i / D) * C + k : i / (D / C); };
    auto elem_c = [](int i, int k) { return R == Role::kKey ? i % D : (i % (D / C)) * C + k; };
    auto chunk_range = [&](int i, float& lo, float& hi) {
      KVQ_UNROLL
      for (int k = 0; k < C; ++k) {
        const float x = sanitize(row(elem_t(i, k))[elem_c(i, k)].to_float(), flags);
        lo = fminf(lo, x);
        hi = fmaxf(hi, x);
      }
    };
    if constexpr (kPerGroup > 1) {  // (with one chunk a group, pass 2 reads the group itself)
      for (int i = tid; i < kChunks; i += nthreads) {
        float lo = kF16Max, hi = -kF16Max;
        chunk_range(i, lo, hi);
        lo_of[i] = lo;
        hi_of[i] = hi;
      }
      sync();
    }
    // Group j: keys (token group j / D, channel j % D), parameters at [2g][c] / [2g+1][c];
    // values (token j / (D / G), channel group j % (D / G)), at [t][g] / [P + t][g]. Its chunks:
    // keys i = (g G / C + q) D + c, values i = t D / C + g G / C + q, q < G / C.
    constexpr int kGroups = P * D / G;
    auto chunk_of = [](int j, int q) {
      return R == Role::kKey ? ((j / D) * kPerGroup + q) * D + j % D : (j / (D / G)) * (D / C) + (j % (D / G)) * kPerGroup + q;
    };
    auto scale_slot = [](int j) { return R == Role::kKey ? (2 * (j / D)) * D + j % D : j; };
    auto zero_slot = [](int j) { return R == Role::kKey ? (2 * (j / D) + 1) * D + j % D : P * (D / G) + j; };
    for (int j = tid; j < kGroups; j += nthreads) {
      float lo = kF16Max, hi = -kF16Max;
      if constexpr (kPerGroup > 1) {
        for (int q = 0; q < kPerGroup; ++q) {
          lo = fminf(lo, lo_of[chunk_of(j, q)]);
          hi = fmaxf(hi, hi_of[chunk_of(j, q)]);
        }
      } else {
        chunk_range(chunk_of(j, 0), lo, hi);
      }
      if (R == Role::kKey && key_clip == KeyClip::kMse) {
        auto get = [&](int k) {
          const int i = chunk_of(j, k / C);
          return row(elem_t(i, k % C))[elem_c(i, k % C)].to_float();
        };
        mse_clip_range<Q::bits>(G, get, lo, hi);
      }
      const AsymParams p = asym_params<Q::bits>(lo, hi);
      p16[scale_slot(j)] = p.scale;
      p16[zero_slot(j)] = p.zero;
    }
    sync();
    for (int i = tid; i < kChunks; i += nthreads) {
      const int j = R == Role::kKey ? (i / D / kPerGroup) * D + i % D : (i / (D / C)) * (D / G) + (i % (D / C)) / kPerGroup;
      const float zero = f16_bits_to_f32(p16[zero_slot(j)]), scale = f16_bits_to_f32(p16[scale_slot(j)]);
      uint32_t ignored = 0;
      uint8_t code[C];
      KVQ_UNROLL
      for (int k = 0; k < C; ++k)
        code[k] = uint8_t(asym_encode<Q::bits>(sanitize(row(elem_t(i, k))[elem_c(i, k)].to_float(), ignored), zero, scale));
      KVQ_UNROLL
      for (int k = 0; k < C; ++k) scratch[elem_t(i, k) * D + elem_c(i, k)] = code[k];
    }
    sync();
    uint32_t* words = reinterpret_cast<uint32_t*>(codes);
    constexpr int num_words = section_words<Q::bits, D, P>();
    for (int w = tid; w < num_words; w += nthreads)
      words[w] = pack_section_word<Q::bits, D, P>(R, w, [&](int t, int c) { return uint32_t(scratch[t * D + c]); });
  }
};

KVQ_NAMESPACE_END

// kvq/codec/asym_codec.hpp - Codec<IntAsym<Bits, G>> (codec.hpp): INT2 / INT4 codes packed in 32-bit
// words (packing.hpp), an fp16 scale and zero point per group (keys: one channel x G tokens;
// values: one token x G channels), value = fma(code, scale, zero) (docs/FORMAT.md 3.3-3.5, 4.2).
// The chunk decode's pieces that kernels use one by one are in asym_chunk.hpp.
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

namespace detail {
// Channel c of tokens [t0, t0 + n) of a page: one key group, read through the caller's row().
template <class Row>
struct KeyColumn {
  Row& row;
  int t0, c;
  KVQ_EXEC_CHECK_DISABLE
  KVQ_HD float operator()(int k) const { return row(t0 + k)[c].to_float(); }
};
}  // namespace detail

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
    const CodeSlot s = code_slot<Q::bits, D>(R, t, c);
    const uint32_t code = (reinterpret_cast<const uint32_t*>(codes)[s.word] >> s.shift) & uint32_t(Q::max_code);
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
    const CodeSlot first = code_slot<Q::bits, D>(R, t, c0);
    uint32_t code[kDecodeChunk];
    AsymParams par[kDecodeChunk];
    if constexpr (R == Role::kKey) {
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
      const uint32_t* words = reinterpret_cast<const uint32_t*>(codes) + first.word;
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

  // One thread a group (its scale and zero point, its codes into scratch), then, after `sync`,
  // one thread a packed word.
  KVQ_EXEC_CHECK_DISABLE
  template <Role R, int D, int P, class T, class Row, class Sync>
  KVQ_HD static void encode_section(Row&& row, uint8_t* codes, uint8_t* params, uint8_t* scratch, int tid, int nthreads,
                                    Sync&& sync, uint32_t& flags, KeyClip key_clip) {
    uint16_t* p16 = reinterpret_cast<uint16_t*>(params);
    if constexpr (R == Role::kKey) {
      // groups: (token group g, channel c); params scale at [2g][c], zero at [2g+1][c]
      for (int i = tid; i < (P / G) * D; i += nthreads) {
        const int g = i / D, c = i % D;
        const AsymParams p = encode_asym_group<Q::bits>(
            G, detail::KeyColumn<Row>{row, g * G, c},
            [&](int k, uint32_t code) { scratch[(g * G + k) * D + c] = uint8_t(code); }, flags, key_clip);
        p16[(2 * g) * D + c] = p.scale;
        p16[(2 * g + 1) * D + c] = p.zero;
      }
    } else {
      // groups: (token t, channel group g); params scale at [t][g], zero at [P + t][g]
      constexpr int groups = D / G;
      for (int i = tid; i < P * groups; i += nthreads) {
        const int t = i / groups, g = i % groups;
        const T* x = row(t);
        const AsymParams p = encode_asym_group<Q::bits>(
            G, [&](int k) { return x[g * G + k].to_float(); },
            [&](int k, uint32_t code) { scratch[t * D + g * G + k] = uint8_t(code); }, flags);
        p16[t * groups + g] = p.scale;
        p16[P * groups + t * groups + g] = p.zero;
      }
    }
    sync();
    uint32_t* words = reinterpret_cast<uint32_t*>(codes);
    constexpr int num_words = P * D / (32 / Q::bits);
    for (int w = tid; w < num_words; w += nthreads)
      words[w] = pack_word<Q::bits, D>(R, w, [&](int t, int c) { return scratch[t * D + c]; });
  }
};

KVQ_NAMESPACE_END

// kvq/codec/int8_codec.hpp - Codec<Int8> (codec.hpp): symmetric codes in [-127, 127], one fp32 scale
// per token (docs/FORMAT.md 3.7, 4.4), value = code * scale.
#pragma once

#include <cstdint>

#include "kvq/codec/chunk.hpp"
#include "kvq/codec/codec_fwd.hpp"
#include "kvq/core/platform.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/group_codec.hpp"
#include "kvq/quant/scalar.hpp"

KVQ_NAMESPACE_BEGIN

// INT8 channels c0 .. c0 + 7 of one row from their 8 code bytes as two words (little-endian:
// channel c0 in the low byte of lo) and the row's scale (the values decode_chunk gives).
KVQ_HD void decode_int8_words(uint32_t lo, uint32_t hi, float scale, float (&out)[kDecodeChunk]) {
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e)
    out[e] = int8_decode(static_cast<int8_t>(static_cast<uint8_t>((e < 4 ? lo : hi) >> (8 * (e % 4)))), scale);
}

template <>
struct Codec<Int8> {
  using Q = Int8;
  static constexpr bool quantized = true;
  // code * scale may be an fp32 subnormal: the dequantize kernel converts with from_float.
  static constexpr bool bf16_pair_exact = false;

  // The parameters of tokens [off, off + n): their fp32 scales, one run.
  template <Role R, int D, int P>
  KVQ_HD_CONSTEXPR static ParamRun param_run(int i, int off, int n) {
    return i == 0 ? ParamRun{size_t(off) * 4, size_t(n) * 4} : ParamRun{0, 0};
  }

  template <Role R, int D, int P, class T>
  KVQ_HD static float decode_element(const uint8_t* codes, const uint8_t* params, int t, int c) {
    return int8_decode(reinterpret_cast<const int8_t*>(codes)[t * D + c], reinterpret_cast<const float*>(params)[t]);
  }

  template <Role R, int D, int P, class T>
  KVQ_HD static void decode_chunk(const uint8_t* codes, const uint8_t* params, int t, int c0, float (&out)[kDecodeChunk]) {
    const int8_t* row = reinterpret_cast<const int8_t*>(codes) + t * D + c0;
    const float scale = reinterpret_cast<const float*>(params)[t];
    KVQ_UNROLL
    for (int e = 0; e < kDecodeChunk; ++e) out[e] = int8_decode(row[e], scale);
  }

  // One thread a token: its absmax scale, then its D codes.
  KVQ_EXEC_CHECK_DISABLE
  template <Role R, int D, int P, class T, class Row, class Sync>
  KVQ_HD static void encode_section(Row&& row, uint8_t* codes, uint8_t* params, uint8_t*, int tid, int nthreads, Sync&&,
                                    uint32_t& flags, KeyClip) {
    int8_t* out = reinterpret_cast<int8_t*>(codes);
    float* scales = reinterpret_cast<float*>(params);
    for (int t = tid; t < P; t += nthreads) {
      const T* x = row(t);
      scales[t] = encode_int8_group(D, [&](int i) { return x[i].to_float(); },
                                    [&](int i, int8_t code) { out[t * D + i] = code; }, flags);
    }
  }
};

KVQ_NAMESPACE_END

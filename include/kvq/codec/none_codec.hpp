// kvq/codec/none_codec.hpp - Codec<NoQuant> (codec.hpp): the model dtype stored bit for bit, rows of
// D values of T, no parameters (docs/FORMAT.md 3.8, 4.4).
#pragma once

#include <cstdint>

#include "kvq/codec/chunk.hpp"
#include "kvq/codec/codec_fwd.hpp"
#include "kvq/core/platform.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/group_codec.hpp"

KVQ_NAMESPACE_BEGIN

template <>
struct Codec<NoQuant> {
  using Q = NoQuant;
  static constexpr bool quantized = false;
  // Decoded values are the stored T values: nothing to round.
  static constexpr bool bf16_pair_exact = false;

  // No parameters.
  template <Role R, int D, int P>
  KVQ_HD_CONSTEXPR static ParamRun param_run(int, int, int) {
    return ParamRun{0, 0};
  }

  template <Role R, int D, int P, class T>
  KVQ_HD static float decode_element(const uint8_t* codes, const uint8_t*, int t, int c) {
    return reinterpret_cast<const T*>(codes)[t * D + c].to_float();
  }

  template <Role R, int D, int P, class T>
  KVQ_HD static void decode_chunk(const uint8_t* codes, const uint8_t*, int t, int c0, float (&out)[kDecodeChunk]) {
    const T* row = reinterpret_cast<const T*>(codes) + t * D + c0;
    KVQ_UNROLL
    for (int e = 0; e < kDecodeChunk; ++e) out[e] = row[e].to_float();
  }

  // Copied in 16-byte chunks (rows are 16-byte aligned: D * 2 bytes, see append_plan.hpp).
  KVQ_EXEC_CHECK_DISABLE
  template <Role R, int D, int P, class T, class Row, class Sync>
  KVQ_HD static void encode_section(Row&& row, uint8_t* codes, uint8_t*, uint8_t*, int tid, int nthreads, Sync&&, uint32_t&,
                                    KeyClip) {
    constexpr int kChunk = 16 / sizeof(T);
    T* out = reinterpret_cast<T*>(codes);
    for (int i = tid * kChunk; i < P * D; i += nthreads * kChunk) {
      const T* src = row(i / D) + i % D;
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(src);
#else
      for (int j = 0; j < kChunk; ++j) out[i + j] = src[j];
#endif
    }
  }
};

KVQ_NAMESPACE_END

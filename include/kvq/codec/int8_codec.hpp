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

  // Three passes, cut the same way for one host thread and a device block: the absolute maximum
  // of each 8-channel chunk of each token into scratch (fp32, P x D/8); after `sync`, each token's
  // scale from its chunks' maxima (int8_scale of the token's absolute maximum: fmaxf is exact, so
  // the maxima's order does not matter); after `sync`, each chunk's 8 codes in one 8-byte store.
  KVQ_EXEC_CHECK_DISABLE
  template <Role R, int D, int P, class T, class Row, class Sync>
  KVQ_HD static void encode_section(Row&& row, uint8_t* codes, uint8_t* params, uint8_t* scratch, int tid, int nthreads,
                                    Sync&& sync, uint32_t& flags, KeyClip) {
    constexpr int kChunks = D / kDecodeChunk;  // chunks of a token
    float* chunk_max = reinterpret_cast<float*>(scratch);  // P * D / 2 bytes of the P * D
    float* scales = reinterpret_cast<float*>(params);
    for (int i = tid; i < P * kChunks; i += nthreads) {
      const T* x = row(i / kChunks) + (i % kChunks) * kDecodeChunk;
      float m = 0.0f;
      KVQ_UNROLL
      for (int e = 0; e < kDecodeChunk; ++e) m = fmaxf(m, fabsf(sanitize(x[e].to_float(), flags)));
      chunk_max[i] = m;
    }
    sync();
    for (int t = tid; t < P; t += nthreads) {
      float m = 0.0f;
      for (int j = 0; j < kChunks; ++j) m = fmaxf(m, chunk_max[t * kChunks + j]);
      scales[t] = int8_scale(m);
    }
    sync();
    for (int i = tid; i < P * kChunks; i += nthreads) {
      const int t = i / kChunks;
      const T* x = row(t) + (i % kChunks) * kDecodeChunk;
      const float scale = scales[t];
      uint32_t ignored = 0, w[2] = {0u, 0u};
      KVQ_UNROLL
      for (int e = 0; e < kDecodeChunk; ++e)
        w[e / 4] |= uint32_t(static_cast<uint8_t>(int8_encode(sanitize(x[e].to_float(), ignored), scale))) << (8 * (e % 4));
      uint8_t* out = codes + size_t(i) * kDecodeChunk;  // token t, channels (i % kChunks) * 8 ..
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<uint2*>(out) = make_uint2(w[0], w[1]);  // 8-byte aligned: records are 16-byte aligned, D % 8 == 0
#else
      for (int e = 0; e < kDecodeChunk; ++e) out[e] = uint8_t(w[e / 4] >> (8 * (e % 4)));
#endif
    }
  }
};

KVQ_NAMESPACE_END

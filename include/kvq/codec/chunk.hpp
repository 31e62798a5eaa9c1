// kvq/codec/chunk.hpp - the unit of a codec's chunk decode (codec.hpp): 8 consecutive channels of
// one token, one 16-byte store of the model dtype.
#pragma once

#include <cstdint>
#include <cstring>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

constexpr int kDecodeChunk = 8;  // channels per chunk; c0 is a multiple of it

// 8 consecutive 16-bit values from a 16-byte aligned address, in one load on the device.
KVQ_HD void load8_u16(const uint16_t* p, uint16_t (&out)[kDecodeChunk]) {
#if defined(__CUDA_ARCH__)
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const uint32_t x[4] = {w.x, w.y, w.z, w.w};
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) out[e] = uint16_t(x[e / 2] >> (16 * (e % 2)));
#else
  std::memcpy(out, p, sizeof(out));
#endif
}

KVQ_NAMESPACE_END

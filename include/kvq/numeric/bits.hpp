// kvq/numeric/bits.hpp - IEEE fp32 <-> fp16 / bf16 bit conversions, identical on host and device.
//
// The host reference and the kernels must write bit-identical cache bytes, so every rounding to
// a 16-bit format goes through these functions. On the device the hardware conversion is used
// (round to nearest even, like the software path; NaN canonicalised to the software path's;
// a GPU test compares the two on all 2^32 inputs, NaNs included).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvq/core/platform.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

KVQ_NAMESPACE_BEGIN

KVQ_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVQ_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Portable fp32 -> fp16 conversion, round to nearest even; overflow gives +-Inf, NaN stays NaN.
KVQ_HD uint16_t f32_to_f16_bits_soft(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536: rounds to Inf
  if (ax < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is a multiple of 2^-24. Scaling by 2^24 is
    // exact, and rintf rounds half to even (1024 becomes the smallest normal, which is correct).
    const float scaled = f32_from_bits(ax) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rintf(scaled)));
  }
  const uint32_t mant = ax & 0x7fffffu;
  const uint32_t exp = (ax >> 23) - 127u + 15u;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

KVQ_HD uint16_t f32_to_f16_bits(float f) {
#if defined(__CUDA_ARCH__)
  // The hardware's NaN is 0x7fff; kvq's NaN is the software one (sign | 0x7e00) on both sides.
  if (isnan(f)) return uint16_t((f32_bits(f) >> 16 & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
#else
  return f32_to_f16_bits_soft(f);
#endif
}

KVQ_HD float f16_bits_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp - 15u + 127u) << 23) | (mant << 13));
#endif
}

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
KVQ_HD uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

KVQ_HD float bf16_bits_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

KVQ_NAMESPACE_END

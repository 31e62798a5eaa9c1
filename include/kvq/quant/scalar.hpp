// kvq/quant/scalar.hpp - the scalar quantization math, shared by the host reference and kernels.
//
// These functions ARE the format (docs/FORMAT.md section 3): every cache byte kvq writes, on the
// host or the device, comes out of them, so the two sides are bit-identical by construction.
#pragma once

#include <cmath>
#include <cstdint>

#include "kvq/core/status.hpp"
#include "kvq/numeric/bits.hpp"

// The host side computes the same bytes as the device only under IEEE float semantics.
#if defined(__FAST_MATH__) && !defined(__CUDA_ARCH__)
#error "kvq's host code needs IEEE float semantics: compile it without -ffast-math"
#endif

KVQ_NAMESPACE_BEGIN

constexpr float kF16Max = 65504.0f;

// IEEE round-to-nearest division, whatever -prec-div / -use_fast_math the consumer compiles with.
KVQ_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Input sanitation (DESIGN section 4): NaN -> 0, +-Inf and finite values beyond the fp16 range
// -> +-65504. What happened is ORed into `flags` (kFlagNonFinite / kFlagSaturated).
KVQ_HD float sanitize(float x, uint32_t& flags) {
  const uint32_t ax = f32_bits(x) & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    flags |= kFlagNonFinite;
    return 0.0f;
  }
  if (ax > 0x477fe000u) {  // |x| > 65504
    flags |= (ax == 0x7f800000u) ? kFlagNonFinite : kFlagSaturated;
    return (f32_bits(x) >> 31) ? -kF16Max : kF16Max;
  }
  return x;
}

// --- asymmetric INT-b (b = 2, 4) -------------------------------------------------------------

// Stored per group: fp16 scale and fp16 zero point (raw bits, as they sit in the record).
struct AsymParams {
  uint16_t scale;
  uint16_t zero;
};

// lo/hi: the group's min and max of sanitised values (so |lo|, |hi| <= 65504 and no overflow).
// A constant group stores scale 0.
template <int Bits>
KVQ_HD AsymParams asym_params(float lo, float hi) {
  if ((f32_bits(lo) & 0x7fffffffu) == 0u) lo = 0.0f;  // -0 and +0 store the same zero point
  AsymParams p;
  p.zero = f32_to_f16_bits(lo);
  p.scale = (hi == lo) ? uint16_t(0) : f32_to_f16_bits(div_rn(hi - lo, float((1 << Bits) - 1)));
  return p;
}

// code = clamp(rint((x - zero) / scale), 0, 2^b - 1), computed from the STORED scale and zero.
// A zero scale (constant group, or a range so small its scale underflows fp16) gives code 0.
template <int Bits>
KVQ_HD uint32_t asym_encode(float x, float zero, float scale) {
  if (scale == 0.0f) return 0u;
  float q = rintf(div_rn(x - zero, scale));
  q = fminf(fmaxf(q, 0.0f), float((1 << Bits) - 1));
  return static_cast<uint32_t>(q);
}

// x' = zero + code * scale, as one fused multiply-add (identical on host and device).
KVQ_HD float asym_decode(uint32_t code, float zero, float scale) {
  return fmaf(static_cast<float>(code), scale, zero);
}

// --- symmetric INT8 --------------------------------------------------------------------------

// scale = absmax / 127 in fp32; absmax 0 stores scale 0.
KVQ_HD float int8_scale(float absmax) { return absmax == 0.0f ? 0.0f : div_rn(absmax, 127.0f); }

KVQ_HD int8_t int8_encode(float x, float scale) {
  if (scale == 0.0f) return 0;
  float q = rintf(div_rn(x, scale));
  q = fminf(fmaxf(q, -127.0f), 127.0f);
  return static_cast<int8_t>(q);
}

KVQ_HD float int8_decode(int8_t code, float scale) { return static_cast<float>(code) * scale; }

KVQ_NAMESPACE_END

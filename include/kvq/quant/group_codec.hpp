// kvq/quant/group_codec.hpp - encode one quantization group: parameters and codes.
//
// A group is read through get(i) -> float (raw model values, i in [0, n)) and its codes are
// handed to put(i, code). The host reference loops over groups; kernels give each group to a
// thread. Both call these functions, so both produce the same bytes.
#pragma once

#include <cstdint>

#include "kvq/quant/scalar.hpp"

KVQ_NAMESPACE_BEGIN

KVQ_EXEC_CHECK_DISABLE
// Loops are unrolled by 8 on the device so a thread has 8 independent loads of its group in flight.
template <int Bits, class Get, class Put>
KVQ_HD AsymParams encode_asym_group(int n, Get&& get, Put&& put, uint32_t& flags) {
  float lo = sanitize(get(0), flags);
  float hi = lo;
  KVQ_UNROLL8
  for (int i = 1; i < n; ++i) {
    const float x = sanitize(get(i), flags);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  }
  const AsymParams p = asym_params<Bits>(lo, hi);
  const float zero = f16_bits_to_f32(p.zero);
  const float scale = f16_bits_to_f32(p.scale);
  uint32_t ignored = 0;
  KVQ_UNROLL8
  for (int i = 0; i < n; ++i) put(i, asym_encode<Bits>(sanitize(get(i), ignored), zero, scale));
  return p;
}

// Returns the fp32 scale stored for the group.
KVQ_EXEC_CHECK_DISABLE
template <class Get, class Put>
KVQ_HD float encode_int8_group(int n, Get&& get, Put&& put, uint32_t& flags) {
  float absmax = 0.0f;
  KVQ_UNROLL8
  for (int i = 0; i < n; ++i) absmax = fmaxf(absmax, fabsf(sanitize(get(i), flags)));
  const float scale = int8_scale(absmax);
  uint32_t ignored = 0;
  KVQ_UNROLL8
  for (int i = 0; i < n; ++i) put(i, int8_encode(sanitize(get(i), ignored), scale));
  return scale;
}

KVQ_NAMESPACE_END

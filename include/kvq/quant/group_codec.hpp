// kvq/quant/group_codec.hpp - encode one quantization group: parameters and codes.
//
// A group is read through get(i) -> float (raw model values, i in [0, n)) and its codes are
// handed to put(i, code). The host reference loops over groups; kernels give each group to a
// thread. Both call these functions, so both produce the same bytes.
#pragma once

#include <cstdint>

#include "kvq/quant/scalar.hpp"

KVQ_NAMESPACE_BEGIN

// Reads a group in batches of kBatch: all loads of a batch are issued before any code is
// stored, so a device thread has kBatch loads in flight (the caller's put() may write memory the
// compiler cannot prove distinct from what get() reads).
constexpr int kGroupBatch = 8;

KVQ_EXEC_CHECK_DISABLE
template <class Get, class Body>
KVQ_HD void for_each_batched(int n, Get&& get, Body&& body) {
  for (int i0 = 0; i0 < n; i0 += kGroupBatch) {
    float x[kGroupBatch];
    KVQ_UNROLL
    for (int j = 0; j < kGroupBatch; ++j) x[j] = i0 + j < n ? get(i0 + j) : 0.0f;
    KVQ_UNROLL
    for (int j = 0; j < kGroupBatch; ++j)
      if (i0 + j < n) body(i0 + j, x[j]);
  }
}

KVQ_EXEC_CHECK_DISABLE
template <int Bits, class Get, class Put>
KVQ_HD AsymParams encode_asym_group(int n, Get&& get, Put&& put, uint32_t& flags) {
  float lo = kF16Max, hi = -kF16Max;
  for_each_batched(n, get, [&](int, float v) {
    const float x = sanitize(v, flags);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  });
  const AsymParams p = asym_params<Bits>(lo, hi);
  const float zero = f16_bits_to_f32(p.zero);
  const float scale = f16_bits_to_f32(p.scale);
  uint32_t ignored = 0;
  for_each_batched(n, get, [&](int i, float v) { put(i, asym_encode<Bits>(sanitize(v, ignored), zero, scale)); });
  return p;
}

// Returns the fp32 scale stored for the group.
KVQ_EXEC_CHECK_DISABLE
template <class Get, class Put>
KVQ_HD float encode_int8_group(int n, Get&& get, Put&& put, uint32_t& flags) {
  float absmax = 0.0f;
  for_each_batched(n, get, [&](int, float v) { absmax = fmaxf(absmax, fabsf(sanitize(v, flags))); });
  const float scale = int8_scale(absmax);
  uint32_t ignored = 0;
  for_each_batched(n, get, [&](int i, float v) { put(i, int8_encode(sanitize(v, ignored), scale)); });
  return scale;
}

KVQ_NAMESPACE_END

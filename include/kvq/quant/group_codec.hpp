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

// How an asymmetric group's range is chosen (docs/FORMAT.md section 3.3). The decoder does not
// care: the record holds the same fields either way.
//   kMinMax  [min, max] of the group: every element within half a step of its reconstruction.
//   kMse     each end moved inward to the candidate that minimises the group's squared
//            reconstruction error (elements beyond it saturate): lo over the candidates
//            fma(span, div_rn(i, 40), lo0), i = 0..20, with hi fixed, then hi over
//            fma(-span, div_rn(i, 40), hi0) with lo fixed; two rounds; the first of equal errors wins. Used for keys, where one large
//            token (an attention sink) otherwise sets the step of its whole channel group.
enum class KeyClip : int32_t { kMinMax = 0, kMse = 1 };

// Squared reconstruction error of a group encoded with range [lo, hi] (fp32, one fused
// multiply-add per element, in element order: the same value on host and device).
KVQ_EXEC_CHECK_DISABLE
template <int Bits, class Get>
KVQ_HD float asym_group_error(int n, Get&& get, float lo, float hi) {
  const AsymParams p = asym_params<Bits>(lo, hi);
  const float zero = f16_bits_to_f32(p.zero), scale = f16_bits_to_f32(p.scale);
  float err = 0.0f;
  uint32_t ignored = 0;
  for_each_batched(n, get, [&](int, float v) {
    const float x = sanitize(v, ignored);
    const float e = x - asym_decode(asym_encode<Bits>(x, zero, scale), zero, scale);
    err = fmaf(e, e, err);
  });
  return err;
}

// The kMse search (see KeyClip) over a group whose min / max are lo / hi; narrows them in place.
KVQ_EXEC_CHECK_DISABLE
template <int Bits, class Get>
KVQ_HD void mse_clip_range(int n, Get&& get, float& lo, float& hi) {
  const float lo0 = lo, hi0 = hi, span = hi - lo;
  if (!(span > 0.0f)) return;
  for (int round = 0; round < 2; ++round)
    for (int end = 0; end < 2; ++end) {
      float best = INFINITY, pick = end == 0 ? lo : hi;
      for (int i = 0; i <= 20; ++i) {
        const float step = div_rn(float(i), 40.0f);
        const float cand = end == 0 ? fmaf(span, step, lo0) : fmaf(-span, step, hi0);
        const float a = end == 0 ? cand : lo, b = end == 0 ? hi : cand;
        if (!(b > a)) continue;
        const float err = asym_group_error<Bits>(n, get, a, b);
        if (err < best) {
          best = err;
          pick = cand;
        }
      }
      if (end == 0)
        lo = pick;
      else
        hi = pick;
    }
}

KVQ_EXEC_CHECK_DISABLE
template <int Bits, class Get, class Put>
KVQ_HD AsymParams encode_asym_group(int n, Get&& get, Put&& put, uint32_t& flags, KeyClip clip = KeyClip::kMinMax) {
  float lo = kF16Max, hi = -kF16Max;
  for_each_batched(n, get, [&](int, float v) {
    const float x = sanitize(v, flags);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  });
  if (clip == KeyClip::kMse) mse_clip_range<Bits>(n, get, lo, hi);
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

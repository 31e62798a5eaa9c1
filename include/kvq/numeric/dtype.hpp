// kvq/numeric/dtype.hpp - the model dtypes kvq stores and reads: kvq::bf16 and kvq::fp16.
//
// Both are 2-byte storage types, layout-compatible with __nv_bfloat16 / __half (kernels
// reinterpret the pointers), usable from host code that never includes a CUDA header.
#pragma once

#include <cstdint>

#include "kvq/numeric/bits.hpp"

KVQ_NAMESPACE_BEGIN

struct bf16 {
  uint16_t bits;
  static constexpr const char* name() { return "bf16"; }
  KVQ_HD static bf16 from_float(float f) { return bf16{f32_to_bf16_bits(f)}; }
  KVQ_HD static bf16 from_float_saturate(float f) { return from_float(f); }  // dequantized values are within bf16 range
  KVQ_HD float to_float() const { return bf16_bits_to_f32(bits); }
};

struct fp16 {
  uint16_t bits;
  static constexpr const char* name() { return "fp16"; }
  KVQ_HD static fp16 from_float(float f) { return fp16{f32_to_f16_bits(f)}; }
  // For dequantized values: a group spanning the whole fp16 range can reconstruct its top code
  // just past 65504; finite values beyond the range saturate instead of becoming Inf.
  KVQ_HD static fp16 from_float_saturate(float f) {
    const uint32_t x = f32_bits(f), ax = x & 0x7fffffffu;
    return ax > 0x477fe000u && ax < 0x7f800000u ? fp16{uint16_t((x >> 16 & 0x8000u) | 0x7bffu)} : from_float(f);
  }
  KVQ_HD float to_float() const { return f16_bits_to_f32(bits); }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "model dtypes are 2-byte storage types");

template <class T>
struct is_model_dtype {
  static constexpr bool value = false;
};
template <>
struct is_model_dtype<bf16> {
  static constexpr bool value = true;
};
template <>
struct is_model_dtype<fp16> {
  static constexpr bool value = true;
};

// Runtime tag for the dispatcher.
enum class DType : int { kBF16 = 0, kFP16 = 1 };
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<bf16>() { return DType::kBF16; }
template <>
constexpr DType dtype_of<fp16>() { return DType::kFP16; }

KVQ_NAMESPACE_END

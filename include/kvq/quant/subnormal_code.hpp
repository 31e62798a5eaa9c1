// kvq/quant/subnormal_code.hpp - packed INT2/INT4 codes as fp16 subnormals: a code alone at bit q of
// a half-word (q + Bits <= 10, inside the mantissa, exponent field 0) is the fp16 subnormal
// code x 2^(q - 24). Converted to fp32 (exact) and multiplied by scale x 2^(24 - q) (exact, a power
// of two) in one fma with the zero, it gives fmaf(code, scale, zero), i.e. asym_decode, bit for
// bit. One AND takes the codes at bit p of both half-words of a packed word (packing.hpp puts the
// elements 2i and 2i + 1 of a pair of positions at the same bit of the two halves); codes past bit
// 10 - Bits are moved down first (by 8, or for INT2 values by p % 8: subnormal_code_bit_two).
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/numeric/bits.hpp"
#include "kvq/quant/packing.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Bit of a half-word that the code at bit p is read at (p itself, or p - 8 after a shift by 8).
template <int Bits>
KVQ_HD_CONSTEXPR int subnormal_code_bit(int p) {
  static_assert(Bits == 2 || Bits == 4, "INT2 or INT4 codes");
  return p + Bits > 10 ? p - 8 : p;
}

// The same with the fewest distinct bits: INT2 codes at bit 0 or 8 (p & 8, after a shift by p % 8),
// so that a scale needs two factors 2^(24 - q) instead of five; INT4 as subnormal_code_bit (0 or 4).
template <int Bits>
KVQ_HD_CONSTEXPR int subnormal_code_bit_two(int p) {
  return Bits == 2 ? (p & 8) : subnormal_code_bit<Bits>(p);
}

// The codes at bit p of each half-word of w, each alone in its half at bit q (q <= p, q + Bits <=
// 10): two fp16 subnormals.
template <int Bits>
KVQ_HD uint32_t subnormal_code_pair(uint32_t w, int p, int q) {
  return (w >> (p - q)) & packed_pair_mask(Bits, q);
}
template <int Bits>
KVQ_HD uint32_t subnormal_code_pair(uint32_t w, int p) {
  return subnormal_code_pair<Bits>(w, p, subnormal_code_bit<Bits>(p));
}

// 2^(24 - q): the factor that turns the scale into that of a subnormal code at bit q.
KVQ_HD_CONSTEXPR float subnormal_unit(int q) { return static_cast<float>(1u << (24 - q)); }
template <int Bits>
KVQ_HD_CONSTEXPR float subnormal_code_unit(int p) {
  return subnormal_unit(subnormal_code_bit<Bits>(p));
}

// fp32 values of the low and high half of a pair (exact for subnormals).
KVQ_HD float half_low_f32(uint32_t pair) { return f16_bits_to_f32(static_cast<uint16_t>(pair)); }
KVQ_HD float half_high_f32(uint32_t pair) { return f16_bits_to_f32(static_cast<uint16_t>(pair >> 16)); }

}  // namespace detail
KVQ_NAMESPACE_END

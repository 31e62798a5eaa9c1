// kvq/quant/offset_code.hpp - packed INT2/INT4 codes as tensor-core operands in two instructions:
// a rotation and one LOP3 turn the code at bit p of each half-word of a packed word into the
// exact fp16 pair (offset + code, offset + code').
//
// The code is moved to mantissa bit t of an fp16 whose exponent makes the mantissa's bit t worth
// 1: the value is 2^(10 - t) + code, exactly. t is 6 or 8 for INT2 (offsets 16 and 4) and 6 for
// INT4 (offset 16): high enough that the offset is small next to the code (so removing it later,
// from fp32 sums, loses nothing measurable), low enough that the code fits the 10 mantissa bits.
// A rotation of the whole 32-bit word moves both half-words' codes at once; the mask keeps only
// bits that came from the same half-word. Shared by the host tests and the decode kernel.
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/quant/packing.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Mantissa bit that the code at bit p of a half-word goes to.
template <int Bits>
KVQ_HD_CONSTEXPR int offset_code_target(int p) {
  static_assert(Bits == 2 || Bits == 4, "INT2 or INT4 codes");
  return Bits == 2 ? 6 + 2 * ((p / 2) & 1) : 6;
}

// The offset the fp16 value carries: value = offset + code.
template <int Bits>
KVQ_HD_CONSTEXPR int offset_code_offset(int p) {
  return 1 << (10 - offset_code_target<Bits>(p));
}

// Left rotation (mod 32) that brings bit p to its target. INT2 positions p and p + 2 (p a multiple
// of 4) share one rotation, so a word's 8 INT2 pairs take 4 rotations.
template <int Bits>
KVQ_HD_CONSTEXPR int offset_code_rotation(int p) {
  return (offset_code_target<Bits>(p) - p) & 31;
}

KVQ_HD uint32_t rotate_left(uint32_t x, int r) {
#ifdef __CUDA_ARCH__
  return __funnelshift_l(x, x, uint32_t(r));
#else
  return r == 0 ? x : (x << r) | (x >> (32 - r));
#endif
}

// The code at mantissa bit t of `rotated` (a word already rotated), as (offset + code) fp16 pair.
template <int Bits>
KVQ_HD uint32_t offset_code_at(uint32_t rotated, int t) {
  const uint32_t mask = packed_pair_mask(Bits, t);
  const uint32_t exponent = (uint32_t(25 - t) << 10) * 0x00010001u;  // 2^(10 - t) in each half
#ifdef __CUDA_ARCH__
  uint32_t d;  // one LOP3 (the compiler splits (x & imm) | imm into two)
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(rotated), "r"(mask), "r"(exponent));
  return d;
#else
  return (rotated & mask) | exponent;
#endif
}

// The pair of codes at bit p of each half-word of x, as fp16 (offset + code) pairs.
template <int Bits>
KVQ_HD uint32_t offset_code_pair(uint32_t x, int p) {
  return offset_code_at<Bits>(rotate_left(x, offset_code_rotation<Bits>(p)), offset_code_target<Bits>(p));
}

// fp16 bit pattern of -offset (a power of two) in both halves.
template <int Bits>
KVQ_HD_CONSTEXPR uint32_t offset_code_neg_offset_pair(int p) {
  return ((0x8000u | (uint32_t(25 - offset_code_target<Bits>(p)) << 10)) * 0x00010001u);
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/quant/offset_code.hpp - packed INT2/INT4 codes as tensor-core operands in two instructions:
// a shift and one LOP3 turn the code at bit p of each half-word of a packed word into the
// exact fp16 pair (offset + code, offset + code').
//
// The code is moved to mantissa bit t of an fp16 whose exponent makes the mantissa's bit t worth
// 1: the value is 2^(10 - t) + code, exactly. t is 2, 4, 6 or 8 (offsets 256, 64, 16, 4): high
// enough that the offset is small next to the code (removing it later from fp32 sums of exact
// products costs at most ~8 of fp32's 24 bits, ~6 for INT2), low enough that the code fits the 10
// mantissa bits. A shift of the whole 32-bit word moves both half-words' codes at once (a code
// moves inside its half-word); the mask keeps only bits that came from the same half-word. Each
// target is chosen so that a word takes two shifts, one of them left by 4 (ptxas can put it on the
// FMA pipe as IMAD.SHL, off the busier ALU pipe):
//   INT2 positions 4, 6, 8 need none, 0 and 2 share one (left by 4), 10, 12 and 14 share one
//   (right by 6);
//   INT4 position 4 needs none, 0 takes one (left by 4), 8 and 12 share one (right by 6: targets
//   2 and 6).
// Shared by the host tests and the decode kernel (its keys).
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/numeric/and_or.hpp"
#include "kvq/quant/packing.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Mantissa bit that the code at bit p of a half-word goes to.
template <int Bits>
KVQ_HD_CONSTEXPR int offset_code_target(int p) {
  static_assert(Bits == 2 || Bits == 4, "INT2 or INT4 codes");
  if (Bits == 4) return p <= 4 ? 4 : p - 6;
  return p < 4 ? p + 4 : p <= 8 ? p : p - 6;
}

// The offset the fp16 value carries: value = offset + code.
template <int Bits>
KVQ_HD_CONSTEXPR int offset_code_offset(int p) {
  return 1 << (10 - offset_code_target<Bits>(p));
}

// Shift that brings bit p to its target (left when positive): a word's 8 INT2 pairs take 2 shifts
// (and 3 positions none), its 4 INT4 pairs 2 (and 1 position none).
template <int Bits>
KVQ_HD_CONSTEXPR int offset_code_shift(int p) {
  return offset_code_target<Bits>(p) - p;
}

// The code at mantissa bit t of `moved` (a word already shifted), as (offset + code) fp16 pair.
template <int Bits>
KVQ_HD uint32_t offset_code_at(uint32_t moved, int t) {
  const uint32_t mask = packed_pair_mask(Bits, t);
  const uint32_t exponent = (uint32_t(25 - t) << 10) * 0x00010001u;  // 2^(10 - t) in each half
  return and_or(moved, mask, exponent);  // one LOP3
}

// The pair of codes at bit p of each half-word of x, as fp16 (offset + code) pairs.
template <int Bits>
KVQ_HD uint32_t offset_code_pair(uint32_t x, int p) {
  const int s = offset_code_shift<Bits>(p);
  return offset_code_at<Bits>(s >= 0 ? x << s : x >> -s, offset_code_target<Bits>(p));
}

// fp16 bit pattern of -offset (a power of two) in both halves.
template <int Bits>
KVQ_HD_CONSTEXPR uint32_t offset_code_neg_offset_pair(int p) {
  return ((0x8000u | (uint32_t(25 - offset_code_target<Bits>(p)) << 10)) * 0x00010001u);
}

}  // namespace detail
KVQ_NAMESPACE_END

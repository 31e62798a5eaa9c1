// kvq/quant/int8_subnormal.hpp - INT8 codes as fp16 subnormals, for the decode kernel's key mma.
//
// An INT8 code x (two's complement, -127..127) plus 128 is the byte x ^ 0x80 (0..255). Alone in the
// low byte of a half-word (exponent field 0) that byte is the fp16 subnormal (x + 128) 2^-24,
// exactly. So one XOR a word of four codes (int8_subnormal_word) and one byte permute a pair
// (int8_subnormal_pair) give a tensor-core operand whose products with any fp16 query are exact in
// the mma's fp32 sums; the offset 128 comes back out through one mma of the constant pair
// kInt8SubnormalNegOffsetPair (-128 2^-24 in both halves) with the same query, and 2^24
// (kInt8SubnormalUnit) goes into the logits' scale factor:
//   x . q = 2^24 ((x + 128) 2^-24 . q + (-128 2^-24) . q).
// The host side computes the same bits, so the host test checks what the kernel runs.
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Four INT8 codes of a word, each + 128 (unsigned bytes).
KVQ_HD uint32_t int8_subnormal_word(uint32_t w) { return w ^ 0x80808080u; }

// Bytes e0 (to the low half) and e1 (to the high half) of a word from int8_subnormal_word, each
// alone in its half-word: the fp16 pair ((x0 + 128) 2^-24, (x1 + 128) 2^-24).
KVQ_HD uint32_t int8_subnormal_pair(uint32_t u, int e0, int e1) {
#ifdef __CUDA_ARCH__
  // Selector nibbles 4: byte 0 of the second operand, zero.
  return __byte_perm(u, 0u, uint32_t(e0) | 0x40u | (uint32_t(e1) << 8) | 0x4000u);
#else
  return ((u >> (8 * e0)) & 0xFFu) | (((u >> (8 * e1)) & 0xFFu) << 16);
#endif
}

// -128 2^-24 in both halves of an fp16 pair (sign bit, subnormal mantissa 0x80): the A operand of
// the mma that removes the offset.
constexpr uint32_t kInt8SubnormalNegOffsetPair = 0x80808080u;

// 2^24: the unit of the subnormal codes, restored in the logits' scale factor.
constexpr float kInt8SubnormalUnit = 16777216.0f;

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/numeric/and_or.hpp - (x & mask) | bits in one instruction.
//
// The kernels build fp16 / bf16 pairs from packed codes by masking the codes and OR-ing in an
// exponent ("magic") pattern. Written in C++, ptxas 13.0 emits that as two LOP3s when both
// constants are immediates; one LOP3 (truth table 0xEA = (a & b) | c) does it. The host side is
// the plain expression, so host tests and the reference run the same function.
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

KVQ_HD uint32_t and_or(uint32_t x, uint32_t mask, uint32_t bits) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(x), "r"(mask), "r"(bits));
  return d;
#else
  return (x & mask) | bits;
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

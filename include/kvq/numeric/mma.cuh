// kvq/numeric/mma.cuh - the few PTX instructions the tensor-core attention kernels use (sm_80+).
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, i = lane % 4; each register holds a pair of
// 16-bit values, the lower-numbered column / k index in the low half):
//   A (16 x 16, row-major): a[0] = (row g,   k 2i..2i+1)   a[1] = (row g+8, k 2i..2i+1)
//                           a[2] = (row g,   k 2i+8..2i+9) a[3] = (row g+8, k 2i+8..2i+9)
//   B (16 x 8,  col-major): b[0] = (k 2i..2i+1, col g)     b[1] = (k 2i+8..2i+9, col g)
//   C (16 x 8,  fp32):      c[0], c[1] = (row g, cols 2i, 2i+1)   c[2], c[3] = (row g+8, same cols)
// The reduction index k may be permuted freely as long as A and B agree; the kernels use this
// to let every thread read whole packed words.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kvq/core/platform.hpp"
#include "kvq/numeric/dtype.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Per model dtype: the 16-bit pattern whose low mantissa bits can be ORed with a small integer
// code to give (kMagic + code) exactly (fp16: 1024 + code for code < 1024; bf16: 128 + code for
// code < 128), and the packed constants the dequantizers need.
template <class T>
struct Half2Consts;
template <>
struct Half2Consts<fp16> {
  static constexpr uint32_t magic = 0x64006400u;      // 1024, 1024
  static constexpr uint32_t neg_magic = 0xE400E400u;  // -1024, -1024
  static constexpr uint32_t one = 0x3C003C00u;
  static constexpr uint32_t neg_one = 0xBC00BC00u;
  static constexpr uint32_t neg_zero = 0x80008000u;
};
template <>
struct Half2Consts<bf16> {
  static constexpr uint32_t magic = 0x43004300u;      // 128, 128
  static constexpr uint32_t neg_magic = 0xC300C300u;  // -128, -128
  static constexpr uint32_t one = 0x3F803F80u;
  static constexpr uint32_t neg_one = 0xBF80BF80u;
  static constexpr uint32_t neg_zero = 0x80008000u;
};

// d = a * b + c on packed pairs of T, one rounding.
template <class T>
KVQ_DEVICE uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  if constexpr (std::is_same_v<T, fp16>)
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

template <class T>
KVQ_DEVICE uint32_t hmul2(uint32_t a, uint32_t b) {
  return hfma2<T>(a, b, Half2Consts<T>::neg_zero);
}

// Packs (lo, hi) into a pair of T, round to nearest even.
template <class T>
KVQ_DEVICE uint32_t pack2(float lo, float hi) {
  uint32_t d;
  if constexpr (std::is_same_v<T, fp16>)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// Sum of the two values of a packed pair of T (exact in fp32): the probabilities as the MMA sees
// them, so that a softmax's denominator matches its rounded numerator weights.
template <class T>
KVQ_DEVICE float pair_sum(uint32_t x) {
  if constexpr (std::is_same_v<T, fp16>) {
    const __half2 h = *reinterpret_cast<const __half2*>(&x);
    return __low2float(h) + __high2float(h);
  } else {
    return __uint_as_float(x << 16) + __uint_as_float(x & 0xFFFF0000u);
  }
}

KVQ_DEVICE float f16_to_f32(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// Packs two fp16 bit patterns (stored parameters) as a pair of T.
template <class T>
KVQ_DEVICE uint32_t params_pair(uint16_t lo, uint16_t hi) {
  if constexpr (std::is_same_v<T, fp16>)
    return uint32_t(lo) | (uint32_t(hi) << 16);
  else
    return pack2<T>(f16_to_f32(lo), f16_to_f32(hi));
}

// c += a * b, fp32 accumulators.
template <class T>
KVQ_DEVICE void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, fp16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp16(a * b - hi) per half, for hi = fp16(a * b) (fp16 pairs): the rounding residual of an fp16
// product, so that hi + lo carries a * b to ~22 bits (the fp32 product of two fp16 values is exact).
KVQ_DEVICE uint32_t fp16_pair_product_residual(uint32_t a, uint32_t b, uint32_t hi) {
  auto lo_half = [](uint32_t x) { return f16_to_f32(uint16_t(x & 0xFFFFu)); };
  auto hi_half = [](uint32_t x) { return f16_to_f32(uint16_t(x >> 16)); };
  return pack2<fp16>(fmaf(lo_half(a), lo_half(b), -lo_half(hi)), fmaf(hi_half(a), hi_half(b), -hi_half(hi)));
}

// 2^x by the special-function unit (ex2.approx.ftz: relative error ~2^-22, results below 2^-126
// flushed to 0, 2^-inf = 0), without exp2f's range fix-ups.
KVQ_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Transposes an 8 x 8 matrix of 16-bit values held as (row g, cols 2i..2i+1) per lane.
KVQ_DEVICE uint32_t movmatrix_trans(uint32_t x) {
  uint32_t d;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(x));
  return d;
}

// Loads four 8 x 8 matrices of 16-bit values from shared memory: lanes 8j .. 8j+7 give the row
// addresses (16 bytes each) of matrix j, and register j of every lane receives matrix j in the
// (row g, cols 2i..2i+1) layout above; _trans delivers each matrix transposed.
KVQ_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}
KVQ_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
}

// 16-byte asynchronous global -> shared copy (L2 only) and its group fences. The destination is a
// shared-memory address (the 32-bit .shared window, __cvta_generic_to_shared) or a pointer.
KVQ_DEVICE void cp_async16(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr), "l"(gmem) : "memory");
}
KVQ_DEVICE void cp_async16(void* smem, const void* gmem) {
  cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), gmem);
}
KVQ_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
KVQ_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/numeric/wgmma.cuh - the Hopper warpgroup MMA (wgmma.mma_async, sm_90a) the prefill kernel's
// sm_90 path uses: shared-memory matrix descriptors, the fence / commit / wait protocol, and the
// two instruction forms it needs (both operands from shared memory; A from registers).
//
// Shared-memory operand layout (the only one these descriptors describe): "128-byte swizzle"
// panels. A matrix of R rows x C 16-bit elements (C a multiple of 64) is stored as C / 64 panels
// of R rows x 128 bytes; 16-byte chunk c (0..7) of row r of a panel sits at chunk c ^ (r % 8) of
// that row, and every panel starts on a 1024-byte boundary (the hardware applies the XOR to
// address bits 4-6 from bits 7-9, so the two agree only on aligned panels). `panel_chunk` gives
// the 16-byte chunk index of (row, chunk) in such a matrix.
//   K-major operand (the reduction index runs along the row: Q and K of S = Q K^T): a k16 step is
//     32 bytes of one panel; descriptor start = panel + 32 * (k % 4) bytes, SBO = 1024 (the next 8
//     rows), LBO unused.
//   MN-major operand (V of O = P V: the reduction index, tokens, runs down the rows): a k16 step
//     is 16 rows (2048 bytes), N spans panels; start = 2048 * step, LBO = the panel size (the next
//     64 columns), SBO = 1024 (the next 8 rows); the instruction's transpose-B flag is set.
// Accumulator layout of m64nNk16 (fp32, per warp w of the warpgroup, g = lane / 4, i = lane % 4):
//   d[4j + 0..1] = (row 16w + g, cols 8j + 2i, +1), d[4j + 2..3] = (row 16w + g + 8, same cols),
//   i.e. the mma.m16n8k16 C layout of numeric/mma.cuh repeated over N / 8 column blocks.
// A from registers (m64k16): per warp the mma.m16n8k16 A layout of its 16 rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kvq/core/platform.hpp"
#include "kvq/numeric/dtype.hpp"

// wgmma exists only in the architecture-specific sm_90a target; other targets compile the
// wrappers to nothing and the host never selects a kernel that uses them (wgmma_available).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVQ_WGMMA_DEVICE 1
#else
#define KVQ_WGMMA_DEVICE 0
#endif

KVQ_NAMESPACE_BEGIN
namespace detail {

// The host compiler cannot see which device targets a translation unit was compiled for (nvcc's
// host pass has no __CUDA_ARCH_FEAT_SM90_ALL, and __CUDA_ARCH_LIST__ spells sm_90 and sm_90a
// alike), so the wgmma kernels are always compiled, and which code the CUDA runtime loaded for the
// device is asked at run time: this kernel, never launched, holds kWgmmaProbeWords words of static
// shared memory in its sm_90a code and none in any other (sm_80, sm_90, compute_90 PTX), and
// cudaFuncGetAttributes reports the size of the code the device runs. Tag: a type of the
// caller's translation unit (the configuration whose kernels it compiles; of external linkage),
// so that the probe lives in the same module, hence the same loaded code, as the kernels it
// speaks for.
constexpr int kWgmmaProbeWords = 8;
template <class Tag>
__global__ void KVQ_HIDDEN wgmma_probe_kernel(uint32_t* out) {
#if KVQ_WGMMA_DEVICE
  __shared__ uint32_t marker[kWgmmaProbeWords];
  volatile uint32_t* m = marker;  // volatile: the marker is kept in the code
  m[threadIdx.x % kWgmmaProbeWords] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = m[(threadIdx.x + 1) % kWgmmaProbeWords];
#else
  (void)out;
#endif
}

// Whether device `dev` has compute capability 9.0 and the code the runtime loaded on the current
// device for Tag's translation unit is sm_90a code: then the wgmma kernels compiled beside the
// probe are real (a build for sm_90 only, or for sm_80 plus compute_90 PTX, has them as stubs).
// No launch, no synchronisation. An error of the attribute query (no code for this device) is not
// left behind for cudaGetLastError unless an earlier one was already pending.
template <class Tag>
bool wgmma_available(int dev) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess || major != 9 || minor != 0)
    return false;
  const cudaError_t pending = cudaPeekAtLastError();
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, wgmma_probe_kernel<Tag>) != cudaSuccess) {
    if (pending == cudaSuccess) (void)cudaGetLastError();
    return false;
  }
  return attr.sharedSizeBytes >= sizeof(uint32_t) * kWgmmaProbeWords;
}

// 16-byte chunk index of (row, chunk) in a swizzled panel matrix of `rows` rows (see above).
KVQ_HD_CONSTEXPR int panel_chunk(int rows, int row, int chunk) {
  return (chunk >> 3) * rows * 8 + row * 8 + ((chunk & 7) ^ (row & 7));
}

// Matrix descriptor of a 128-byte-swizzled operand at shared address `addr` (bytes).
KVQ_DEVICE uint64_t wgmma_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}

// Descriptor of k-step kk (16 elements along the rows) of a K-major panel matrix of `rows` rows
// at shared address `addr`, and of k-step kt (16 rows) of an MN-major one (see above).
KVQ_DEVICE uint64_t kmajor_desc(uint32_t addr, int rows, int kk) {
  return wgmma_desc(addr + uint32_t((kk / 4) * rows * 128 + (kk % 4) * 32), 16, 1024);
}
KVQ_DEVICE uint64_t mnmajor_desc(uint32_t addr, int rows, int kt) {
  return wgmma_desc(addr + uint32_t(kt * 2048), uint32_t(rows * 128), 1024);
}

KVQ_DEVICE void wgmma_fence() {
#if KVQ_WGMMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
KVQ_DEVICE void wgmma_commit() {
#if KVQ_WGMMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
KVQ_DEVICE void wgmma_wait() {
#if KVQ_WGMMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to the async proxy
// that wgmma reads operands through; each writing thread runs it before the barrier.
KVQ_DEVICE void fence_proxy_async_shared() {
#if KVQ_WGMMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accesses of accumulator registers across a wgmma's issue / wait.
template <int R>
KVQ_DEVICE void wgmma_pin(float (&d)[R]) {
  KVQ_UNROLL
  for (int r = 0; r < R; ++r) asm volatile("" : "+f"(d[r])::"memory");
}

// The accumulator operands of a wgmma with R = 16 / 32 / 64 registers a thread (N = 2R), as asm
// operands and as their %-list (PTX takes the registers as a list, so each shape is spelled out).
#define KVQ_WGMMA_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define KVQ_WGMMA_D32 KVQ_WGMMA_D16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KVQ_WGMMA_D64 KVQ_WGMMA_D32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KVQ_WGMMA_R16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KVQ_WGMMA_R32 KVQ_WGMMA_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KVQ_WGMMA_R64 KVQ_WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
// One wgmma.mma_async of SHAPE in dtype TY ("f16" / "bf16") with an fp32 accumulator; the operand
// numbers after the accumulator's are passed as strings. SS: A and B descriptors (both K-major);
// RS: A's four registers, B's descriptor, and the transpose-B immediate.
#define KVQ_WGMMA_SS(TY, SHAPE, REGS, DOPS, A, B, ACC)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " ACC ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY \
               "." TY " {" REGS "}, " A ", " B ", p, 1, 1, 0, 0;\n}\n"                                         \
               : DOPS                                                                                           \
               : "l"(a), "l"(b), "r"(accumulate))
#define KVQ_WGMMA_RS(TY, SHAPE, REGS, DOPS, A, B, ACC, TBN)                                                     \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " ACC ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY \
               "." TY " {" REGS "}, {" A "}, " B ", p, 1, 1, " TBN ";\n}\n"                                    \
               : DOPS                                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TB))
// d (64 x N) (+)= A (64 x 16, shared, K-major) . B (16 x N, shared, K-major); accumulate = 0 overwrites d.
template <class T>
KVQ_DEVICE void wgmma_ss_n32(float (&d)[16], uint64_t a, uint64_t b, int accumulate) {
#if KVQ_WGMMA_DEVICE
  if constexpr (std::is_same_v<T, fp16>)
    KVQ_WGMMA_SS("f16", "m64n32k16", KVQ_WGMMA_R16, KVQ_WGMMA_D16, "%16", "%17", "%18");
  else
    KVQ_WGMMA_SS("bf16", "m64n32k16", KVQ_WGMMA_R16, KVQ_WGMMA_D16, "%16", "%17", "%18");
#endif
}
template <class T>
KVQ_DEVICE void wgmma_ss_n64(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
#if KVQ_WGMMA_DEVICE
  if constexpr (std::is_same_v<T, fp16>)
    KVQ_WGMMA_SS("f16", "m64n64k16", KVQ_WGMMA_R32, KVQ_WGMMA_D32, "%32", "%33", "%34");
  else
    KVQ_WGMMA_SS("bf16", "m64n64k16", KVQ_WGMMA_R32, KVQ_WGMMA_D32, "%32", "%33", "%34");
#endif
}
template <class T>
KVQ_DEVICE void wgmma_ss_n128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
#if KVQ_WGMMA_DEVICE
  if constexpr (std::is_same_v<T, fp16>)
    KVQ_WGMMA_SS("f16", "m64n128k16", KVQ_WGMMA_R64, KVQ_WGMMA_D64, "%64", "%65", "%66");
  else
    KVQ_WGMMA_SS("bf16", "m64n128k16", KVQ_WGMMA_R64, KVQ_WGMMA_D64, "%64", "%65", "%66");
#endif
}
// d (64 x N) (+)= A (64 x 16, registers) . B (16 x N, shared): TB = 0 K-major B, TB = 1 MN-major B
// (the transpose-B flag).
template <class T, int TB>
KVQ_DEVICE void wgmma_rs_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if KVQ_WGMMA_DEVICE
  if constexpr (std::is_same_v<T, fp16>)
    KVQ_WGMMA_RS("f16", "m64n32k16", KVQ_WGMMA_R16, KVQ_WGMMA_D16, "%16, %17, %18, %19", "%20", "%21", "%22");
  else
    KVQ_WGMMA_RS("bf16", "m64n32k16", KVQ_WGMMA_R16, KVQ_WGMMA_D16, "%16, %17, %18, %19", "%20", "%21", "%22");
#endif
}
template <class T, int TB>
KVQ_DEVICE void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if KVQ_WGMMA_DEVICE
  if constexpr (std::is_same_v<T, fp16>)
    KVQ_WGMMA_RS("f16", "m64n64k16", KVQ_WGMMA_R32, KVQ_WGMMA_D32, "%32, %33, %34, %35", "%36", "%37", "%38");
  else
    KVQ_WGMMA_RS("bf16", "m64n64k16", KVQ_WGMMA_R32, KVQ_WGMMA_D32, "%32, %33, %34, %35", "%36", "%37", "%38");
#endif
}
template <class T, int TB>
KVQ_DEVICE void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
#if KVQ_WGMMA_DEVICE
  if constexpr (std::is_same_v<T, fp16>)
    KVQ_WGMMA_RS("f16", "m64n128k16", KVQ_WGMMA_R64, KVQ_WGMMA_D64, "%64, %65, %66, %67", "%68", "%69", "%70");
  else
    KVQ_WGMMA_RS("bf16", "m64n128k16", KVQ_WGMMA_R64, KVQ_WGMMA_D64, "%64, %65, %66, %67", "%68", "%69", "%70");
#endif
}
#undef KVQ_WGMMA_RS
#undef KVQ_WGMMA_SS
#undef KVQ_WGMMA_R64
#undef KVQ_WGMMA_R32
#undef KVQ_WGMMA_R16
#undef KVQ_WGMMA_D64
#undef KVQ_WGMMA_D32
#undef KVQ_WGMMA_D16

// Dispatch on N.
template <class T, int N>
KVQ_DEVICE void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "S tiles of 32, 64 or 128 tokens");
  if constexpr (N == 32) wgmma_ss_n32<T>(d, a, b, accumulate);
  else if constexpr (N == 64) wgmma_ss_n64<T>(d, a, b, accumulate);
  else wgmma_ss_n128<T>(d, a, b, accumulate);
}
template <class T, int N, int TB>
KVQ_DEVICE void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "N of 32, 64 or 128");
  if constexpr (N == 32) wgmma_rs_n32<T, TB>(d, a, b, accumulate);
  else if constexpr (N == 64) wgmma_rs_n64<T, TB>(d, a, b, accumulate);
  else wgmma_rs_n128<T, TB>(d, a, b, accumulate);
}

}  // namespace detail
KVQ_NAMESPACE_END

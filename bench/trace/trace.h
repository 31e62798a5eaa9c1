// bench/trace/trace.h - per-CTA globaltimer stamps for the decode chain (a diagnostic, not part of
// kvq). make_trace.sh force-includes it into a patched copy of the headers; it is never compiled
// into the library or its tests.
//
// kvq_trace holds 8 words a CTA (linear block id) in four regions, one per kernel:
//   [0] entry  [1] records loop start (after the wait for the transition grid)  [2] loop end
//   [3] exit   [4] multiprocessor id  [5] sequence resolved  [6] query rows staged
//   [7] INT2/INT4 query preparation done   (slots 1, 2, 5-7: records kernel only)
// Times are %globaltimer nanoseconds; the driver (driver.inc) subtracts the earliest entry.
#pragma once

#include <cuda_runtime.h>

static __device__ unsigned long long kvq_trace[1 << 18];

__device__ __forceinline__ unsigned long long kvq_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned kvq_cta() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

#define KVQ_T(region, slot) \
  if (threadIdx.x == 0) kvq_trace[(region) + 8 * kvq_cta() + (slot)] = kvq_now();

// Entry and exit stamps of a kernel (every return path), and its multiprocessor.
struct KvqTraceScope {
  unsigned base;
  __device__ explicit KvqTraceScope(unsigned region) : base(region + 8 * kvq_cta()) {
    if (threadIdx.x == 0) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      kvq_trace[base + 4] = sm;
      kvq_trace[base] = kvq_now();
    }
  }
  __device__ ~KvqTraceScope() {
    if (threadIdx.x == 0) kvq_trace[base + 3] = kvq_now();
  }
};

// Regions (words) of the four kernels; 8192 CTAs each at most.
#define KVQ_REG_REC 0
#define KVQ_REG_TAIL (1 << 16)
#define KVQ_REG_MERGE (1 << 17)
#define KVQ_REG_TRANS ((1 << 17) + (1 << 16))

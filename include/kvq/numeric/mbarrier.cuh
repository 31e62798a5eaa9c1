// kvq/numeric/mbarrier.cuh - the synchronisation a warp-specialized Hopper kernel needs between
// its producer and consumer warpgroups (sm_90): shared-memory mbarriers (arrive / wait on a phase
// parity), named barriers over a subset of the CTA's warps, and the register hand-over between
// warpgroups (setmaxnreg, sm_90a).
//
// An mbarrier counts arrivals; when `count` threads have arrived its phase completes and its
// parity flips (phase k has parity k & 1). A waiter names the parity of the phase it waits for:
// a ring of S stages used in order by tiles j = 0, 1, ... waits for phase j / S of stage j % S.
// arrive has release and try_wait acquire semantics at CTA scope, so shared-memory writes made
// before an arrive are visible to a thread whose wait returned.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KVQ_MBARRIER_DEVICE 1
#else
#define KVQ_MBARRIER_DEVICE 0
#endif

// The 32-bit shared-window address of a barrier, as the instructions below take it.
KVQ_DEVICE uint32_t mbarrier_address(const uint64_t* bar) {
#if KVQ_MBARRIER_DEVICE
  return static_cast<uint32_t>(__cvta_generic_to_shared(bar));
#else
  (void)bar;
  return 0u;
#endif
}

// One thread initialises; the CTA must synchronise (__syncthreads) before anyone uses it.
KVQ_DEVICE void mbarrier_init(uint64_t* bar, unsigned count) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbarrier_address(bar)), "r"(count) : "memory");
#else
  (void)bar, (void)count;
#endif
}

// The operations below take the barrier's shared-window address (a kernel that addresses a ring of
// barriers in a loop computes the base address once); arrive and wait also take a pointer.
KVQ_DEVICE void mbarrier_arrive(uint32_t bar) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
#endif
}
KVQ_DEVICE void mbarrier_arrive(uint64_t* bar) { mbarrier_arrive(mbarrier_address(bar)); }

// Holds the current phase of `bar` open until every cp.async this thread issued so far has
// completed (the pending count goes up by one now and down by one then: no arrival of its own,
// the thread still arrives with mbarrier_arrive). A waiter whose wait returns sees those copies.
KVQ_DEVICE void cp_async_mbarrier_arrive(uint32_t bar) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
#endif
}

// One arrival of this thread on `bar`, made when every cp.async it issued so far has completed
// (counts toward the barrier's expected arrivals, unlike cp_async_mbarrier_arrive). A barrier fed
// only this way completes its phase when all its threads' copies have landed.
KVQ_DEVICE void cp_async_mbarrier_arrive_noinc(uint32_t bar) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
#endif
}

// Returns once the phase of parity `parity` has completed.
KVQ_DEVICE void mbarrier_wait(uint32_t addr, uint32_t parity) {
#if KVQ_MBARRIER_DEVICE
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#else
  (void)addr, (void)parity;
#endif
}
KVQ_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) { mbarrier_wait(mbarrier_address(bar), parity); }

// Barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32): every warp
// that takes part reaches it with all its threads.
KVQ_DEVICE void named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers a thread of this warpgroup may hold from here on (sm_90a; every thread of the
// warpgroup executes it): a warp-specialized kernel hands the registers its producers do not
// need to its consumers. The kernel needs __launch_bounds__ with a minimum CTA count, so that
// ptxas knows the count at entry (else it ignores the instruction, warning C7508).
template <int N>
KVQ_DEVICE void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
KVQ_DEVICE void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg takes multiples of 8 in [24, 256]");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

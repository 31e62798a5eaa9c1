// kvq/numeric/bulk_copy.cuh - one-thread bulk copies from global to shared memory that complete on an
// mbarrier (sm_90 cp.async.bulk, the non-tensor form of TMA): the issuing thread announces the bytes
// with mbarrier_arrive_expect_tx, each copy subtracts its bytes when it lands, and the barrier's phase
// completes once its arrivals and bytes are all in; a thread whose wait returned sees the data.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/numeric/mbarrier.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// This thread's arrival on the barrier at shared-window address `bar` (mbarrier_address), raising
// the bytes its current phase waits for by `bytes`.
KVQ_DEVICE void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes;
#endif
}

// `bytes` (a multiple of 16) from global `src` to shared `dst` (both 16-byte aligned), completing on
// the barrier at shared-window address `bar`.
KVQ_DEVICE void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes, uint32_t bar) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes, (void)bar;
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

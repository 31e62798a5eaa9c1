// kvq/numeric/cluster.cuh - what two CTAs of a thread-block cluster (sm_90) need to hand each other
// shared-memory tiles: the CTA's rank in its cluster, the partner's address of a shared-memory
// location (distributed shared memory), the cluster-wide barrier, arrivals on the partner's
// mbarriers, and stores into the partner's shared memory that complete on the partner's mbarrier.
//
// Addresses are 32-bit shared-window addresses. A CTA's own window address is also its
// shared::cluster address; peer_address maps it to the same offset in the partner's window, which
// is where the partner keeps the same variable when both run the same kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/numeric/mbarrier.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// This CTA's rank in its cluster (0 without a cluster launch).
KVQ_DEVICE unsigned cluster_rank() {
#if KVQ_MBARRIER_DEVICE
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  return 0u;
#endif
}

// CTAs in this CTA's cluster (1 without a cluster launch).
KVQ_DEVICE unsigned cluster_size() {
#if KVQ_MBARRIER_DEVICE
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
  return n;
#else
  return 1u;
#endif
}

// The shared::cluster address of `addr` (this CTA's window) in the window of the CTA of rank `rank`.
KVQ_DEVICE uint32_t peer_address(uint32_t addr, unsigned rank) {
#if KVQ_MBARRIER_DEVICE
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
#else
  (void)rank;
  return addr;
#endif
}

// Makes this thread's mbarrier initialisations visible to the cluster (before cluster_sync).
KVQ_DEVICE void fence_mbarrier_init_cluster() {
#if KVQ_MBARRIER_DEVICE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Every thread of every CTA of the cluster: returns once all have arrived (release / acquire at
// cluster scope). Before a CTA touches its partner's shared memory (the partner has started and
// initialised its barriers) and before it exits (the partner no longer touches its memory).
KVQ_DEVICE void cluster_sync() {
#if KVQ_MBARRIER_DEVICE
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// One arrival on the partner's barrier at shared::cluster address `bar` (peer_address), with the
// instruction's default semantics (release at CTA scope), as a consumer's "done reading this stage"
// needs: the reads it announces were by wgmma and have completed (wgmma_wait) before the arrival.
// (.release.cluster would make ptxas put a MEMBAR.ALL.GPU before every arrival: ~21 % more time in
// the paired prefill kernel on an H200, docs/PERF_NOTES.md.)
KVQ_DEVICE void mbarrier_arrive_cluster(uint32_t bar) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
#endif
}

// 16 bytes (v) to the partner's shared memory at `dst` (shared::cluster, peer_address, 16-byte
// aligned), completing on the partner's barrier at `bar` (shared::cluster) with 16 bytes of its
// transaction count: the barrier's waiters see them. Non-blocking (st.async).
KVQ_DEVICE void store_to_peer(uint32_t dst, uint4 v, uint32_t bar) {
#if KVQ_MBARRIER_DEVICE
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(dst),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
               : "memory");
#else
  (void)dst, (void)v, (void)bar;
#endif
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/append/append.hpp - declaration of the GPU append (light: no CUDA headers needed).
//
//   kvq::append<Cfg>(cache, batch, max_new_tokens, flags, stream)
//
// Quantizes the pages that leave the hot window and writes the remaining new tokens to the hot
// rings, for a batch mixing prompts, chunks and decode tokens, in one kernel launch. Same bytes
// as kvq::reference::append. No host synchronisation and no allocation: CUDA-graph capturable.
//
// The definition is in append_impl.cuh; instantiate it once per configuration in a .cu file:
//   #include <kvq/append/append_impl.cuh>
//   using MyConfig = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
//   KVQ_INSTANTIATE_APPEND(MyConfig);   // takes an alias: the macro argument cannot hold commas
// A configuration never instantiated is a link error, never a silent fallback.
#pragma once

#include <cstdint>

#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/core/cuda_fwd.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

// cache, batch: device pointers. max_new_tokens: host-side bound on any sequence's new tokens
// (sizes the grid; a sequence above it is rejected on the device). flags: device word the kernel
// ORs kFlag* bits into (kFlagBadSequence: a sequence whose lengths, slot or page ids were invalid,
// or whose rows [cu_new[b], cu_new[b+1]) lie outside [0, cu_new[batch]), was left untouched).
// Returns a Status for arguments the host can check, kCudaError if the launch failed (its
// cudaError_t: kvq::last_cuda_error(); an earlier CUDA error of the caller is left pending).
template <class Cfg>
Status append(const CacheView<typename Cfg::dtype>& cache, const AppendBatch<typename Cfg::dtype>& batch,
              int max_new_tokens, uint32_t* flags, cudaStream_t stream);

KVQ_NAMESPACE_END

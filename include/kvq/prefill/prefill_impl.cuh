// kvq/prefill/prefill_impl.cuh - chunked-prefill attention launcher (include from one .cu per
// configuration).
//
// Two launches on the caller's stream, no host synchronisation:
//  1. transition (attention/transition.cuh): prefix pages that turn cold in this step are
//     quantized into the workspace with the append's own code, so the result does not depend on
//     whether the step's append ran before;
//  2. prefill_kernel (prefill_kernel.cuh): grid (row tiles, batch, KV heads), 128 threads.
#pragma once

#include <cuda_runtime.h>

#include "kvq/attention/run_checks.hpp"
#include "kvq/attention/transition.cuh"
#include "kvq/prefill/prefill.hpp"
#include "kvq/prefill/prefill_kernel.cuh"

KVQ_NAMESPACE_BEGIN

namespace detail {
template <class Cfg, int BM>
Status launch_prefill(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
                      const PrefillPlan& plan, uint8_t* transition, typename Cfg::dtype* out, uint32_t* flags,
                      cudaStream_t stream) {
  constexpr size_t smem = PrefillSmem<Cfg, BM>::bytes;
  if (cudaFuncSetAttribute(prefill_kernel<Cfg, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::kCudaError;
  prefill_kernel<Cfg, BM><<<dim3(unsigned(plan.row_tiles), unsigned(batch.batch), unsigned(cache.num_kv_heads)), kPrefillWarps * 32, smem,
                            stream>>>(cache, batch, plan, transition, out, flags);
  return Status::kSuccess;
}
}  // namespace detail

// rows_per_cta: 0 picks prefill_rows_per_cta(head_dim, quantized); kPrefillRowsSmall or
// kPrefillRowsLarge force one (benchmarks compare them).
template <class Cfg>
Status plan_prefill(const PrefillShape& shape, PrefillPlan* plan, int rows_per_cta) {
  constexpr bool quantized = Cfg::k_quant::kind != QuantKind::kNone || Cfg::v_quant::kind != QuantKind::kNone;
  if (rows_per_cta == 0) rows_per_cta = prefill_rows_per_cta(Cfg::head_dim, quantized);
  if (Cfg::head_dim > 128 && rows_per_cta != kPrefillRowsSmall) return Status::kInvalidShape;  // registers
  return plan_prefill(shape, Cfg::head_dim, Cfg::page, Cfg::record_bytes, rows_per_cta, plan);
}

template <class Cfg>
Status prefill(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
               const PrefillPlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
               uint32_t* flags, cudaStream_t stream) {
  const PlannedAttention planned{plan.head_dim, plan.page, plan.record_bytes, plan.shape.num_q_heads,
                                 plan.shape.num_kv_heads, plan.shape.residual, plan.shape.batch, plan.workspace_bytes};
  const Status st = check_attention_run<Cfg>(cache, batch, planned, workspace, workspace_bytes, out, flags);
  if (st != Status::kSuccess) return st;
  if (reinterpret_cast<uintptr_t>(cache.hot_k) % 16 || reinterpret_cast<uintptr_t>(cache.hot_v) % 16 ||
      reinterpret_cast<uintptr_t>(batch.q) % 16 || reinterpret_cast<uintptr_t>(batch.new_k) % 16 ||
      reinterpret_cast<uintptr_t>(batch.new_v) % 16 || reinterpret_cast<uintptr_t>(out) % 4)
    return Status::kInvalidShape;  // 16-byte copies of rows
  if (batch.batch == 0 || plan.row_tiles == 0) return Status::kSuccess;
  uint8_t* transition = static_cast<uint8_t*>(workspace) + plan.transition_offset;
  detail::launch_transition<Cfg>(cache, batch, plan.transition_pages, transition, stream);
  Status launched = Status::kInvalidShape;
  if (plan.rows_per_cta == kPrefillRowsSmall)
    launched = detail::launch_prefill<Cfg, kPrefillRowsSmall>(cache, batch, plan, transition, out, flags, stream);
  if constexpr (Cfg::head_dim <= 128)
    if (plan.rows_per_cta == kPrefillRowsLarge)
      launched = detail::launch_prefill<Cfg, kPrefillRowsLarge>(cache, batch, plan, transition, out, flags, stream);
  if (launched != Status::kSuccess) return launched;
  return cudaGetLastError() == cudaSuccess ? Status::kSuccess : Status::kCudaError;
}

#define KVQ_INSTANTIATE_PREFILL(Cfg)                                                                              \
  template ::kvq::Status kvq::prefill<Cfg>(const ::kvq::CacheView<typename Cfg::dtype>&,                          \
                                          const ::kvq::AttentionBatch<typename Cfg::dtype>&,                      \
                                          const ::kvq::PrefillPlan&, void*, size_t, typename Cfg::dtype*, uint32_t*, \
                                          cudaStream_t);                                                          \
  template ::kvq::Status kvq::plan_prefill<Cfg>(const ::kvq::PrefillShape&, ::kvq::PrefillPlan*, int)

KVQ_NAMESPACE_END

// kvq/prefill/prefill_impl.cuh - chunked-prefill attention launcher (include from one .cu per
// configuration).
//
// Two launches on the caller's stream, no host synchronisation:
//  1. transition (kernels/transition.cuh): prefix pages that turn cold in this step are
//     quantized into the workspace with the append's own code, so the result does not depend on
//     whether the step's append ran before;
//  2. the attention kernel, grid (row tiles, batch, KV heads): prefill_kernel.cuh (mma.sync, 128
//     threads) or, where the plan says so, prefill_ws_kernel.cuh (Hopper wgmma, warp-specialized,
//     512 threads).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "kvq/attention/run_checks.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/kernels/transition.cuh"
#include "kvq/core/launch.cuh"
#include "kvq/prefill/prefill.hpp"
#include "kvq/prefill/prefill_kernel.cuh"
#include "kvq/prefill/prefill_ws_kernel.cuh"

KVQ_NAMESPACE_BEGIN

namespace detail {
// Either attention kernel (they share their parameters): its dynamic shared memory
// allowed, then launched over (row tiles, batch, KV heads). pairs: in clusters of two CTAs along the
// row tiles (the warp-specialized kernel's paired CTAs), the row-tile count rounded up to even.
template <class T>
Status launch_prefill_kernel(void (*kernel)(CacheView<T>, AttentionBatch<T>, PrefillPlan, uint8_t*, T*, uint32_t*),
                             int threads, size_t smem, const CacheView<T>& cache, const AttentionBatch<T>& batch,
                             const PrefillPlan& plan, uint8_t* transition, T* out, uint32_t* flags, cudaStream_t stream,
                             bool pairs = false) {
  if (!cuda_ok(allow_dynamic_smem(kernel, smem))) return Status::kCudaError;
  const int64_t row_tiles = pairs ? prefill_paired_grid_tiles(plan.row_tiles) : int64_t(plan.row_tiles);
  if (row_tiles > INT32_MAX) return Status::kInvalidShape;  // the grid's x limit
  const dim3 grid(unsigned(row_tiles), unsigned(batch.batch), unsigned(cache.num_kv_heads));
  if (!pairs) return launch(kernel, grid, dim3(unsigned(threads)), smem, stream, cache, batch, plan, transition, out, flags);
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 2;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = 1;
  return cuda_status(cudaLaunchKernelEx(&config, kernel, cache, batch, plan, transition, out, flags));
}

// Whether the current device runs the wgmma kernels of Cfg from this binary: a compute
// capability 9.0 GPU and sm_90a code loaded for Cfg's translation unit (numeric/wgmma.cuh).
template <class Cfg>
bool prefill_wgmma_available() {
  if constexpr (Cfg::head_dim > 128) {
    return false;
  } else {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess && wgmma_available<Cfg>(dev);
  }
}

// A kernel chosen by the caller instead of plan_prefill<Cfg>'s choice, for the tests and benchmarks
// that compare the kernels: not part of the public interface.
//   kernel: kAuto (plan_prefill<Cfg>'s choice: the warp-specialized kernel where this build and the
//     current device have it and rows_per_cta is 0 or kPrefillRowsLarge, else mma.sync), kMmaSync,
//     or kWgmmaWs (kNotInstantiated where it is not available).
//   rows_per_cta: 0 (prefill_rows_per_cta) or kPrefillRowsSmall / kPrefillRowsLarge.
//   tile_tokens: 0 (the kernel's tile, prefill_ws_tile), or with kWgmmaWs 64 or, where neither role
//     is quantized, 128.
struct PrefillChoice {
  PrefillKernel kernel = PrefillKernel::kAuto;
  int rows_per_cta = 0;
  int tile_tokens = 0;
};

template <class Cfg>
Status plan_prefill_with(const PrefillShape& shape, PrefillPlan* plan, PrefillChoice choice) {
  constexpr bool quantized = Codec<typename Cfg::k_quant>::quantized || Codec<typename Cfg::v_quant>::quantized;
  PrefillKernel kernel = choice.kernel;
  int rows_per_cta = choice.rows_per_cta;
  const int tile_tokens = choice.tile_tokens;
  if (kernel != PrefillKernel::kAuto && kernel != PrefillKernel::kMmaSync && kernel != PrefillKernel::kWgmmaWs)
    return Status::kInvalidShape;
  if (tile_tokens != 0 && tile_tokens != 64 && tile_tokens != 128) return Status::kInvalidShape;
  const bool available = prefill_wgmma_available<Cfg>();
  if (kernel == PrefillKernel::kAuto && (rows_per_cta == 0 || rows_per_cta == kPrefillRowsLarge) && available)
    kernel = prefill_hopper_default<Cfg>();
  if (kernel == PrefillKernel::kWgmmaWs) {
    if (!available) return Status::kNotInstantiated;
    if (rows_per_cta != 0 && rows_per_cta != kPrefillRowsLarge) return Status::kInvalidShape;
    if (tile_tokens != 0 && tile_tokens != kPrefillWsTile && tile_tokens != prefill_ws_tile<Cfg>())
      return Status::kInvalidShape;
    const Status st = plan_prefill(shape, Cfg::head_dim, Cfg::page, Cfg::record_bytes, kPrefillRowsLarge, plan);
    if (st == Status::kSuccess) {
      plan->kernel = kernel;
      plan->tile_tokens = tile_tokens ? tile_tokens : prefill_ws_tile<Cfg>();
    }
    return st;
  }
  if (tile_tokens != 0) return Status::kInvalidShape;  // a tile of the warp-specialized kernel
  if (rows_per_cta == 0) rows_per_cta = prefill_rows_per_cta(Cfg::head_dim, quantized);
  if (Cfg::head_dim > 128 && rows_per_cta != kPrefillRowsSmall) return Status::kInvalidShape;  // registers
  return plan_prefill(shape, Cfg::head_dim, Cfg::page, Cfg::record_bytes, rows_per_cta, plan);
}
}  // namespace detail

template <class Cfg>
Status plan_prefill(const PrefillShape& shape, PrefillPlan* plan) {
  return detail::plan_prefill_with<Cfg>(shape, plan, detail::PrefillChoice{});
}

template <class Cfg, class Policy>
Status prefill(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
               const PrefillPlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
               uint32_t* flags, cudaStream_t stream) {
  const PlannedAttention planned{plan.head_dim, plan.page, plan.record_bytes, plan.shape.num_q_heads,
                                 plan.shape.num_kv_heads, plan.shape.residual, plan.shape.batch, plan.workspace_bytes};
  const Status st = check_attention_run<Cfg>(cache, batch, planned, workspace, workspace_bytes, out, flags);
  if (st != Status::kSuccess) return st;
  if (reinterpret_cast<uintptr_t>(cache.hot_k) % 16 || reinterpret_cast<uintptr_t>(cache.hot_v) % 16 ||
      reinterpret_cast<uintptr_t>(batch.q) % 16 || reinterpret_cast<uintptr_t>(batch.new_k) % 16 ||
      reinterpret_cast<uintptr_t>(batch.new_v) % 16 || reinterpret_cast<uintptr_t>(out) % 4 ||
      reinterpret_cast<uintptr_t>(cache.sink_k) % 16 || reinterpret_cast<uintptr_t>(cache.sink_v) % 16)
    return Status::kInvalidShape;  // 16-byte copies of rows (sink rows too)
  if (batch.batch == 0 || plan.row_tiles == 0) return Status::kSuccess;
  uint8_t* transition = static_cast<uint8_t*>(workspace) + plan.transition_offset;
  Status launched = detail::launch_transition<Cfg>(cache, batch, plan.transition_pages, transition, stream);
  if (launched != Status::kSuccess) return launched;
  launched = Status::kInvalidShape;
  if (plan.kernel == PrefillKernel::kWgmmaWs) {
    // A plan for the wgmma kernel comes from a binary and device that have it (plan_prefill<Cfg>).
    if constexpr (Cfg::head_dim <= 128) {
      auto launch_ws = [&](auto bn) {  // the warp-specialized kernel with tiles of bn tokens
        constexpr int BN = decltype(bn)::value;
        return detail::launch_prefill_kernel(detail::prefill_ws_kernel<Cfg, BN, Policy>, detail::kPrefillWsThreads,
                                             detail::PrefillWsSmem<Cfg, BN, Policy>::bytes, cache, batch, plan, transition, out,
                                             flags, stream, detail::prefill_ws_paired<Cfg, BN, Policy>() && Policy::kWsClusters);
      };
      if (plan.tile_tokens == detail::kPrefillWsTile) launched = launch_ws(std::integral_constant<int, detail::kPrefillWsTile>{});
      if constexpr (detail::prefill_ws_tile<Cfg>() != detail::kPrefillWsTile)
        if (plan.tile_tokens == detail::prefill_ws_tile<Cfg>())
          launched = launch_ws(std::integral_constant<int, detail::prefill_ws_tile<Cfg>()>{});
    } else {
      launched = Status::kNotInstantiated;
    }
  } else if (plan.kernel == PrefillKernel::kMmaSync && plan.rows_per_cta == kPrefillRowsSmall)
    launched = detail::launch_prefill_kernel(detail::prefill_kernel<Cfg, kPrefillRowsSmall>, detail::kPrefillWarps * 32,
                                              detail::PrefillSmem<Cfg, kPrefillRowsSmall>::bytes, cache, batch, plan, transition,
                                              out, flags, stream);
  if constexpr (Cfg::head_dim <= 128)
    if (plan.kernel == PrefillKernel::kMmaSync && plan.rows_per_cta == kPrefillRowsLarge)
      launched = detail::launch_prefill_kernel(detail::prefill_kernel<Cfg, kPrefillRowsLarge>, detail::kPrefillWarps * 32,
                                                detail::PrefillSmem<Cfg, kPrefillRowsLarge>::bytes, cache, batch, plan, transition,
                                                out, flags, stream);
  return launched;
}

// KVQ_INSTANTIATE_PREFILL(Cfg): plan_prefill<Cfg> and the prefill of PrefillPolicy;
// KVQ_INSTANTIATE_PREFILL_WITH_POLICY(Cfg, Policy): the prefill of another policy (its own
// kernels; the plan does not depend on the policy).
#define KVQ_INSTANTIATE_PREFILL_WITH_POLICY(Cfg, Policy)                                                             \
  template ::kvq::Status kvq::prefill<Cfg, Policy>(const ::kvq::CacheView<typename Cfg::dtype>&,                    \
                                                  const ::kvq::AttentionBatch<typename Cfg::dtype>&,                \
                                                  const ::kvq::PrefillPlan&, void*, size_t, typename Cfg::dtype*,   \
                                                  uint32_t*, cudaStream_t)
#define KVQ_INSTANTIATE_PREFILL(Cfg)                                                                                 \
  KVQ_INSTANTIATE_PREFILL_WITH_POLICY(Cfg, ::kvq::PrefillPolicy);                                                   \
  template ::kvq::Status kvq::plan_prefill<Cfg>(const ::kvq::PrefillShape&, ::kvq::PrefillPlan*)

KVQ_NAMESPACE_END

// kvq/prefill/prefill.hpp - declaration of the GPU chunked-prefill attention (light: no CUDA headers).
//
//   kvq::plan_prefill<Cfg>(shape, &plan)                                         host, once per shape
//   kvq::prefill<Cfg>(cache, batch, plan, workspace, bytes, out, flags, stream)  device, every chunk
//
// Computes the attention contract of kvq/attention/batch.hpp for chunks of any length: each new
// query attends to its sequence's whole prefix (cold pages dequantized into shared memory tile by
// tile, never written out; hot rows as stored) and causally to its own chunk's fresh K/V, with
// tensor cores (mma.sync m16n8k16 on sm_80 and sm_90; on Hopper, with an sm_90a build, warpgroup
// wgmma for head dims 64 and 128). The GQA group of a KV head is packed into
// the query rows of a CTA, so each K/V tile is read and dequantized once for the whole group.
// Attention sinks (CacheView::sinks): tokens [0, sinks) are read as kept in the model dtype (sink_k /
// sink_v, or the ring while page 0 turns cold), never from their record (token_source.hpp).
// No alignment: a chunk may start and end anywhere. No host synchronisation, no allocation.
//
// Definitions in prefill_impl.cuh; instantiate per configuration: KVQ_INSTANTIATE_PREFILL(Cfg).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/attention/batch.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/core/cuda_fwd.hpp"
#include "kvq/prefill/plan.hpp"

KVQ_NAMESPACE_BEGIN

// rows_per_cta: 0 (the default choice) or kPrefillRowsSmall / kPrefillRowsLarge. kernel: kAuto
// takes the Hopper kernel prefill_hopper_default<Cfg>() where this build and the current device
// have the wgmma kernels (and rows_per_cta is 0 or kPrefillRowsLarge), else mma.sync; kWgmma or
// kWgmmaWs where they are not available is kNotInstantiated. tile_tokens: the K/V tile, 0 (the
// kernel's default: prefill_wgmma_default_tile for kWgmma, detail::prefill_ws_tile for kWgmmaWs),
// 32 or 64 (kWgmma), 64 or, where neither role is quantized, 128 (kWgmmaWs).
template <class Cfg>
Status plan_prefill(const PrefillShape& shape, PrefillPlan* plan, int rows_per_cta = 0,
                    PrefillKernel kernel = PrefillKernel::kAuto, int tile_tokens = 0);

// cache, batch, workspace, out, flags: device memory. out: [cu_q[batch]][num_q_heads][head_dim]
// of the model dtype. A sequence whose lengths, slot or pages are invalid on the device, whose
// rows [cu_q[b], cu_q[b+1]) lie outside [0, cu_q[batch]) (core/batch_rows.hpp), or which exceeds
// the plan is skipped: its outputs are not written and kFlagBadSequence is set.
template <class Cfg>
Status prefill(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
               const PrefillPlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
               uint32_t* flags, cudaStream_t stream);

KVQ_NAMESPACE_END

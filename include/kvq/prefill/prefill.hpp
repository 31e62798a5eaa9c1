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
#include "kvq/prefill/policy.hpp"

KVQ_NAMESPACE_BEGIN

// The plan's kernel (PrefillKernel, plan.hpp): the warp-specialized wgmma kernel where this build
// and the current device have it (Hopper, an sm_90a build, head dims 64 and 128), else mma.sync.
template <class Cfg>
Status plan_prefill(const PrefillShape& shape, PrefillPlan* plan);

// cache, batch, workspace, out, flags: device memory. out: [cu_q[batch]][num_q_heads][head_dim]
// of the model dtype. A sequence whose lengths, slot or pages are invalid on the device, whose
// rows [cu_q[b], cu_q[b+1]) lie outside [0, cu_q[batch]) (core/batch_rows.hpp), or which exceeds
// the plan is skipped: its outputs are not written and kFlagBadSequence is set.
// Policy: the kernels' compile-time tuning (prefill/policy.hpp).
template <class Cfg, class Policy = PrefillPolicy>
Status prefill(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
               const PrefillPlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
               uint32_t* flags, cudaStream_t stream);

KVQ_NAMESPACE_END

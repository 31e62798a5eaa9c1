// kvq/decode/decode.hpp - declaration of the GPU decode attention (light: no CUDA headers).
//
//   kvq::plan_decode<Cfg>(shape, &plan)                                         host, once per shape
//   kvq::decode<Cfg>(cache, batch, plan, workspace, bytes, out, flags, stream)  device, every step
// (plan_decode<Cfg> asks the CUDA occupancy calculator how many CTAs fit on a multiprocessor and
// calls the CUDA-free kvq::plan_decode of plan.hpp with it.)
//
// Computes the attention contract of kvq/attention/batch.hpp for q_len 1..16 new tokens per
// sequence (decode and speculative decoding) with split-KV over the prefix. The whole GQA group
// of a KV head (times the new tokens, up to kDecodeRowsPerCta rows) shares each K/V read.
// No host synchronisation, no allocation: capturable in a CUDA graph and replayable with any
// lengths within the plan's bounds.
//
// Policy: the kernels' compile-time tuning (decode/policy.hpp); plan and run with the same one.
// Definitions in decode_impl.cuh; instantiate per configuration: KVQ_INSTANTIATE_DECODE(Cfg).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/attention/batch.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/core/cuda_fwd.hpp"
#include "kvq/decode/plan.hpp"
#include "kvq/decode/policy.hpp"

KVQ_NAMESPACE_BEGIN

// cache, batch, workspace, out, flags: device memory. out: [cu_q[batch]][num_q_heads][head_dim]
// of the model dtype. A sequence whose lengths, slot or pages are invalid on the device, whose
// rows [cu_q[b], cu_q[b+1]) lie outside [0, cu_q[batch]) (core/batch_rows.hpp), or which exceeds
// the plan is skipped: its outputs are not written and kFlagBadSequence is set.
template <class Cfg, class Policy = DecodePolicy>
Status plan_decode(const DecodeShape& shape, DecodePlan* plan);

template <class Cfg, class Policy = DecodePolicy>
Status decode(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
              const DecodePlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
              uint32_t* flags, cudaStream_t stream);

KVQ_NAMESPACE_END

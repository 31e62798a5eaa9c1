// kvq/dequant/dequantize.hpp - declaration of the GPU dequantize-to-model-dtype (light header).
//
//   kvq::dequantize<Cfg>(cache, lengths, batch, cu_out, max_len, k_out, v_out, flags, stream)
//
// Writes every token [0, len) of each sequence, K and V, in the model dtype, for engines that run
// their own attention: cold tokens dequantized (the same values as kvq::reference::
// dequantize_sequence, bit for bit: one implementation), hot tokens copied from the ring.
// No host synchronisation, no allocation. Definitions in dequantize_impl.cuh; instantiate with
// KVQ_INSTANTIATE_DEQUANTIZE(Cfg).
#pragma once

#include <cstdint>

#include "kvq/cache/config.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/cuda_fwd.hpp"
#include "kvq/core/status.hpp"
#include "kvq/dequant/policy.hpp"

KVQ_NAMESPACE_BEGIN

// lengths: device [batch] len and cold of each sequence. cu_out: device [batch + 1] row offsets
// into k_out / v_out ([cu_out[batch]][num_kv_heads][head_dim]); sequence b fills rows
// [cu_out[b], cu_out[b] + len); k_out and v_out 16-byte aligned (kInvalidShape otherwise).
// max_len: host bound on len (sizes the grid). A sequence with bad lengths, slot, pages, fewer
// rows than tokens, or rows outside [0, cu_out[batch]) is skipped and kFlagBadSequence set.
// Policy: the kernels' compile-time tuning (dequant/policy.hpp).
template <class Cfg, class Policy = DequantizePolicy>
Status dequantize(const CacheView<typename Cfg::dtype>& cache, const SeqLengths& lengths, int batch,
                  const int32_t* cu_out, int64_t max_len, typename Cfg::dtype* k_out, typename Cfg::dtype* v_out,
                  uint32_t* flags, cudaStream_t stream);

KVQ_NAMESPACE_END

// kvq/kernels/transition.cuh - the pages of a sequence's prefix that turn cold in this step.
//
// An attention call may run before its step's append (see attention/batch.hpp). The prefix pages
// [cold/P, transition_pages_end) are then still ring rows, but the contract says the attention
// sees them as the append will store them: this kernel quantizes them with the append's own code
// (page_encoder.cuh) into a caller-provided transition area, where token_ref finds them:
//   transition [batch][transition_pages][num_kv_heads][record_bytes]
// Shared by decode and chunked prefill. Grid: (transition_pages, batch, num_kv_heads),
// kEncoderThreads threads.
// Decode also has it clear its per-sequence status words (decode/workspace.cuh) as the first
// kernel of its chain, which saves a memset in front of it: the later kernels set a word only
// after they have waited for this grid (wait_prior_grids).
#pragma once

#include <cuda_runtime.h>

#include "kvq/kernels/page_encoder.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/core/launch.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg>
__global__ void __launch_bounds__(kEncoderThreads) KVQ_HIDDEN
    transition_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, int transition_pages,
                      uint8_t* transition, int32_t* clear_status) {
  constexpr int P = Cfg::page;
  __shared__ SeqAttention s;
  const int j = blockIdx.x, b = blockIdx.y, h = blockIdx.z;
  launch_dependents();  // decode's records kernel may start; it waits for this grid before reading the records
  if (clear_status && j == 0 && h == 0 && threadIdx.x == 0) clear_status[b] = 0;
  if (threadIdx.x == 0) s = resolve_attention(v, a, b, P);
  __syncthreads();
  if (s.status != Status::kSuccess) return;  // reported by the attention kernel
  const int64_t p = s.cold / P + j;
  if (p >= transition_pages_end(s, P) || j >= transition_pages) return;
  uint8_t* record = transition + record_offset(int64_t(b) * transition_pages + j, h, v.num_kv_heads, Cfg::record_bytes);
  uint32_t ignored = 0;  // sanitisation is reported by the append that stores the page
  encode_page_block<Cfg>(v, a.new_k, a.new_v, as_append(s), p, h, record, ignored);
}

template <class Cfg>
Status launch_transition(const CacheView<typename Cfg::dtype>& v, const AttentionBatch<typename Cfg::dtype>& a,
                         int transition_pages, uint8_t* transition, cudaStream_t stream, int32_t* clear_status = nullptr) {
  size_t smem = 0;
  const Status st = page_encoder_smem_bytes<Cfg>(transition_kernel<Cfg>, &smem);
  if (st != Status::kSuccess) return st;
  return launch(transition_kernel<Cfg>, dim3(unsigned(transition_pages), unsigned(a.batch), unsigned(v.num_kv_heads)),
                dim3(kEncoderThreads), smem, stream, v, a, transition_pages, transition, clear_status);
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/kernels/page_encoder.cuh - one thread block quantizes one page of one KV head into a record.
// Used by the append kernel (pages leaving the hot window) and by the attention kernels (pages
// turning cold in the current step, quantized on the fly), so both produce the same bytes.
#pragma once

#include <cuda_runtime.h>

#include "kvq/cache/append_plan.hpp"
#include "kvq/codec/section_codec.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Shared memory of the encoder: the page's source rows and the code staging area.
template <class Cfg>
struct PageEncoderSmem {
  alignas(16) uint8_t scratch[Cfg::page * Cfg::head_dim];
  const typename Cfg::dtype* rows_k[Cfg::page];
  const typename Cfg::dtype* rows_v[Cfg::page];
};

// Quantizes page p (tokens [p*P, (p+1)*P)) of head h of the sequence described by s, reading
// rows from the ring / fresh_k / fresh_v (source_row; sink rows as encoder_token says), into `record`. Every thread of the block
// calls it; it begins and ends with a barrier.
template <class Cfg>
__device__ void encode_page_block(const CacheView<typename Cfg::dtype>& v, const typename Cfg::dtype* fresh_k,
                                  const typename Cfg::dtype* fresh_v, const SeqAppend& s, int64_t p, int h,
                                  uint8_t* record, PageEncoderSmem<Cfg>& sm, uint32_t& flags) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  for (int t = threadIdx.x; t < P; t += blockDim.x) {
    sm.rows_k[t] = source_row(v, v.hot_k, fresh_k, s, encoder_token(v, p * P + t), h, D, P);
    sm.rows_v[t] = source_row(v, v.hot_v, fresh_v, s, encoder_token(v, p * P + t), h, D, P);
  }
  __syncthreads();
  auto row_k = [&](int t) { return sm.rows_k[t]; };
  auto row_v = [&](int t) { return sm.rows_v[t]; };
  encode_record<Cfg>(row_k, row_v, record, sm.scratch, int(threadIdx.x), int(blockDim.x), [] { __syncthreads(); }, flags,
                     v.key_clip);
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/attention/pages_valid.cuh - CTA-wide check, on the device, that the block-table entries an
// attention kernel is about to follow point into the pool (a bad page id rejects the sequence
// instead of reading out of bounds).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/attention/token_source.hpp"
#include "kvq/cache/view.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// CTA-wide: the sequence is valid and every pool page id of [start, end) is in the pool. A thread
// loads 8 ids before it tests any, so that their round trips overlap (a loop that stops at the
// first bad id makes each load wait for the previous test).
template <class T>
__device__ bool pages_valid(const CacheView<T>& v, int b, const SeqAttention& s, bool bad, int64_t start, int64_t end,
                            int page) {
  const int64_t pool_end = s.cold < s.len ? s.cold : s.len;
  const int64_t limit = end < pool_end ? end : pool_end;
  const int64_t last = bad ? 0 : (limit + page - 1) / page;  // pages [start / page, last)
  const int32_t* ids = v.block_table + int64_t(b) * v.max_pages_per_seq;
  constexpr int kIds = 8;
  bool ok = !bad;
  for (int64_t p0 = start / page + threadIdx.x; p0 < last; p0 += kIds * int64_t(blockDim.x)) {
    int32_t id[kIds];
    KVQ_UNROLL
    for (int j = 0; j < kIds; ++j) id[j] = p0 + j * blockDim.x < last ? ids[p0 + j * blockDim.x] : 0;
    KVQ_UNROLL
    for (int j = 0; j < kIds; ++j) ok &= p0 + j * blockDim.x >= last || page_in_pool(v, id[j]);
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace detail
KVQ_NAMESPACE_END

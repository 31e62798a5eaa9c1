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

// CTA-wide: the sequence is valid and every pool page id of [start, end) is in the pool.
template <class T>
__device__ bool pages_valid(const CacheView<T>& v, int b, const SeqAttention& s, bool bad, int64_t start, int64_t end,
                            int page) {
  const int64_t pool_end = s.cold < s.len ? s.cold : s.len;
  const int64_t limit = end < pool_end ? end : pool_end;
  bool ok = !bad;
  for (int64_t pg = start / page + threadIdx.x; ok && pg * page < limit; pg += blockDim.x) {
    const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + pg];
    ok = page_in_pool(v, id);
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/append/rollback.cuh - the device side of speculative-decoding rollback (rule in
// kvq/cache/rollback.hpp): one tiny launch for a batch, no host synchronisation, capturable.
//
//   kvq::rollback(len, cold, new_len, batch, flags, stream)
//     len     [batch] device, the engine's prefix lengths, updated in place
//     cold    [batch] device, cold lengths (unchanged)
//     new_len [batch] device, accepted length per sequence; a negative entry leaves it as is
//   A sequence whose new length is below its cold length or above its length keeps its length
//   and sets kFlagBadSequence in *flags. The hot ring rows past the new length are simply
//   overwritten by the next append; the block table needs no change (no page turned cold past
//   the new length, since new_len >= cold).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/cache/rollback.hpp"
#include "kvq/core/launch.cuh"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <int Unused = 0>
__global__ void KVQ_HIDDEN rollback_kernel(int32_t* len, const int32_t* cold, const int32_t* new_len, int batch,
                                           uint32_t* flags) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch || new_len[b] < 0) return;
  if (check_rollback(len[b], cold[b], new_len[b]) == Status::kSuccess)
    len[b] = new_len[b];
  else
    atomicOr(flags, uint32_t(kFlagBadSequence));
}

}  // namespace detail

inline Status rollback(int32_t* len, const int32_t* cold, const int32_t* new_len, int batch, uint32_t* flags,
                       cudaStream_t stream) {
  if (batch < 0) return Status::kInvalidShape;
  if (batch == 0) return Status::kSuccess;
  if (!len || !cold || !new_len || !flags) return Status::kNullPointer;
  return detail::launch(detail::rollback_kernel<>, dim3(unsigned((batch + 127) / 128)), dim3(128), 0, stream, len, cold, new_len,
                        batch, flags);
}

KVQ_NAMESPACE_END

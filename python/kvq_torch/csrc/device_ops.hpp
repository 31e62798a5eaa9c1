// device_ops.hpp - kvq_torch's own device work beside kvq's kernels (plain pointers, no torch or
// CUDA header; defined in device_ops.cu).
#pragma once

#include <cstdint>

#include <kvq/core/cuda_fwd.hpp>
#include <kvq/core/status.hpp>

#include "host_ops.hpp"

namespace kvq_torch {

// After a step's append, on the device: len[b] += cu_new[b+1] - cu_new[b] and
// cold[b] = kvq::cold_after(len_new, cold[b], residual, page), for every sequence of the batch (the
// host-side rule of kvq/cache/window.hpp), so a captured step can advance its own lengths. No
// synchronisation. kCudaError (kvq::last_cuda_error() has the error) when the launch fails.
kvq::Status advance_lengths(int32_t* len, int32_t* cold, const int32_t* cu_new, int batch, int residual, int page,
                            cudaStream_t stream);

// kvq::rollback (kvq/append/rollback.cuh): len[b] = new_len[b] where legal, else kFlagBadSequence.
kvq::Status rollback_lengths(int32_t* len, const int32_t* cold, const int32_t* new_len, int batch, uint32_t* flags,
                             cudaStream_t stream);

// kvq::rotate_heads<T, D> (kvq/rotation/rotate.cuh) of n head vectors of D values in place on
// `stream`: the same bits as cpu_rotate. kConfigMismatch for D other than 64, 128, 256.
kvq::Status rotate_heads(void* x, RotateDType dtype, int D, int64_t n, uint64_t seed, bool inverse, cudaStream_t stream);

}  // namespace kvq_torch

// device_ops.cu - see device_ops.hpp. Includes kvq and the CUDA runtime only (never torch).
#include "device_ops.hpp"

#include <cuda_runtime.h>

#include <kvq/append/rollback.cuh>
#include <kvq/cache/window.hpp>
#include <kvq/core/launch.cuh>

namespace kvq_torch {
namespace {

__global__ void advance_kernel(int32_t* len, int32_t* cold, const int32_t* cu_new, int batch, int residual, int page) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int64_t n = int64_t(cu_new[b + 1]) - cu_new[b];
  const int64_t l = int64_t(len[b]) + n;
  cold[b] = int32_t(kvq::cold_after(l, cold[b], residual, page));
  len[b] = int32_t(l);
}

}  // namespace

kvq::Status advance_lengths(int32_t* len, int32_t* cold, const int32_t* cu_new, int batch, int residual, int page,
                            cudaStream_t stream) {
  if (batch <= 0) return kvq::Status::kSuccess;
  return kvq::detail::launch(advance_kernel, dim3(unsigned((batch + 127) / 128)), dim3(128), 0, stream, len, cold, cu_new,
                             batch, residual, page);
}

kvq::Status rollback_lengths(int32_t* len, const int32_t* cold, const int32_t* new_len, int batch, uint32_t* flags,
                             cudaStream_t stream) {
  return kvq::rollback(len, cold, new_len, batch, flags, stream);
}

}  // namespace kvq_torch

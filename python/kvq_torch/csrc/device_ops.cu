// device_ops.cu - see device_ops.hpp. Includes kvq and the CUDA runtime only (never torch).
#include "device_ops.hpp"

#include <cuda_runtime.h>

#include <kvq/append/rollback.cuh>
#include <kvq/cache/window.hpp>
#include <kvq/core/launch.cuh>
#include <kvq/numeric/dtype.hpp>
#include <kvq/rotation/rotate.cuh>

namespace kvq_torch {

// fp32 with the model dtypes' conversions, for kvq::rotate_heads over fp32 vectors. Outside the
// anonymous namespace: a kernel's template argument needs external linkage (hidden visibility).
struct DeviceF32 {
  float x;
  static __device__ DeviceF32 from_float(float f) { return DeviceF32{f}; }
  __device__ float to_float() const { return x; }
};
static_assert(sizeof(DeviceF32) == 4, "DeviceF32 is a float");

namespace {

__global__ void advance_kernel(int32_t* len, int32_t* cold, const int32_t* cu_new, int batch, int residual, int page) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int64_t n = int64_t(cu_new[b + 1]) - cu_new[b];
  const int64_t l = int64_t(len[b]) + n;
  cold[b] = int32_t(kvq::cold_after(l, cold[b], residual, page));
  len[b] = int32_t(l);
}


template <class T>
kvq::Status rotate_typed(void* x, int D, int64_t n, uint64_t seed, bool inverse, cudaStream_t stream) {
  T* p = static_cast<T*>(x);
  switch (D) {
    case 64: return kvq::rotate_heads<T, 64>(p, n, seed, inverse, stream);
    case 128: return kvq::rotate_heads<T, 128>(p, n, seed, inverse, stream);
    case 256: return kvq::rotate_heads<T, 256>(p, n, seed, inverse, stream);
    default: return kvq::Status::kConfigMismatch;
  }
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

kvq::Status rotate_heads(void* x, RotateDType dtype, int D, int64_t n, uint64_t seed, bool inverse, cudaStream_t stream) {
  switch (dtype) {
    case RotateDType::kF32: return rotate_typed<DeviceF32>(x, D, n, seed, inverse, stream);
    case RotateDType::kBF16: return rotate_typed<kvq::bf16>(x, D, n, seed, inverse, stream);
    case RotateDType::kFP16: return rotate_typed<kvq::fp16>(x, D, n, seed, inverse, stream);
  }
  return kvq::Status::kConfigMismatch;
}

}  // namespace kvq_torch

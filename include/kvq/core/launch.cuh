// kvq/core/launch.cuh - how kvq's launchers launch kernels and report CUDA errors (host code).
//
// A launcher reports only its own failures: every kernel goes through cudaLaunchKernelEx, which
// returns that launch's error, and every CUDA runtime result is checked where it is returned.
// kvq never calls cudaGetLastError / cudaPeekAtLastError (nor cudaFuncSetAttribute where it need
// not: allow_dynamic_smem below): after `kernel<<<...>>>` they return the
// last error of ANY earlier runtime call on the thread, so an error the engine caused before the
// kvq call would be blamed on kvq, and cudaGetLastError would also clear it for the engine.
// A failure becomes Status::kCudaError with its cudaError_t kept for kvq::last_cuda_error()
// (core/status.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kvq/core/dependent_launch.cuh"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// kSuccess for cudaSuccess; otherwise kCudaError, with `e` kept for last_cuda_error().
inline Status cuda_status(cudaError_t e) {
  if (e == cudaSuccess) return Status::kSuccess;
  cuda_error_slot() = static_cast<int>(e);
  return Status::kCudaError;
}

// The same as a test, for chains of queries: `if (!cuda_ok(a) || !cuda_ok(b)) return Status::kCudaError;`.
inline bool cuda_ok(cudaError_t e) { return cuda_status(e) == Status::kSuccess; }

// Lets `kernel` use `bytes` of dynamic shared memory: cudaFuncSetAttribute only where its current
// limit (cudaFuncGetAttributes) is lower, so once per kernel and process. The CUDA runtime clears
// a pending error of the calling thread inside cudaFuncSetAttribute (CUDA 13 on an H100: an
// engine's failed launch before it is then lost), which the query does not; so an engine's error
// survives every kvq call except the first one that raises a kernel's limit (in practice the first
// plan or launch of a configuration). `attr`, when given, receives the kernel's attributes.
template <class Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, size_t bytes, cudaFuncAttributes* attr = nullptr) {
  cudaFuncAttributes own{};
  cudaFuncAttributes& a = attr ? *attr : own;
  const cudaError_t e = cudaFuncGetAttributes(&a, kernel);
  if (e != cudaSuccess || size_t(a.maxDynamicSharedSizeBytes) >= bytes) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// kernel<<<grid, block, smem, stream>>>(args...), returning the launch's own status (an ordinary
// launch: launch_dependent without the attribute).
template <class... Params, class... Args>
Status launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  return cuda_status(launch_dependent(kernel, false, grid, block, smem, stream, std::forward<Args>(args)...));
}

}  // namespace detail
KVQ_NAMESPACE_END

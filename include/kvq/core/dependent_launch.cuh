// kvq/core/dependent_launch.cuh - programmatic dependent launch (compute capability 9.0+): a kernel
// launched with it may start while the kernel before it in the stream still runs, once every CTA
// of that kernel has called launch_dependents() (or exited).
//
// kvq's decode chains its launches this way (decode_impl.cuh): transition -> records -> tail ->
// merge. A dependent kernel calls wait_prior_grids() before it reads what the earlier kernel
// writes, and on every path before it exits, so its completion implies the earlier kernel's and
// the chain stays ordered for what follows in the stream. Where the two are independent (the
// records and tail kernels) the dependent fills the multiprocessor room the earlier one leaves;
// elsewhere the dependent's launch latency and prologue overlap the earlier kernel's end. Below
// 9.0 (the device's or the kernel's compiled architecture) both device functions compile to nothing
// and launch_dependent() is an ordinary launch.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// In the earlier kernel: the dependent kernel may be scheduled (once every CTA has called this).
KVQ_DEVICE void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// In the dependent kernel: blocks until the earlier kernel has completed and its writes are
// visible (returns at once when the kernel was not launched as a dependent).
KVQ_DEVICE void wait_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether the current device takes dependent launches (host; no synchronisation).
inline bool dependent_launch_supported() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  return major >= 9;
}

// Whether a kernel can be launched as a dependent on the current device: the device takes dependent
// launches and the kernel was compiled for compute capability 9.0+ (ptxVersion, the virtual
// architecture of its code). A kernel compiled from older PTX (compute_80 JIT-compiled on a Hopper
// GPU) has no griddepcontrol instructions, so its wait_prior_grids() is empty: launched as a
// dependent it could read the earlier kernel's output too soon. It is launched the ordinary way.
// (Host queries: decode asks them once, in its plan, not at every launch.)
inline bool dependent_launch_supported(const cudaFuncAttributes& kernel) {
  return dependent_launch_supported() && kernel.ptxVersion >= 90;
}
template <class... Params>
bool dependent_launch_supported(void (*kernel)(Params...)) {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && dependent_launch_supported(attr);
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), as the dependent of the kernel before it
// in the stream where `dependent` (dependent_launch_supported(kernel), decided once by the caller),
// else as an ordinary launch. The kernel must call wait_prior_grids() before it touches what the
// earlier kernel writes.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), bool dependent, dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace detail
KVQ_NAMESPACE_END

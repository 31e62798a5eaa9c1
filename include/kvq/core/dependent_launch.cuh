// kvq/core/dependent_launch.cuh - programmatic dependent launch (compute capability 9.0+): a kernel
// launched with it may start while the kernel before it in the stream still runs, once every CTA
// of that kernel has called launch_dependents() (or exited).
//
// kvq uses it where the two kernels are independent (decode: the records kernel, then the tail
// kernel, which reads nothing the records kernel writes), so the second fills the multiprocessor
// room the first leaves. The dependent kernel calls wait_prior_grids() before it exits, on every
// path: its completion then implies the earlier kernel's, so launches after it in the stream (the
// merge) see both. Below 9.0 both device functions compile to nothing.
#pragma once

#include <cuda_runtime.h>

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

}  // namespace detail
KVQ_NAMESPACE_END

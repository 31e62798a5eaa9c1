// gpu_util.hpp - CUDA runtime helpers of the GPU backend (errors as smollm2::Error, an owning
// device buffer). Included by the backend's .cpp/.cu files only: it pulls in cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "gguf.hpp"

namespace smollm2 {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// n elements of T in device memory (cudaMalloc: 256-byte aligned); freed on destruction.
template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : n(count) {
    if (count) cuda_check(cudaMalloc(reinterpret_cast<void**>(&p), count * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(std::exchange(o.p, nullptr)), n(std::exchange(o.n, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  // Grows (contents dropped) to at least `count` elements.
  void reserve(size_t count) {
    if (count > n) *this = DeviceBuffer(count);
  }
  void upload(const T* host, size_t count, cudaStream_t stream) {
    reserve(count);
    if (count) cuda_check(cudaMemcpyAsync(p, host, count * sizeof(T), cudaMemcpyHostToDevice, stream), "upload");
  }
};

}  // namespace smollm2

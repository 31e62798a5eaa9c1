// gpu_util.hpp - CUDA runtime helpers of the GPU backend (errors as smollm2::Error, an owning
// device buffer). Included by the backend's .cpp/.cu files only: it pulls in cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gguf.hpp"
#include "model.hpp"

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

// Blocks of 256 threads for a grid-stride loop over n elements (at most 4096).
inline unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 4096)); }

// Weights in device memory as T (float, or a 16-bit type with T::from_float), copied at once.
template <class T>
DeviceBuffer<T> to_device(const std::vector<float>& h) {
  DeviceBuffer<T> d(h.size());
  if constexpr (std::is_same_v<T, float>) {
    cuda_check(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "weight upload");
  } else {
    std::vector<T> t(h.size());
    for (size_t i = 0; i < h.size(); ++i) t[i] = T::from_float(h[i]);
    cuda_check(cudaMemcpy(d.p, t.data(), t.size() * sizeof(T), cudaMemcpyHostToDevice), "weight upload");
  }
  return d;
}

// One layer's weights (read_layer_weights) on the device: the norms in fp32, the matrices as M.
// Layer: a struct with DeviceBuffer<float> attn_norm, ffn_norm and DeviceBuffer<M> qkv, wo,
// gate_up, down.
template <class Layer, class M>
Layer upload_layer(const LayerWeights& h) {
  Layer w;
  w.attn_norm = to_device<float>(h.attn_norm);
  w.ffn_norm = to_device<float>(h.ffn_norm);
  w.qkv = to_device<M>(h.qkv);
  w.wo = to_device<M>(h.wo);
  w.gate_up = to_device<M>(h.gate_up);
  w.down = to_device<M>(h.down);
  return w;
}

}  // namespace smollm2

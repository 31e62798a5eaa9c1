// Small GPU test utilities: error checks and an owning device buffer.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#define KVQ_CUDA_CHECK(expr)                                                         \
  do {                                                                               \
    const cudaError_t kvq_err_ = (expr);                                             \
    REQUIRE_MESSAGE(kvq_err_ == cudaSuccess, #expr ": " << cudaGetErrorString(kvq_err_)); \
  } while (0)

namespace kvq_test {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  explicit DeviceBuffer(const std::vector<T>& h) { upload(h); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void resize(size_t n) {
    if (n == size_) return;
    cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = n;
    if (n) KVQ_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
  }
  void upload(const std::vector<T>& h) {
    resize(h.size());
    if (!h.empty()) KVQ_CUDA_CHECK(cudaMemcpy(ptr_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(size_);
    if (size_) KVQ_CUDA_CHECK(cudaMemcpy(h.data(), ptr_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

// Index of the first differing byte of two equal-size arrays, or -1.
template <class T>
long long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  const auto* pa = reinterpret_cast<const unsigned char*>(a.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(b.data());
  const size_t n = a.size() * sizeof(T);
  if (b.size() != a.size()) return 0;
  for (size_t i = 0; i < n; ++i)
    if (pa[i] != pb[i]) return static_cast<long long>(i);
  return -1;
}

// Elements of [first, last) (model-dtype values) that are not the 0xff-byte poison the tests fill
// outputs with before a kernel runs: the ones the kernel wrote.
template <class It>
size_t count_written(It first, It last) {
  size_t n = 0;
  for (; first != last; ++first) n += first->bits != 0xffffu;
  return n;
}

}  // namespace kvq_test

// gemm.hpp - the CPU math kernels of the example: a packed fp32 weight matrix and y = x W^T,
// plus the small vector helpers the model and the attention share. GCC/Clang vector extensions
// (8 floats) keep them portable; with -march=native they become AVX2/AVX-512 FMAs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "threads.hpp"

namespace smollm2 {

typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4)));  // unaligned loads/stores

// 64-byte aligned float storage.
struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using FloatBuffer = std::unique_ptr<float[], AlignedFree>;
FloatBuffer alloc_floats(size_t n);  // zero-filled

// W [n][k] (row = one output), stored as panels of 16 outputs: [n/16][k][16].
class PackedMatrix {
 public:
  PackedMatrix() = default;
  PackedMatrix(const float* w, int n, int k);  // n must be a multiple of 16
  int rows() const { return n_; }
  int cols() const { return k_; }
  const float* panel(int p) const { return data_.get() + size_t(p) * size_t(k_) * 16; }

 private:
  int n_ = 0, k_ = 0;
  FloatBuffer data_;
};

// y[m][n] (+)= x[m][k] . W[n][k] for m < M; ldx, ldy are the row strides of x and y.
void matmul(ThreadPool& pool, const float* x, int M, int ldx, const PackedMatrix& w, float* y, int ldy,
            bool accumulate = false);

// exp(x) for x <= 0 (softmax): a Cephes-style polynomial, relative error ~2e-7; exp(-inf) = 0.
void exp_inplace(float* x, int n);

}  // namespace smollm2

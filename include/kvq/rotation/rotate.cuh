// kvq/rotation/rotate.cuh - quant/rotation.hpp's rotation on the GPU, for engines that do not fuse
// it into their own RoPE / output kernels: rotate (or unrotate) n head vectors of D model-dtype
// values in place, a warp per vector. Bit-identical to the host functions: each butterfly is the
// same single addition or subtraction of the same two fp32 values.
#pragma once

#include <cuda_runtime.h>

#include "kvq/core/launch.cuh"
#include "kvq/core/status.hpp"
#include "kvq/quant/rotation.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kRotateWarps = 8;

// Lane l holds elements l * E .. l * E + E - 1 of its vector (E = D / 32). A butterfly of stride
// len pairs element e with e ^ len: inside the lane while len < E, else with lane l ^ (len / E).
template <class T, int D>
__global__ void __launch_bounds__(32 * kRotateWarps) KVQ_HIDDEN
    rotate_kernel(T* x, int64_t n, uint64_t seed, bool inverse) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x % 32;
  const int64_t vec = int64_t(blockIdx.x) * kRotateWarps + threadIdx.x / 32;
  if (vec >= n) return;
  T* p = x + vec * D + lane * E;
  float r[E];
  for (int j = 0; j < E; ++j) r[j] = p[j].to_float();
  if (!inverse)
    for (int j = 0; j < E; ++j) r[j] = __fmul_rn(r[j], rotation_sign(seed, lane * E + j));
  for (int len = 1; len < D; len <<= 1) {
    if (len < E) {
      for (int j = 0; j < E; ++j)
        if (!(j & len)) {
          const float a = r[j], b = r[j + len];
          r[j] = __fadd_rn(a, b);
          r[j + len] = __fsub_rn(a, b);
        }
    } else {
      const bool upper = (lane * E) & len;
      for (int j = 0; j < E; ++j) {
        const float other = __shfl_xor_sync(0xffffffffu, r[j], len / E);
        r[j] = upper ? __fsub_rn(other, r[j]) : __fadd_rn(r[j], other);
      }
    }
  }
  for (int j = 0; j < E; ++j) {
    float y = __fmul_rn(r[j], rotation_scale<D>());
    if (inverse) y = __fmul_rn(y, rotation_sign(seed, lane * E + j));
    p[j] = T::from_float(y);
  }
}

}  // namespace detail

// x: n vectors of D values ([n][D], e.g. [tokens][heads][D] with n = tokens * heads), rotated
// (inverse false) or unrotated in place on `stream`; x 4-byte aligned. No host synchronisation.
template <class T, int D>
Status rotate_heads(T* x, int64_t n, uint64_t seed, bool inverse, cudaStream_t stream) {
  if (n < 0) return Status::kInvalidShape;
  if (n == 0) return Status::kSuccess;
  if (!x) return Status::kNullPointer;
  const int64_t blocks = (n + detail::kRotateWarps - 1) / detail::kRotateWarps;
  if (blocks > INT32_MAX) return Status::kInvalidShape;
  return detail::launch(detail::rotate_kernel<T, D>, dim3(unsigned(blocks)), dim3(32 * detail::kRotateWarps), 0, stream, x,
                        n, seed, inverse);
}

KVQ_NAMESPACE_END

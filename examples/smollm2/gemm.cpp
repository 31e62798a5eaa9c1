// gemm.cpp - see gemm.hpp.
#include "gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

namespace smollm2 {

FloatBuffer alloc_floats(size_t n) {
  const size_t bytes = (std::max<size_t>(n, 1) * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return FloatBuffer(static_cast<float*>(p));
}

PackedMatrix::PackedMatrix(const float* w, int n, int k) : n_(n), k_(k), data_(alloc_floats(size_t(n) * size_t(k))) {
  for (int p = 0; p < n / 16; ++p)
    for (int kk = 0; kk < k; ++kk)
      for (int c = 0; c < 16; ++c) data_[(size_t(p) * size_t(k) + size_t(kk)) * 16 + size_t(c)] = w[size_t(p * 16 + c) * size_t(k) + size_t(kk)];
}

namespace {

constexpr int kMR = 6;    // rows of x per micro-tile
constexpr int kKC = 256;  // depth block

// acc[MR][2] over kc steps of a 16-wide panel block; y tile loaded first when accumulating.
template <int MR>
void micro_tile(const float* x, int ldx, const float* wp, int kc, float* y, int ldy, bool load) {
  v8f acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    if (load) {
      acc[r][0] = *reinterpret_cast<const v8f_u*>(y + size_t(r) * size_t(ldy));
      acc[r][1] = *reinterpret_cast<const v8f_u*>(y + size_t(r) * size_t(ldy) + 8);
    } else {
      acc[r][0] = v8f{};
      acc[r][1] = v8f{};
    }
  }
  for (int k = 0; k < kc; ++k) {
    const v8f w0 = *reinterpret_cast<const v8f*>(wp + size_t(k) * 16);
    const v8f w1 = *reinterpret_cast<const v8f*>(wp + size_t(k) * 16 + 8);
    for (int r = 0; r < MR; ++r) {
      const float xv = x[size_t(r) * size_t(ldx) + size_t(k)];
      acc[r][0] += xv * w0;
      acc[r][1] += xv * w1;
    }
  }
  for (int r = 0; r < MR; ++r) {
    *reinterpret_cast<v8f_u*>(y + size_t(r) * size_t(ldy)) = acc[r][0];
    *reinterpret_cast<v8f_u*>(y + size_t(r) * size_t(ldy) + 8) = acc[r][1];
  }
}

void tile_rows(const float* x, int rows, int ldx, const float* wp, int kc, float* y, int ldy, bool load) {
  switch (rows) {
    case 1: micro_tile<1>(x, ldx, wp, kc, y, ldy, load); break;
    case 2: micro_tile<2>(x, ldx, wp, kc, y, ldy, load); break;
    case 3: micro_tile<3>(x, ldx, wp, kc, y, ldy, load); break;
    case 4: micro_tile<4>(x, ldx, wp, kc, y, ldy, load); break;
    case 5: micro_tile<5>(x, ldx, wp, kc, y, ldy, load); break;
    default: micro_tile<6>(x, ldx, wp, kc, y, ldy, load); break;
  }
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int M, int ldx, const PackedMatrix& w, float* y, int ldy, bool accumulate) {
  const int panels = w.rows() / 16, K = w.cols();
  // Tasks: groups of panels (enough of them to balance two or more threads).
  const int per_task = std::max(1, panels / (pool.size() * 8));
  const int tasks = (panels + per_task - 1) / per_task;
  pool.parallel_for(tasks, [&](int t) {
    const int p0 = t * per_task, p1 = std::min(panels, p0 + per_task);
    for (int k0 = 0; k0 < K; k0 += kKC) {
      const int kc = std::min(kKC, K - k0);
      const bool load = accumulate || k0 > 0;
      for (int p = p0; p < p1; ++p) {
        const float* wp = w.panel(p) + size_t(k0) * 16;
        for (int m0 = 0; m0 < M; m0 += kMR)
          tile_rows(x + size_t(m0) * size_t(ldx) + size_t(k0), std::min(kMR, M - m0), ldx, wp, kc,
                    y + size_t(m0) * size_t(ldy) + size_t(p) * 16, ldy, load);
      }
    }
  });
}

void exp_inplace(float* x, int n) {
  // exp(x) = 2^k * exp(r), r = x - k ln2 in [-ln2/2, ln2/2]; degree-6 polynomial for exp(r).
  for (int i = 0; i < n; ++i) {
    float v = x[i];
    v = v < -87.0f ? -87.0f : v;
    const float kf = std::floor(v * 1.44269504088896341f + 0.5f);
    const float r = (v - kf * 0.693359375f) + kf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits;
    std::memcpy(&bits, &p, 4);
    bits += int32_t(kf) << 23;
    float out;
    std::memcpy(&out, &bits, 4);
    x[i] = x[i] < -87.0f ? 0.0f : out;
  }
}

}  // namespace smollm2

// attention_cpu.cpp - see attention_cpu.hpp. Two passes over key blocks that stay in L2: scores
// (q . k for every query of the chunk), softmax per row, then probabilities x V.
#include "attention_cpu.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace smollm2 {
namespace {

constexpr int D = kHeadDim;
constexpr int64_t kBlock = 256;  // keys per block

// s[g * ls + j] = q_g . K[:, j] for j in [a, b); kt: K in 16-token tiles (attention_cpu.hpp).
template <int G>
void scores(const float* kt, int64_t a, int64_t b, const float* q, float* s, int64_t ls) {
  for (int64_t t0 = a / 16 * 16; t0 < b; t0 += 16) {
    v8f acc[G][2];
    for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = v8f{};
    const float* tile = kt + size_t(t0 / 16) * 1024;
    for (int d = 0; d < D; ++d) {
      const v8f k0 = *reinterpret_cast<const v8f*>(tile + d * 16);
      const v8f k1 = *reinterpret_cast<const v8f*>(tile + d * 16 + 8);
      for (int g = 0; g < G; ++g) {
        acc[g][0] += q[g * D + d] * k0;
        acc[g][1] += q[g * D + d] * k1;
      }
    }
    const int64_t lo = std::max(a, t0), hi = std::min(b, t0 + 16);
    for (int g = 0; g < G; ++g) {
      if (lo == t0 && hi == t0 + 16) {
        *reinterpret_cast<v8f_u*>(s + g * ls + t0) = acc[g][0];
        *reinterpret_cast<v8f_u*>(s + g * ls + t0 + 8) = acc[g][1];
      } else {
        float tmp[16];
        std::memcpy(tmp, &acc[g][0], 32);
        std::memcpy(tmp + 8, &acc[g][1], 32);
        std::memcpy(s + g * ls + lo, tmp + (lo - t0), size_t(hi - lo) * 4);
      }
    }
  }
}

// o[g][:] += sum_j p[g * ls + j] * V[j][:] for j in [a, b); v row-major [cap][64].
template <int G>
void weighted_values(const float* v, int64_t a, int64_t b, const float* p, int64_t ls, float* o) {
  for (int half = 0; half < 2; ++half) {
    v8f acc[G][4];
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < 4; ++c) acc[g][c] = *reinterpret_cast<const v8f_u*>(o + g * D + half * 32 + c * 8);
    for (int64_t j = a; j < b; ++j) {
      const float* row = v + j * D + half * 32;
      const v8f v0 = *reinterpret_cast<const v8f_u*>(row), v1 = *reinterpret_cast<const v8f_u*>(row + 8);
      const v8f v2 = *reinterpret_cast<const v8f_u*>(row + 16), v3 = *reinterpret_cast<const v8f_u*>(row + 24);
      for (int g = 0; g < G; ++g) {
        const float w = p[g * ls + j];
        acc[g][0] += w * v0;
        acc[g][1] += w * v1;
        acc[g][2] += w * v2;
        acc[g][3] += w * v3;
      }
    }
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < 4; ++c) *reinterpret_cast<v8f_u*>(o + g * D + half * 32 + c * 8) = acc[g][c];
  }
}

template <int G>
void attend(const HeadMirror& m, int64_t len, int n, const int64_t* cold, const float* q, int64_t q_stride, float* out,
            int64_t out_stride) {
  const int64_t keys = len + n, ls = (keys + 15) / 16 * 16;
  thread_local std::vector<float> sbuf, obuf;
  sbuf.resize(size_t(n) * G * size_t(ls));
  obuf.assign(size_t(n) * G * D, 0.0f);
  float* s = sbuf.data();
  // Pass 1: scores, block by block of keys so that a block serves every query.
  for (int64_t j0 = 0; j0 < keys; j0 += kBlock) {
    const int64_t j1 = std::min(keys, j0 + kBlock);
    for (int i = 0; i < n; ++i) {
      const int64_t end = std::min(j1, len + i + 1), c = cold[i];
      float* si = s + size_t(i) * G * size_t(ls);
      if (j0 < std::min(end, c)) scores<G>(m.kq_t, j0, std::min(end, c), q + i * q_stride, si, ls);
      if (std::max(j0, c) < end) scores<G>(m.kr_t, std::max(j0, c), end, q + i * q_stride, si, ls);
    }
  }
  // Softmax of each row over its keys [0, len + i].
  std::vector<float> inv(size_t(n) * G);
  for (int i = 0; i < n; ++i)
    for (int g = 0; g < G; ++g) {
      float* row = s + (size_t(i) * G + size_t(g)) * size_t(ls);
      const int64_t cnt = len + i + 1;
      float mx = row[0];
      for (int64_t j = 1; j < cnt; ++j) mx = std::max(mx, row[j]);
      for (int64_t j = 0; j < cnt; ++j) row[j] -= mx;
      exp_inplace(row, int(cnt));
      float sum = 0.0f;
      for (int64_t j = 0; j < cnt; ++j) sum += row[j];
      inv[size_t(i) * G + size_t(g)] = 1.0f / sum;
    }
  // Pass 2: probabilities x values.
  for (int64_t j0 = 0; j0 < keys; j0 += kBlock) {
    const int64_t j1 = std::min(keys, j0 + kBlock);
    for (int i = 0; i < n; ++i) {
      const int64_t end = std::min(j1, len + i + 1), c = cold[i];
      const float* si = s + size_t(i) * G * size_t(ls);
      float* oi = obuf.data() + size_t(i) * G * D;
      if (j0 < std::min(end, c)) weighted_values<G>(m.vq, j0, std::min(end, c), si, ls, oi);
      if (std::max(j0, c) < end) weighted_values<G>(m.vr, std::max(j0, c), end, si, ls, oi);
    }
  }
  for (int i = 0; i < n; ++i)
    for (int g = 0; g < G; ++g)
      for (int d = 0; d < D; ++d)
        out[i * out_stride + g * D + d] = obuf[(size_t(i) * G + size_t(g)) * D + size_t(d)] * inv[size_t(i) * G + size_t(g)];
}

}  // namespace

void attend_head(const HeadMirror& m, int64_t len, int n, const int64_t* cold, int group, const float* q,
                 int64_t q_stride, float* out, int64_t out_stride) {
  switch (group) {
    case 1: attend<1>(m, len, n, cold, q, q_stride, out, out_stride); break;
    case 2: attend<2>(m, len, n, cold, q, q_stride, out, out_stride); break;
    case 3: attend<3>(m, len, n, cold, q, q_stride, out, out_stride); break;
    case 4: attend<4>(m, len, n, cold, q, q_stride, out, out_stride); break;
    default: break;
  }
}

}  // namespace smollm2

// rotation.cpp - see rotation.hpp.
#include "rotation.hpp"

#include <cstddef>

namespace smollm2 {
namespace {

// Unnormalised fast Walsh-Hadamard transform of 64 elements (H is symmetric, H H = 64 I).
void fwht64(float* x) {
  for (int len = 1; len < 64; len <<= 1)
    for (int i = 0; i < 64; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

}  // namespace

std::vector<float> rotation_signs(int layer) {
  uint64_t z = 0x9e3779b97f4a7c15ull * uint64_t(layer + 1);
  std::vector<float> s(64);
  for (int i = 0; i < 64; ++i) {
    z += 0x9e3779b97f4a7c15ull;
    uint64_t r = z;
    r = (r ^ (r >> 30)) * 0xbf58476d1ce4e5b9ull;
    r = (r ^ (r >> 27)) * 0x94d049bb133111ebull;
    r ^= r >> 31;
    s[std::size_t(i)] = (r & 1) ? -1.0f : 1.0f;
  }
  return s;
}

void rotate_head(float* x, const float* signs) {
  for (int i = 0; i < 64; ++i) x[i] *= signs[i];
  fwht64(x);
  for (int i = 0; i < 64; ++i) x[i] *= 0.125f;
}

void unrotate_head(float* x, const float* signs) {
  fwht64(x);
  for (int i = 0; i < 64; ++i) x[i] *= 0.125f * signs[i];
}

}  // namespace smollm2

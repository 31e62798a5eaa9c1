// rope.hpp - RoPE as SmolLM2's GGUF weights need it: the adjacent pairs (2i, 2i + 1) of a head
// rotate by p * base^(-2i / head_dim) at position p (GGUF permutes Llama's q/k weights for that).
// Used by the model (model.cpp's table) and by the pre-RoPE key simulation (ablation.cpp).
#pragma once

#include <cmath>
#include <cstdint>

namespace smollm2 {

// cos and sin of each pair's angle at position p: cs[2i] = cos, cs[2i + 1] = sin, i < head_dim / 2.
inline void rope_angles(float base, int head_dim, int64_t p, float* cs) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double theta = double(p) * std::pow(double(base), -2.0 * i / head_dim);
    cs[2 * i] = float(std::cos(theta));
    cs[2 * i + 1] = float(std::sin(theta));
  }
}

// Rotates the `half` pairs of v by the angles cs (rope_angles); sign -1 rotates back.
inline void rope_rotate(float* v, const float* cs, int half, float sign = 1.0f) {
  for (int i = 0; i < half; ++i) {
    const float a = v[2 * i], b = v[2 * i + 1], c = cs[2 * i], s = sign * cs[2 * i + 1];
    v[2 * i] = a * c - b * s;
    v[2 * i + 1] = a * s + b * c;
  }
}

}  // namespace smollm2

// kvq/quant/rotation.hpp - the orthonormal rotation applied to K and V before they are cached
// (docs/ACCURACY.md: with INT2 keys it halves the perplexity loss; with INT4 / INT4-keys-INT2-values
// it recovers most passkey retrievals).
//
//   rotate:    x <- H diag(s) x / sqrt(D)        unrotate: x <- diag(s) H x / sqrt(D)
//
// H is the D x D Walsh-Hadamard matrix (H H = D I) and s a sign vector drawn from a 64-bit seed
// (one seed per layer is the usual choice). The rotation is orthonormal, so rotating q and k by
// the same matrix leaves q . k unchanged, and attention over rotated v returns the rotated output,
// which unrotate() brings back: an engine rotates q, k, v after RoPE (v's rotation can be folded
// into W_v, and the unrotation into W_o) and the cache, the append and every attention kernel run
// unchanged. It spreads a few large channels over all D, which per-group min/max quantization needs.
//
// One implementation for the host and the device (kvq/rotation/rotate.cuh runs it on the GPU, a
// warp per head, with the same additions in the same order, so both give the same bits).
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

// splitmix64's output function.
KVQ_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Sign of channel i: the top bit of mix64(seed + (i + 1) * golden ratio), 1 -> -1 (its low bit
// alternates over consecutive inputs).
KVQ_HD float rotation_sign(uint64_t seed, int i) {
  return (mix64(seed + uint64_t(i + 1) * 0x9e3779b97f4a7c15ull) >> 63) ? -1.0f : 1.0f;
}

// 1 / sqrt(D) in fp32 (exact for D 64 and 256).
template <int D>
KVQ_HD_CONSTEXPR float rotation_scale() {
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  return D == 64 ? 0.125f : D == 128 ? 0.0883883461356163024902f : 0.0625f;
}

// Unnormalised Walsh-Hadamard transform of D values in place: butterflies (a + b, a - b) of
// strides 1, 2, ..., D/2.
template <int D>
KVQ_HD void walsh_hadamard(float* x) {
  for (int len = 1; len < D; len <<= 1)
    for (int i = 0; i < D; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
}

template <int D>
KVQ_HD void rotate(float* x, uint64_t seed) {
  for (int i = 0; i < D; ++i) x[i] *= rotation_sign(seed, i);
  walsh_hadamard<D>(x);
  for (int i = 0; i < D; ++i) x[i] *= rotation_scale<D>();
}

template <int D>
KVQ_HD void unrotate(float* x, uint64_t seed) {
  walsh_hadamard<D>(x);
  for (int i = 0; i < D; ++i) x[i] = x[i] * rotation_scale<D>() * rotation_sign(seed, i);
}

// The seed kvq's examples use for layer `layer` (any fixed choice per layer works).
KVQ_HD uint64_t layer_rotation_seed(int layer) { return mix64(0x6b7671ull + uint64_t(layer)); }

KVQ_NAMESPACE_END

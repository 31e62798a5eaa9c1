// rotation.hpp - the orthonormal rotation of q/k/v before the cache (QuaRot-style): per head,
// x -> H diag(s) x / 8 with H the 64 x 64 Walsh-Hadamard matrix and s a fixed random sign vector
// per layer. q and k get the same rotation, so q . k is unchanged; v's rotation is undone on the
// attention output (attention is linear in v). It spreads a few large channels over all 64, which
// is what per-group min/max quantization needs. Used by both backends (model.cpp, model_gpu.cu).
#pragma once

#include <cstdint>
#include <vector>

namespace smollm2 {

// 64 signs (+1 / -1) of layer `layer`, the same on every run (splitmix64 of the layer index).
std::vector<float> rotation_signs(int layer);

// In place, one 64-element head: forward x <- H diag(s) x / 8; inverse x <- diag(s) H x / 8.
void rotate_head(float* x, const float* signs);
void unrotate_head(float* x, const float* signs);

}  // namespace smollm2

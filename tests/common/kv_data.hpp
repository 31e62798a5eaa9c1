// Synthetic K/V rows like a real model's: keys with a few outlier channels (large magnitude and
// a per-channel offset, as after RoPE in Llama-style models), values roughly gaussian.
#pragma once

#include <kvq/numeric/dtype.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace kvq_test {

struct KvGenerator {
  int heads, head_dim;
  std::mt19937_64 rng;
  std::vector<float> key_scale, key_offset;  // per (head, channel)

  KvGenerator(int h, int d, uint64_t seed) : heads(h), head_dim(d), rng(seed) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, 99);
    key_scale.resize(size_t(h) * d);
    key_offset.resize(size_t(h) * d);
    for (size_t i = 0; i < key_scale.size(); ++i) {
      const bool outlier = pick(rng) < 4;  // ~4% outlier channels
      key_scale[i] = outlier ? 10.0f + 20.0f * std::fabs(n01(rng)) : 0.5f + std::fabs(n01(rng));
      key_offset[i] = outlier ? 5.0f * n01(rng) : 0.3f * n01(rng);
    }
  }

  // rows x heads x head_dim values of the model dtype T.
  template <class T>
  std::vector<T> keys(int64_t rows) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::vector<T> out(size_t(rows) * heads * head_dim);
    for (size_t i = 0; i < out.size(); ++i) {
      const size_t hc = i % key_scale.size();
      out[i] = T::from_float(key_offset[hc] + key_scale[hc] * n01(rng));
    }
    return out;
  }
  template <class T>
  std::vector<T> values(int64_t rows) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::vector<T> out(size_t(rows) * heads * head_dim);
    for (auto& x : out) x = T::from_float(n01(rng));
    return out;
  }
  // Plants NaN, +-Inf and values beyond the fp16 range (bf16 only) at a few random places.
  template <class T>
  void poison(std::vector<T>& data, int count) {
    if (data.empty()) return;
    std::uniform_int_distribution<size_t> where(0, data.size() - 1);
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), 1.0e6f, -3.0e5f};
    for (int i = 0; i < count; ++i) data[where(rng)] = T::from_float(specials[i % 5]);
  }
};

}  // namespace kvq_test

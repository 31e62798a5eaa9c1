// kvq::rotate_heads (rotation/rotate.cuh) against the host functions of quant/rotation.hpp: the
// same bits, for every head dim, both directions, bf16 and fp16.
#include <kvq/numeric/dtype.hpp>
#include <kvq/rotation/rotate.cuh>

#include <cmath>
#include <random>

#include "gpu_util.cuh"

namespace {

template <class T, int D>
void check_rotation(bool inverse) {
  const int64_t n = 1000;  // not a multiple of the block's 8 warps
  const uint64_t seed = kvq::layer_rotation_seed(7);
  std::mt19937 rng(uint32_t(D * 2 + inverse));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<T> x(size_t(n) * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = T::from_float(dist(rng) * (i % D == 5 ? 40.0f : 1.0f));  // an outlier channel
  std::vector<T> want = x;
  for (int64_t r = 0; r < n; ++r) {
    float f[D];
    for (int e = 0; e < D; ++e) f[e] = x[size_t(r) * D + e].to_float();
    if (inverse)
      kvq::unrotate<D>(f, seed);
    else
      kvq::rotate<D>(f, seed);
    for (int e = 0; e < D; ++e) want[size_t(r) * D + e] = T::from_float(f[e]);
  }
  kvq_test::DeviceBuffer<T> d(x);
  REQUIRE(kvq::rotate_heads<T, D>(d.get(), n, seed, inverse, nullptr) == kvq::Status::kSuccess);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(kvq_test::first_difference(d.download(), want) == -1);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("rotate_heads: device rotation equals the host rotation bit for bit") {
    check_rotation<kvq::bf16, 64>(false);
    check_rotation<kvq::bf16, 64>(true);
    check_rotation<kvq::bf16, 128>(false);
    check_rotation<kvq::bf16, 128>(true);
    check_rotation<kvq::fp16, 256>(false);
    check_rotation<kvq::fp16, 256>(true);
  }
  TEST_CASE("rotate_heads: bad arguments return a status and launch nothing") {
    CHECK(kvq::rotate_heads<kvq::bf16, 128>(nullptr, 4, 1, false, nullptr) == kvq::Status::kNullPointer);
    CHECK(kvq::rotate_heads<kvq::bf16, 128>(nullptr, -1, 1, false, nullptr) == kvq::Status::kInvalidShape);
    CHECK(kvq::rotate_heads<kvq::bf16, 128>(nullptr, 0, 1, false, nullptr) == kvq::Status::kSuccess);
  }
}

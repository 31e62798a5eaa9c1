// quant/rotation.hpp: orthonormal (unrotate inverts rotate, norms and dot products kept), and the
// property kvq relies on: attention over rotated q, k, v, unrotated, equals attention over the
// originals.
#include <doctest/doctest.h>
#include <kvq/quant/rotation.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace {

template <int D>
void check_orthonormal() {
  std::mt19937 rng(D);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int trial = 0; trial < 20; ++trial) {
    const uint64_t seed = kvq::layer_rotation_seed(trial);
    float a[D], b[D], ra[D], rb[D];
    double dot = 0, norm = 0;
    for (int i = 0; i < D; ++i) {
      a[i] = ra[i] = dist(rng) * (i == 3 ? 30.0f : 1.0f);
      b[i] = rb[i] = dist(rng);
      dot += double(a[i]) * b[i];
      norm += double(a[i]) * a[i];
    }
    kvq::rotate<D>(ra, seed);
    kvq::rotate<D>(rb, seed);
    double rdot = 0, rnorm = 0, peak = 0;
    for (int i = 0; i < D; ++i) {
      rdot += double(ra[i]) * rb[i];
      rnorm += double(ra[i]) * ra[i];
      peak = std::fmax(peak, std::fabs(ra[i]));
    }
    CHECK(rdot == doctest::Approx(dot).epsilon(1e-4).scale(std::sqrt(norm)));
    CHECK(rnorm == doctest::Approx(norm).epsilon(1e-5));
    CHECK(peak < 0.5 * std::sqrt(norm));  // the outlier channel is spread over all D
    kvq::unrotate<D>(ra, seed);
    for (int i = 0; i < D; ++i) CHECK(ra[i] == doctest::Approx(a[i]).epsilon(1e-5).scale(30.0));
  }
}

}  // namespace

TEST_CASE("rotation: orthonormal for D 64, 128, 256, and it spreads an outlier channel") {
  check_orthonormal<64>();
  check_orthonormal<128>();
  check_orthonormal<256>();
}

TEST_CASE("rotation: signs depend on the seed, and seed 0's first signs are fixed") {
  int differ = 0;
  for (int i = 0; i < 128; ++i) differ += kvq::rotation_sign(1, i) != kvq::rotation_sign(2, i);
  CHECK(differ > 32);
  // The signs are part of what an engine may persist with a cache (prefix caching across
  // processes): pin a few so that a change of generator is caught.
  const float want[8] = {-1, 1, 1, -1, 1, 1, 1, -1};
  for (int i = 0; i < 8; ++i) CHECK(kvq::rotation_sign(0, i) == want[i]);
  // Layers' sign vectors are not shifted copies of each other.
  int same = 0;
  for (int i = 0; i + 1 < 128; ++i)
    same += kvq::rotation_sign(kvq::layer_rotation_seed(1), i) == kvq::rotation_sign(kvq::layer_rotation_seed(0), i + 1);
  CHECK(same < 96);
}

TEST_CASE("rotation: attention over rotated q, k, v, unrotated, equals attention over the originals") {
  constexpr int D = 128, N = 50;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const uint64_t seed = kvq::layer_rotation_seed(3);
  std::vector<float> k(N * D), v(N * D), q(D);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  for (float& x : q) x = dist(rng) * 0.1f;
  auto attend = [&](const std::vector<float>& qq, const std::vector<float>& kk, const std::vector<float>& vv) {
    std::vector<double> p(N), out(D, 0.0);
    double mx = -1e300, sum = 0;
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int c = 0; c < D; ++c) s += double(qq[c]) * kk[j * D + c];
      p[j] = s;
      mx = std::fmax(mx, s);
    }
    for (int j = 0; j < N; ++j) sum += p[j] = std::exp(p[j] - mx);
    for (int j = 0; j < N; ++j)
      for (int c = 0; c < D; ++c) out[c] += p[j] / sum * vv[j * D + c];
    return out;
  };
  const std::vector<double> want = attend(q, k, v);
  std::vector<float> rq = q, rk = k, rv = v;
  kvq::rotate<D>(rq.data(), seed);
  for (int j = 0; j < N; ++j) {
    kvq::rotate<D>(rk.data() + j * D, seed);
    kvq::rotate<D>(rv.data() + j * D, seed);
  }
  const std::vector<double> got_rot = attend(rq, rk, rv);
  std::vector<float> got(got_rot.begin(), got_rot.end());
  kvq::unrotate<D>(got.data(), seed);
  for (int c = 0; c < D; ++c) CHECK(got[c] == doctest::Approx(want[c]).epsilon(1e-5).scale(1.0));
}

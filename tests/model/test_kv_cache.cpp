// One layer of the engine's KV cache on random K/V (no model): the decode path, fed in chunks,
// against kvq::reference::attention fed one token at a time. The cache bytes are identical, so
// only float summation order (and the softmax's exp) may differ.
#include <cmath>
#include <random>
#include <vector>

#include "kv_cache.hpp"
#include "test_support.hpp"

using namespace smollm2;
using namespace smollm2_test;

namespace {

std::vector<float> run(const CacheSpec& s, const std::vector<kvq::bf16>& q, const std::vector<kvq::bf16>& k,
                       const std::vector<kvq::bf16>& v, int tokens, int chunk) {
  constexpr int kv_heads = 3, q_heads = 9, D = 64;
  ThreadPool pool(2);
  auto cache = make_kv_cache(s, 1, kv_heads, D, 2, tokens);
  std::vector<float> out(size_t(tokens) * q_heads * D);
  for (int t = 0; t < tokens; t += chunk) {
    const int n = std::min(chunk, tokens - t);
    // Sequence 1 gets the same tokens as sequence 0, in the same step (a batch of two).
    std::vector<kvq::bf16> q2, k2, v2;
    for (int rep = 0; rep < 2; ++rep) {
      q2.insert(q2.end(), q.begin() + long(t) * q_heads * D, q.begin() + long(t + n) * q_heads * D);
      k2.insert(k2.end(), k.begin() + long(t) * kv_heads * D, k.begin() + long(t + n) * kv_heads * D);
      v2.insert(v2.end(), v.begin() + long(t) * kv_heads * D, v.begin() + long(t + n) * kv_heads * D);
    }
    std::vector<float> o(size_t(2 * n) * q_heads * D);
    cache->step(pool, 0, {SeqRows{0, 0, n}, SeqRows{1, n, n}}, q_heads, q2.data(), k2.data(), v2.data(), o.data());
    bool same = true;
    for (size_t e = 0; e < size_t(n) * q_heads * D; ++e) {
      same = same && o[e] == o[size_t(n) * q_heads * D + e];
      out[size_t(t) * q_heads * D + e] = o[e];
    }
    REQUIRE(same);  // the two sequences of the batch are independent
  }
  return out;
}

}  // namespace

TEST_CASE("decode path equals token-by-token kvq::reference::attention on random K/V") {
  constexpr int tokens = 333, kv_heads = 3, q_heads = 9, D = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<kvq::bf16> q(size_t(tokens) * q_heads * D), k(size_t(tokens) * kv_heads * D), v(k.size());
  for (auto& x : q) x = kvq::bf16::from_float(n01(rng));
  for (size_t i = 0; i < k.size(); ++i) {
    const int c = int(i % D);
    k[i] = kvq::bf16::from_float(n01(rng) * (c % 16 == 3 ? 12.0f : 1.5f) + (c == 5 ? 4.0f : 0.0f));  // outlier channels
    v[i] = kvq::bf16::from_float(n01(rng));
  }
  double overall = 0.0;
  for (const char* format : {"none", "int8", "int4", "int2", "k4v2"})
    for (int residual : {0, 32, 64})
      for (int page : {16, 32}) {
        CAPTURE(format);
        CAPTURE(residual);
        CAPTURE(page);
        const CacheSpec dec = spec(format, residual, page, 16, 32);
        CacheSpec ref = dec;
        ref.path = AttentionPath::kReference;
        const std::vector<float> a = run(dec, q, k, v, tokens, 37), b = run(ref, q, k, v, tokens, 1);
        double worst = 0.0;
        for (size_t e = 0; e < a.size(); ++e) worst = std::max(worst, double(std::fabs(a[e] - b[e])));
        CHECK(worst < 2e-5);
        overall = std::max(overall, worst);
      }
  MESSAGE("largest difference in any attention output: " << overall);
}

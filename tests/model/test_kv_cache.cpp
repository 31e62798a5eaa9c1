// One layer of the engine's KV cache on random K/V (no model): the decode path, fed in chunks,
// against kvq::reference::attention fed one token at a time, and against the calls of
// attention_calls() (the GPU cache's schedule) run through kvq's host reference. The cache bytes
// are identical, so only float summation order (and the softmax's exp) may differ.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kv_cache.hpp"
#include "kv_cache_configs.hpp"
#include "test_support.hpp"

using namespace smollm2;
using namespace smollm2_test;

namespace {

// The layer both tests run: 333 tokens, 9 query heads over 3 KV heads of 64 elements.
constexpr int tokens = 333, kv_heads = 3, q_heads = 9, D = 64;

// Random rows [token][head][D] of one layer; the keys have outlier channels (every 16th channel
// from 3 with 8x the spread, channel 5 offset by 4).
struct RandomLayer {
  std::vector<kvq::bf16> q, k, v;
  explicit RandomLayer(unsigned seed) : q(size_t(tokens) * q_heads * D), k(size_t(tokens) * kv_heads * D), v(k.size()) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    for (auto& x : q) x = kvq::bf16::from_float(n01(rng));
    for (size_t i = 0; i < k.size(); ++i) {
      const int c = int(i % D);
      k[i] = kvq::bf16::from_float(n01(rng) * (c % 16 == 3 ? 12.0f : 1.5f) + (c == 5 ? 4.0f : 0.0f));
      v[i] = kvq::bf16::from_float(n01(rng));
    }
  }
};

// For every format x residual x page: the layer run two ways, `a(spec)` and `b(spec)`, gives
// outputs within 2e-5 of each other in every element.
template <class A, class B>
void check_paths_agree(A a, B b) {
  double overall = 0.0;
  for (const char* format : {"none", "int8", "int4", "int2", "k4v2"})
    for (int residual : {0, 32, 64})
      for (int page : {16, 32}) {
        CAPTURE(format);
        CAPTURE(residual);
        CAPTURE(page);
        const CacheSpec s = spec(format, residual, page, 16, 32);
        const std::vector<float> x = a(s), y = b(s);
        REQUIRE(x.size() == y.size());
        double worst = 0.0;
        for (size_t e = 0; e < x.size(); ++e) worst = std::max(worst, double(std::fabs(x[e] - y[e])));
        CHECK(worst < 2e-5);
        overall = std::max(overall, worst);
      }
  MESSAGE("largest difference in any attention output: " << overall);
}

// The decode path of the engine's cache, fed `chunk` tokens a step.
std::vector<float> run(const CacheSpec& s, const RandomLayer& l, int chunk) {
  const std::vector<kvq::bf16>&q = l.q, &k = l.k, &v = l.v;
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
  const RandomLayer layer(7);
  check_paths_agree([&](const CacheSpec& s) { return run(s, layer, 37); },
                    [&](const CacheSpec& s) {
                      CacheSpec ref = s;
                      ref.path = AttentionPath::kReference;
                      return run(ref, layer, 1);
                    });
}

namespace {

// The decode path through kvq's attention contract: the calls of attention_calls() (what the GPU
// cache launches), each an append then kvq::reference::attention with the cold length after it.
template <class Cfg>
std::vector<float> run_calls(const CacheSpec& s, const RandomLayer& l, int chunk) {
  const std::vector<kvq::bf16>&q = l.q, &k = l.k, &v = l.v;
  const int pages_per_seq = (tokens + Cfg::page - 1) / Cfg::page;
  kvq::reference::HostCache<Cfg> c(kv_heads, pages_per_seq, 1, s.residual, pages_per_seq, 1);
  std::vector<float> out(size_t(tokens) * q_heads * D);
  size_t calls_made = 0;
  for (int t = 0; t < tokens; t += chunk) {
    const int n = std::min(chunk, tokens - t);
    const std::vector<AttentionCall> calls =
        attention_calls(s.path, s.residual, Cfg::page, {SeqRows{0, t, n}}, {c.len[0]}, {c.cold_len[0]});
    calls_made += calls.size();
    for (const AttentionCall& call : calls) {
      REQUIRE(call.len == c.len[0]);
      REQUIRE(call.cold == c.cold_len[0]);
      REQUIRE(c.reserve(0, call.count));
      const int32_t cu[2] = {0, call.count};
      kvq::AppendBatch<kvq::bf16> a;
      a.batch = 1;
      a.lengths = kvq::SeqLengths{c.len.data(), c.cold_len.data()};
      a.cu_new = cu;
      a.new_k = k.data() + size_t(call.row) * kv_heads * D;
      a.new_v = v.data() + size_t(call.row) * kv_heads * D;
      uint32_t flags = 0;
      REQUIRE(kvq::reference::append<Cfg>(c.view(), a, &flags) == kvq::Status::kSuccess);
      c.commit(0, call.count);
      REQUIRE(c.cold_len[0] == call.cold_after);
      const int32_t len = call.len, cold = call.cold_after;
      kvq::AttentionBatch<kvq::bf16> at;
      at.batch = 1;
      at.num_q_heads = q_heads;
      at.lengths = kvq::SeqLengths{&len, &cold};
      at.cu_q = cu;
      at.q = q.data() + size_t(call.row) * q_heads * D;
      at.new_k = a.new_k;
      at.new_v = a.new_v;
      at.softmax_scale = 0.125f;
      REQUIRE(kvq::reference::attention<Cfg>(c.view(), at, out.data() + size_t(call.row) * q_heads * D) ==
              kvq::Status::kSuccess);
    }
  }
  // Runs of at most P tokens once the window is full: more calls than chunks.
  CHECK(calls_made > size_t((tokens + chunk - 1) / chunk));
  return out;
}

}  // namespace

TEST_CASE("attention_calls: kvq's attention contract, called per run, equals the decode path") {
  const RandomLayer layer(11);
  check_paths_agree([&](const CacheSpec& s) { return run(s, layer, 37); },
                    [&](const CacheSpec& s) {
                      std::vector<float> out;
                      const auto body = [&](auto tag) {
                        out = run_calls<typename decltype(tag)::type>(s, layer, 37);
                        return kvq::Status::kSuccess;
                      };
                      REQUIRE((s.page == 16 ? kvq::dispatch(ConfigsP16{}, config_key(s), body)
                                            : kvq::dispatch(ConfigsP32{}, config_key(s), body)) == kvq::Status::kSuccess);
                      return out;
                    });
}

TEST_CASE("mixed formats (--mix): each layer equals a cache of its own format; save / restore and sizes span both parts") {
  constexpr int layers = 4, chunk = 45;
  CacheSpec s = spec("int2", 32, 16, 16, 32);
  parse_mix(s, "k4v2:1,3");
  parse_mix(s, "int4:2");
  REQUIRE(s.mix.size() == 2);
  REQUIRE(s.mix[0].layers == std::vector<int>{1, 3});
  CHECK(s.format_of(0) == "int2");
  CHECK(s.format_of(2) == "int4");
  CHECK(s.format_of(3) == "k4v2");
  CHECK(describe_mix(s) == " mix=k4v2:1,3 mix=int4:2");
  std::vector<RandomLayer> data;
  for (int l = 0; l < layers; ++l) data.emplace_back(unsigned(20 + l));
  ThreadPool pool(2);
  auto mixed = make_kv_cache(s, layers, kv_heads, D, 1, tokens);
  std::vector<std::unique_ptr<KvCache>> single;
  size_t bytes = 0;
  for (int l = 0; l < layers; ++l) {
    single.push_back(make_kv_cache(s.layer_spec(l), 1, kv_heads, D, 1, tokens));
    bytes += single.back()->cold_bytes_per_token();
  }
  CHECK(mixed->cold_bytes_per_token() == bytes);
  CHECK(bytes != 4 * single[0]->cold_bytes_per_token());  // the formats differ in size

  // Steps tokens [t0, t1) through every layer of both; returns whether every output is identical.
  auto steps = [&](int t0, int t1, bool step_single) {
    bool same = true;
    for (int t = t0; t < t1; t += chunk) {
      const int n = std::min(chunk, t1 - t);
      for (int l = 0; l < layers; ++l) {
        const RandomLayer& d = data[size_t(l)];
        const kvq::bf16 *q = d.q.data() + size_t(t) * q_heads * D, *k = d.k.data() + size_t(t) * kv_heads * D,
                        *v = d.v.data() + size_t(t) * kv_heads * D;
        std::vector<float> a(size_t(n) * q_heads * D), b(a.size());
        mixed->step(pool, l, {SeqRows{0, 0, n}}, q_heads, q, k, v, a.data());
        if (!step_single) continue;
        single[size_t(l)]->step(pool, 0, {SeqRows{0, 0, n}}, q_heads, q, k, v, b.data());
        same = same && a == b;
      }
    }
    return same;
  };
  CHECK(steps(0, 150, true));
  CHECK(mixed->length(0) == 150);
  const SeqState at150 = mixed->save(0);
  REQUIRE(at150.len.size() == size_t(layers));
  CHECK(steps(150, 290, false));  // pages turn cold in every layer
  mixed->restore(at150);
  CHECK(mixed->length(0) == 150);
  CHECK(steps(150, tokens, true));  // rewound: the same as the caches that never went past 150

  CacheSpec bad = spec("int2", 32, 16);
  CHECK_THROWS_AS(parse_mix(bad, "k4v2"), Error);
  CHECK_THROWS_AS(parse_mix(bad, "int3:1"), Error);
  CHECK_THROWS_AS(parse_mix(bad, "k4v2:5-3"), Error);
  CHECK_THROWS_AS(parse_mix(bad, "k4v2:x"), Error);
  parse_mix(bad, "int4:7");
  CHECK_THROWS_AS(parse_mix(bad, "k4v2:6-8"), Error);  // layer 7 is in the first --mix
  CHECK_THROWS_AS(make_kv_cache(bad, layers, kv_heads, D, 1, tokens), Error);  // layer 7 of 4
}

// ablation.hpp's simulation with no option changed is kvq's own INT-b format: the same
// dequantized values as kvq's record bytes, for every asymmetric configuration the example
// compiles at page 64 (and a sink-less page of random K/V with outlier channels). Its bit-width
// override turns one kvq format into another exactly (3 bits: kvq's Int3), and 3 bits lies between 2 and 4; the
// pre-RoPE key transform inverts what the model applies.
#include <kvq/kvq.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "ablation.hpp"
#include "model.hpp"
#include "test_support.hpp"

namespace {

// A page of random K/V with an outlier key channel and a large first token.
void random_page(int seed, std::vector<kvq::bf16>& k, std::vector<kvq::bf16>& v, std::vector<float>& kf, std::vector<float>& vf) {
  constexpr int D = 64, P = 64;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  k.resize(P * D), v.resize(P * D), kf.resize(P * D), vf.resize(P * D);
  for (int i = 0; i < P * D; ++i) {
    k[size_t(i)] = kvq::bf16::from_float(dist(rng) * (i % D == 7 ? 20.0f : 1.0f) + (i < D ? 9.0f : 0.0f));
    v[size_t(i)] = kvq::bf16::from_float(dist(rng));
    kf[size_t(i)] = k[size_t(i)].to_float();
    vf[size_t(i)] = v[size_t(i)].to_float();
  }
}

// The simulation of a cache holding format (bits_k, bits_v) under ablation a yields exactly what
// kvq's CacheConfig<..., KQ, VQ> records decode to.
template <class KQ, class VQ>
void check_simulation_is_kvq(const smollm2::Ablation& a = {}, int bits_k = KQ::bits, int bits_v = VQ::bits) {
  using Cfg = kvq::CacheConfig<kvq::bf16, 64, 64, KQ, VQ>;
  constexpr int D = 64, P = 64;
  std::vector<kvq::bf16> k, v;
  std::vector<float> kf, vf, ks(P * D), vs(P * D);
  random_page(KQ::bits * 10 + VQ::bits + KQ::group, k, v, kf, vf);
  std::vector<uint8_t> record(Cfg::record_bytes), scratch(size_t(P) * D);
  uint32_t flags = 0;
  kvq::encode_record<Cfg>([&](int t) { return k.data() + size_t(t) * D; }, [&](int t) { return v.data() + size_t(t) * D; },
                          record.data(), scratch.data(), 0, 1, [] {}, flags);
  smollm2::simulate_page(a, bits_k, KQ::group, bits_v, VQ::group, P, 0, kf.data(), vf.data(), ks.data(), vs.data());
  int differ = 0;
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) {
      differ += kvq::decode_record_element<Cfg, kvq::Role::kKey>(record.data(), t, c) != ks[size_t(t) * D + size_t(c)];
      differ += kvq::decode_record_element<Cfg, kvq::Role::kValue>(record.data(), t, c) != vs[size_t(t) * D + size_t(c)];
    }
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("ablation: the default simulation reproduces kvq's INT2 / INT4 records exactly") {
  check_simulation_is_kvq<kvq::Int2<32>, kvq::Int2<32>>();
  check_simulation_is_kvq<kvq::Int4<32>, kvq::Int4<32>>();
  check_simulation_is_kvq<kvq::Int4<32>, kvq::Int2<32>>();
  check_simulation_is_kvq<kvq::Int2<16>, kvq::Int2<64>>();
  check_simulation_is_kvq<kvq::Int3<64>, kvq::Int2<64>>();
  check_simulation_is_kvq<kvq::Int3<32>, kvq::Int2<64>>();
}

TEST_CASE("ablation: --sim-k-bits / --sim-v-bits turn one kvq format into another exactly") {
  smollm2::Ablation k4;
  REQUIRE(smollm2::parse_ablation_flag(k4, "sim-k-bits", "4"));
  CHECK(smollm2::describe(k4) == " kbits=4");
  check_simulation_is_kvq<kvq::Int4<32>, kvq::Int2<32>>(k4, 2, 2);  // INT2 cache, 4-bit keys: K4V2
  smollm2::Ablation v2;
  REQUIRE(smollm2::parse_ablation_flag(v2, "sim-v-bits", "2"));
  check_simulation_is_kvq<kvq::Int4<32>, kvq::Int2<32>>(v2, 4, 4);  // INT4 cache, 2-bit values: K4V2
  smollm2::Ablation k3;
  REQUIRE(smollm2::parse_ablation_flag(k3, "sim-k-bits", "3"));
  check_simulation_is_kvq<kvq::Int3<64>, kvq::Int2<64>>(k3, 2, 2);  // INT2 cache, 3-bit keys: kvq's Int3
  CHECK_THROWS(smollm2::parse_ablation_flag(v2, "sim-v-bits", "5"));
  CHECK_THROWS(smollm2::parse_ablation_flag(v2, "sim-k-bits", "1"));
}

TEST_CASE("ablation: 3-bit codes take at most 8 levels a group and err between 2 and 4 bits") {
  constexpr int D = 64, P = 64, G = 64;
  std::vector<kvq::bf16> k, v;
  std::vector<float> kf, vf, ks(P * D), vs(P * D);
  random_page(3, k, v, kf, vf);
  double err[5] = {};
  for (int bits = 2; bits <= 4; ++bits) {
    smollm2::Ablation a;
    a.k_bits = a.v_bits = bits;
    smollm2::simulate_page(a, 2, G, 2, G, P, 0, kf.data(), vf.data(), ks.data(), vs.data());
    for (int i = 0; i < P * D; ++i)
      err[bits] += double(ks[size_t(i)] - kf[size_t(i)]) * (ks[size_t(i)] - kf[size_t(i)]) +
                   double(vs[size_t(i)] - vf[size_t(i)]) * (vs[size_t(i)] - vf[size_t(i)]);
    if (bits != 3) continue;
    for (int d = 0; d < D; ++d) {  // one key group per channel (G = P tokens)
      std::vector<float> levels;
      for (int t = 0; t < P; ++t) levels.push_back(ks[size_t(t) * D + size_t(d)]);
      std::sort(levels.begin(), levels.end());
      CHECK(std::unique(levels.begin(), levels.end()) - levels.begin() <= 8);
    }
  }
  CHECK(err[3] < 0.5 * err[2]);
  CHECK(err[4] < 0.5 * err[3]);
}

TEST_CASE("ablation: --sim-k-rope pre undoes the rotation and RoPE of a cached key and redoes them") {
  smollm2::Ablation a;
  REQUIRE(smollm2::parse_ablation_flag(a, "sim-k-rope", "pre"));
  CHECK(smollm2::describe(a) == " krope=pre");
  float k[64];
  CHECK_THROWS(smollm2::key_to_pre_rope(a, 5, false, 0, k));  // the model has not set its RoPE base
  smollm2::LlamaConfig cfg;
  cfg.head_dim = 64;
  cfg.rope_base = a.rope_base = 100000.0f;
  const int64_t pos = 3001;
  const std::vector<float> table = smollm2::rope_table(cfg, pos + 1);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  float x[64];
  for (float& e : x) e = dist(rng);
  for (const bool rotated : {false, true}) {
    const uint64_t seed = kvq::layer_rotation_seed(11);
    // What the cache holds: RoPE as model.cpp applies it (pairs 2i, 2i+1), then the rotation.
    for (int i = 0; i < 32; ++i) {
      const float c = table[size_t(pos * 32 + i) * 2], s = table[size_t(pos * 32 + i) * 2 + 1];
      k[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
      k[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c;
    }
    if (rotated) kvq::rotate<64>(k, seed);
    float cached[64];
    std::copy_n(k, 64, cached);
    smollm2::key_to_pre_rope(a, pos, rotated, seed, k);
    for (int d = 0; d < 64; ++d) CHECK(k[d] == doctest::Approx(x[d]).epsilon(1e-4));
    smollm2::key_from_pre_rope(a, pos, rotated, seed, k);
    for (int d = 0; d < 64; ++d) CHECK(k[d] == doctest::Approx(cached[d]).epsilon(1e-4));
  }
}

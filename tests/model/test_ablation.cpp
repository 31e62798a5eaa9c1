// ablation.hpp's simulation with no option changed is kvq's own INT-b format: the same
// dequantized values as kvq's record bytes, for every asymmetric configuration the example
// compiles at page 64 (and a sink-less page of random K/V with outlier channels).
#include <kvq/kvq.hpp>

#include <random>
#include <vector>

#include "ablation.hpp"
#include "test_support.hpp"

namespace {

template <class KQ, class VQ>
void check_default_is_kvq() {
  using Cfg = kvq::CacheConfig<kvq::bf16, 64, 64, KQ, VQ>;
  constexpr int D = 64, P = 64;
  std::mt19937 rng(KQ::bits * 10 + VQ::bits + KQ::group);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<kvq::bf16> k(P * D), v(P * D);
  std::vector<float> kf(P * D), vf(P * D), ks(P * D), vs(P * D);
  for (int i = 0; i < P * D; ++i) {
    k[size_t(i)] = kvq::bf16::from_float(dist(rng) * (i % D == 7 ? 20.0f : 1.0f) + (i < D ? 9.0f : 0.0f));
    v[size_t(i)] = kvq::bf16::from_float(dist(rng));
    kf[size_t(i)] = k[size_t(i)].to_float();
    vf[size_t(i)] = v[size_t(i)].to_float();
  }
  std::vector<uint8_t> record(Cfg::record_bytes), scratch(size_t(P) * D);
  uint32_t flags = 0;
  kvq::encode_record<Cfg>([&](int t) { return k.data() + size_t(t) * D; }, [&](int t) { return v.data() + size_t(t) * D; },
                          record.data(), scratch.data(), 0, 1, [] {}, flags);
  smollm2::simulate_page(smollm2::Ablation{}, KQ::bits, KQ::group, VQ::bits, VQ::group, P, 0, kf.data(), vf.data(),
                         ks.data(), vs.data());
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
  check_default_is_kvq<kvq::Int2<32>, kvq::Int2<32>>();
  check_default_is_kvq<kvq::Int4<32>, kvq::Int4<32>>();
  check_default_is_kvq<kvq::Int4<32>, kvq::Int2<32>>();
  check_default_is_kvq<kvq::Int2<16>, kvq::Int2<64>>();
}

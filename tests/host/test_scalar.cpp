// Scalar quantization math (quant/scalar.hpp, quant/group_codec.hpp) against DESIGN section 4.
#include "test_util.hpp"

namespace {

using namespace kvq_test;

struct Group {
  kvq::AsymParams p{};
  std::vector<uint32_t> codes;
  uint32_t flags = 0;
  float zero() const { return kvq::f16_bits_to_f32(p.zero); }
  float scale() const { return kvq::f16_bits_to_f32(p.scale); }
  float decode(size_t i) const { return kvq::asym_decode(codes[i], zero(), scale()); }
};

template <int Bits>
Group encode(const std::vector<float>& x) {
  Group g;
  g.codes.assign(x.size(), 0xdeadu);
  g.p = kvq::encode_asym_group<Bits>(
      int(x.size()), [&](int i) { return x[size_t(i)]; }, [&](int i, uint32_t code) { g.codes[size_t(i)] = code; },
      g.flags);
  return g;
}

// Every element of an encoded group within the DESIGN section 4 bound of its sanitised input.
template <int Bits>
void check_group(const std::vector<float>& x, const Group& g, BoundStats& st) {
  double lo = 1e300, hi = -1e300;
  for (float v : x) lo = std::min(lo, double(sanitized(v))), hi = std::max(hi, double(sanitized(v)));
  const double bound = asym_bound(lo, hi, Bits, g.zero(), g.scale());
  for (size_t i = 0; i < x.size(); ++i) {
    ++st.checked;
    const double xi = sanitized(x[i]);
    const double err = std::fabs(xi - double(g.decode(i)));
    st.worst = std::max(st.worst, err / bound);
    if (g.codes[i] > uint32_t((1 << Bits) - 1) || !(err <= bound)) {
      std::ostringstream m;
      m << "bits=" << Bits << " n=" << x.size() << " i=" << i << " x=" << xi << " code=" << g.codes[i]
        << " got=" << g.decode(i) << " lo=" << lo << " hi=" << hi << " zero=" << g.zero() << " scale=" << g.scale()
        << " bound=" << bound;
      st.fail(m.str());
    }
  }
}

// Random groups shaped like real K/V groups: a key channel over tokens (ordinary N(0,1) or an
// outlier channel of 10-50x magnitude), a value token over channels (sometimes containing an
// outlier channel, so the range is wide), and groups of arbitrary magnitude 1e-6 .. 6e4.
std::vector<float> random_group(std::mt19937_64& rng, int n, int kind, bool model_dtype) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const float mag = 10.0f + 40.0f * uni(rng), sign = (rng() & 1u) ? 1.0f : -1.0f;
  const float span = std::pow(10.0f, -6.0f + 10.8f * uni(rng));
  for (int i = 0; i < n; ++i) {
    switch (kind) {
      case 0: x[size_t(i)] = normal(rng); break;
      case 1: x[size_t(i)] = mag * (0.8f * sign + 0.4f * normal(rng)); break;
      case 2: x[size_t(i)] = (i % 13 == 5) ? mag * (0.8f * sign + 0.4f * normal(rng)) : normal(rng); break;
      default:  // stays inside the fp16 range: saturation has its own test
        x[size_t(i)] = std::min(60000.0f, std::max(-60000.0f, span * (normal(rng) + (uni(rng) < 0.3f ? 5.0f : 0.0f))));
        break;
    }
    if (model_dtype) x[size_t(i)] = kvq::bf16::from_float(x[size_t(i)]).to_float();
  }
  return x;
}

template <int Bits>
void random_groups_within_bound(uint64_t seed) {
  std::mt19937_64 rng(seed);
  BoundStats st;
  for (int n : {16, 32, 64, 128})
    for (int kind = 0; kind < 4; ++kind)
      for (int rep = 0; rep < 600; ++rep) {
        const std::vector<float> x = random_group(rng, n, kind, rep % 2 == 0);
        const Group g = encode<Bits>(x);
        CHECK(g.flags == 0u);
        check_group<Bits>(x, g, st);
      }
  CHECK(st.checked == 4 * 600 * (16 + 32 + 64 + 128));
  CHECK_MESSAGE(st.bad == 0, st.first);
  // the bound is not vacuous: some elements come close to it
  CHECK(st.worst > 0.3);
  MESSAGE("INT", Bits, " worst error / bound = ", st.worst);
}

TEST_CASE("scalar: INT2 and INT4 groups with key outlier channels stay within the DESIGN bound") {
  SUBCASE("INT2 groups with key outlier channels stay within the DESIGN bound") {
    random_groups_within_bound<2>(0x5ca1a2);
  }
  SUBCASE("INT4 groups with key outlier channels stay within the DESIGN bound") {
    random_groups_within_bound<4>(0x5ca1a4);
  }
}

template <int Bits>
void check_params_and_codes(uint64_t seed) {
  std::mt19937_64 rng(seed);
  constexpr float maxc = float((1 << Bits) - 1);
  int64_t bad_zero = 0, bad_scale = 0, bad_code = 0, not_nearest = 0;
  for (int rep = 0; rep < 3000; ++rep) {
    const std::vector<float> x = random_group(rng, 32, rep % 4, rep % 3 == 0);
    const Group g = encode<Bits>(x);
    const float lo = *std::min_element(x.begin(), x.end()), hi = *std::max_element(x.begin(), x.end());
    if (g.p.zero != kvq::f32_to_f16_bits(lo == 0.0f ? 0.0f : lo)) ++bad_zero;  // -0 stores +0
    if (g.p.scale != kvq::f32_to_f16_bits((hi - lo) / maxc)) ++bad_scale;
    for (size_t i = 0; i < x.size(); ++i) {
      // code = clamp(rint((x - zero) / scale), 0, 2^b - 1) with the STORED zero and scale, in fp32
      float q = std::nearbyint((x[i] - g.zero()) / g.scale());
      q = std::min(std::max(q, 0.0f), maxc);
      if (g.codes[i] != uint32_t(q)) ++bad_code;
      // ... which is the code whose reconstruction is nearest to x
      const double err = std::fabs(double(x[i]) - g.decode(i));
      for (uint32_t c = 0; c <= uint32_t(maxc); ++c) {
        const double other = std::fabs(double(x[i]) - kvq::asym_decode(c, g.zero(), g.scale()));
        if (other < err - 1e-6 * (std::fabs(x[i]) + g.scale())) ++not_nearest;
      }
    }
  }
  CHECK(bad_zero == 0);
  CHECK(bad_scale == 0);
  CHECK(bad_code == 0);
  CHECK(not_nearest == 0);
}

TEST_CASE("scalar: stored zero/scale are fp16(lo), fp16((hi-lo)/(2^b-1)), codes use the stored values") {
  check_params_and_codes<2>(0xc0de02);
  check_params_and_codes<4>(0xc0de04);
}

TEST_CASE("scalar: constant groups store scale 0, codes 0 and reconstruct exactly") {
  std::mt19937_64 rng(0xc0457);
  int64_t bad = 0, tested = 0;
  auto one = [&](float v, int n) {
    const std::vector<float> x(size_t(n), v);
    const Group g2 = encode<2>(x), g4 = encode<4>(x);
    for (const Group* g : {&g2, &g4}) {
      ++tested;
      bool ok = g->p.scale == 0 && g->flags == 0;
      for (size_t i = 0; i < x.size(); ++i) ok = ok && g->codes[i] == 0 && g->decode(i) == v;
      if (!ok) ++bad;
    }
  };
  // every finite fp16 value (fp16 model), and random bf16 values inside the fp16 normal range
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float v = kvq::f16_bits_to_f32(uint16_t(h));
    if (std::isfinite(v)) one(v, 32);
  }
  for (int i = 0; i < 20000; ++i) {
    const uint16_t b = uint16_t(rng());
    const float v = kvq::bf16_bits_to_f32(b);
    if (std::isfinite(v) && std::fabs(v) >= 0x1p-14f && std::fabs(v) <= 65504.0f) one(v, 16 << (i % 3));
  }
  CHECK(tested > 100000);
  CHECK(bad == 0);
  // signed zeros: -0 and +0 store the same zero point, whatever their order in the group
  CHECK(encode<2>({-0.0f, -0.0f, -0.0f}).p.zero == 0x0000);
  CHECK(encode<2>({-0.0f, 0.0f, 1.0f}).p.zero == 0x0000);
  CHECK(encode<2>({0.0f, -0.0f, 1.0f}).p.zero == 0x0000);
  CHECK(encode<4>({1.0f, -0.0f, 0.0f}).p.zero == 0x0000);
  // a constant group below the fp16 normal range is not exact, but stays within the bound
  const std::vector<float> tiny(32, 1.2345e-7f);
  const Group g = encode<2>(tiny);
  CHECK(g.p.scale == 0);
  BoundStats st;
  check_group<2>(tiny, g, st);
  CHECK_MESSAGE(st.bad == 0, st.first);
}

TEST_CASE("scalar: codes round half to even") {
  // INT2: lo 0, hi 3 -> zero 0, scale 1 exactly
  {
    const std::vector<float> x = {0.0f, 3.0f, 0.5f, 1.5f, 2.5f, 0.49999997f, 0.50000006f, 2.4999998f, 1.0f, 2.0f};
    const Group g = encode<2>(x);
    REQUIRE(g.zero() == 0.0f);
    REQUIRE(g.scale() == 1.0f);
    const std::vector<uint32_t> want = {0, 3, 0, 2, 2, 0, 1, 2, 1, 2};
    CHECK(g.codes == want);
  }
  // INT4: lo 0, hi 15 -> scale 1
  {
    const std::vector<float> x = {0.0f, 15.0f, 0.5f, 1.5f, 2.5f, 7.5f, 8.5f, 14.5f, 13.5f, 3.5f};
    const Group g = encode<4>(x);
    REQUIRE(g.scale() == 1.0f);
    const std::vector<uint32_t> want = {0, 15, 0, 2, 2, 8, 8, 14, 14, 4};
    CHECK(g.codes == want);
  }
  // non-zero zero point: lo -2, hi 1 -> zero -2, scale 1; (x - zero) = 0.5, 1.5, 2.5
  {
    const std::vector<float> x = {-2.0f, 1.0f, -1.5f, -0.5f, 0.5f};
    const Group g = encode<2>(x);
    REQUIRE(g.zero() == -2.0f);
    REQUIRE(g.scale() == 1.0f);
    const std::vector<uint32_t> want = {0, 3, 0, 2, 2};
    CHECK(g.codes == want);
  }
  // scale 0.25 (lo 0, hi 0.75): x = 0.125 -> 0.5 -> 0, 0.375 -> 1.5 -> 2
  {
    const std::vector<float> x = {0.0f, 0.75f, 0.125f, 0.375f, 0.625f};
    const Group g = encode<2>(x);
    REQUIRE(g.scale() == 0.25f);
    const std::vector<uint32_t> want = {0, 3, 0, 2, 2};
    CHECK(g.codes == want);
  }
}

TEST_CASE("scalar: NaN -> 0 and +-Inf -> +-65504 with kFlagNonFinite, beyond fp16 saturates with kFlagSaturated") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    float in, want;
    uint32_t flags;
  };
  const std::vector<Case> cases = {
      {nan, 0.0f, kvq::kFlagNonFinite},
      {-nan, 0.0f, kvq::kFlagNonFinite},
      {float_of(0x7f800001u), 0.0f, kvq::kFlagNonFinite},  // signalling NaN
      {inf, 65504.0f, kvq::kFlagNonFinite},
      {-inf, -65504.0f, kvq::kFlagNonFinite},
      {65504.0f, 65504.0f, 0u},
      {-65504.0f, -65504.0f, 0u},
      {65505.0f, 65504.0f, kvq::kFlagSaturated},
      {65520.0f, 65504.0f, kvq::kFlagSaturated},
      {70000.0f, 65504.0f, kvq::kFlagSaturated},
      {-1e30f, -65504.0f, kvq::kFlagSaturated},
      {std::numeric_limits<float>::max(), 65504.0f, kvq::kFlagSaturated},
      {kvq::bf16::from_float(65536.0f).to_float(), 65504.0f, kvq::kFlagSaturated},
      {1.0f, 1.0f, 0u},
  };
  for (const Case& c : cases) {
    CAPTURE(c.in);
    uint32_t flags = 0;
    const float s = kvq::sanitize(c.in, flags);
    CHECK(bits_of(s) == bits_of(c.want));
    CHECK(flags == c.flags);
    // through a group: the flag is raised, the element reconstructs from the sanitised value
    std::vector<float> x = {0.0f, 1.0f, -2.0f, 3.0f, c.in, 0.5f, -1.0f, 2.0f};
    const Group g2 = encode<2>(x), g4 = encode<4>(x);
    CHECK(g2.flags == c.flags);
    CHECK(g4.flags == c.flags);
    BoundStats st;
    check_group<2>(x, g2, st);
    check_group<4>(x, g4, st);
    CHECK_MESSAGE(st.bad == 0, st.first);
    CHECK(std::isfinite(g2.decode(4)));
    // and through an INT8 token
    uint32_t f8 = 0;
    std::vector<int8_t> codes(x.size());
    const float scale = kvq::encode_int8_group(
        int(x.size()), [&](int i) { return x[size_t(i)]; }, [&](int i, int8_t q) { codes[size_t(i)] = q; }, f8);
    CHECK(f8 == c.flags);
    CHECK(std::isfinite(scale));
    CHECK(std::fabs(kvq::int8_decode(codes[4], scale) - double(c.want)) <= scale / 2 + 1e-3);
  }
  // flags accumulate (OR) over a group
  std::vector<float> x = {nan, 1e9f, 1.0f, 2.0f};
  CHECK(encode<2>(x).flags == (kvq::kFlagNonFinite | kvq::kFlagSaturated));
}

TEST_CASE("scalar: ranges wider than fp16 (values near +-60000, mixed) give finite scales") {
  std::mt19937_64 rng(0x71de);
  std::uniform_real_distribution<float> near(55000.0f, 65504.0f), small(-10.0f, 10.0f);
  BoundStats st;
  int64_t nonfinite = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<float> x(32);
    for (auto& v : x) {
      const int r = int(rng() % 4);
      v = r == 0 ? near(rng) : r == 1 ? -near(rng) : small(rng);
    }
    if (rep % 5 == 0) x[3] = 65504.0f, x[7] = -65504.0f;  // the widest range a group can have
    if (rep % 7 == 0) x[9] = 1e6f, x[11] = -3e5f;         // beyond fp16: saturates first
    const Group g2 = encode<2>(x), g4 = encode<4>(x);
    for (const Group* g : {&g2, &g4}) {
      if (!std::isfinite(g->scale()) || !std::isfinite(g->zero()) || g->scale() <= 0.0f) ++nonfinite;
      for (size_t i = 0; i < x.size(); ++i)
        if (!std::isfinite(g->decode(i))) ++nonfinite;
    }
    check_group<2>(x, g2, st);
    check_group<4>(x, g4, st);
  }
  CHECK(nonfinite == 0);
  CHECK_MESSAGE(st.bad == 0, st.first);
  // the extreme case by hand: range 131008 > fp16 max, scale = fp16(131008/3) = 43680 (finite)
  const Group g = encode<2>({-65504.0f, 65504.0f, 0.0f, 1000.0f});
  CHECK(g.scale() == 43680.0f);
  CHECK(g.zero() == -65504.0f);
  CHECK(g.codes == std::vector<uint32_t>{0, 3, 1, 2});
}

TEST_CASE("scalar: tiny ranges whose scale underflows fp16 store scale 0 and stay within the bound") {
  BoundStats st;
  // scale (hi - lo)/3 below half the smallest fp16 subnormal (2^-25): stored 0, codes 0
  for (float lo : {1e-3f, -1e-3f, 1.0f, -7.5f, 0.0f, 1e-8f, 300.0f}) {
    for (int ulps : {1, 2, 5, 40}) {
      float hi = lo;
      for (int i = 0; i < ulps; ++i) hi = std::nextafter(hi, 1e30f);
      if ((double(hi) - lo) / 3 >= std::ldexp(1.0, -25)) continue;
      std::vector<float> x = {lo, hi, lo, hi, hi, lo, lo, lo};
      const Group g2 = encode<2>(x), g4 = encode<4>(x);
      CAPTURE(lo);
      CAPTURE(ulps);
      CHECK(g2.p.scale == 0);
      CHECK(g4.p.scale == 0);
      for (uint32_t code : g2.codes) CHECK(code == 0);
      for (uint32_t code : g4.codes) CHECK(code == 0);
      check_group<2>(x, g2, st);
      check_group<4>(x, g4, st);
    }
  }
  // scales that are fp16 subnormals: still within the bound
  std::mt19937_64 rng(0x7147);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  int subnormal = 0;
  for (int rep = 0; rep < 3000; ++rep) {
    const float base = (u(rng) - 0.5f) * std::pow(10.0f, -8.0f + 6.0f * u(rng));
    const float range = std::pow(10.0f, -9.0f + 5.0f * u(rng));
    std::vector<float> x(32);
    for (auto& v : x) v = base + range * u(rng);
    const Group g2 = encode<2>(x), g4 = encode<4>(x);
    if (g2.p.scale != 0 && (g2.p.scale & 0x7c00u) == 0) ++subnormal;
    CHECK(std::isfinite(g2.zero()));
    check_group<2>(x, g2, st);
    check_group<4>(x, g4, st);
  }
  CHECK(subnormal > 100);
  CHECK_MESSAGE(st.bad == 0, st.first);
  // asym_encode never divides by a zero scale
  CHECK(kvq::asym_encode<2>(5.0f, 1.0f, 0.0f) == 0u);
  CHECK(kvq::asym_encode<4>(-5.0f, 1.0f, 0.0f) == 0u);
}

TEST_CASE("scalar: INT8 symmetric per token: scale = absmax/127, codes rint half-even in -127 .. 127") {
  auto enc = [](const std::vector<float>& x, std::vector<int8_t>& codes, uint32_t& flags) {
    codes.assign(x.size(), int8_t(99));
    return kvq::encode_int8_group(
        int(x.size()), [&](int i) { return x[size_t(i)]; }, [&](int i, int8_t q) { codes[size_t(i)] = q; }, flags);
  };
  std::vector<int8_t> codes;
  uint32_t flags = 0;
  // hand-made: absmax 127 -> scale 1
  {
    const std::vector<float> x = {127.0f, -127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 126.5f, -0.5f, 0.5f, 1.5f, 0.0f};
    const float scale = enc(x, codes, flags);
    CHECK(scale == 1.0f);
    const std::vector<int8_t> want = {127, -127, 2, 4, -2, -4, 126, 0, 0, 2, 0};
    CHECK(codes == want);
    CHECK(flags == 0u);
  }
  // all-zero token: scale 0, codes 0
  {
    const float scale = enc(std::vector<float>(64, 0.0f), codes, flags);
    CHECK(bits_of(scale) == 0u);
    for (int8_t q : codes) CHECK(q == 0);
    CHECK(kvq::int8_scale(0.0f) == 0.0f);
    CHECK(kvq::int8_encode(3.0f, 0.0f) == 0);
  }
  // random tokens with outlier channels: scale bits, code range, symmetry and the bound
  std::mt19937_64 rng(0x1e8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t bad = 0, bad_scale = 0, bad_range = 0, hit_max = 0;
  for (int rep = 0; rep < 4000; ++rep) {
    std::vector<float> x(size_t(64 << (rep % 3)));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = kvq::bf16::from_float((i % 29 == 3 ? 30.0f : 1.0f) * normal(rng) * std::pow(10.0f, float(rep % 7) - 4.0f))
                 .to_float();
    const float scale = enc(x, codes, flags);
    float absmax = 0.0f;
    for (float v : x) absmax = std::max(absmax, std::fabs(v));
    if (bits_of(scale) != bits_of(absmax / 127.0f)) ++bad_scale;
    for (size_t i = 0; i < x.size(); ++i) {
      if (codes[i] < -127) ++bad_range;
      if (std::fabs(x[i]) == absmax && std::abs(int(codes[i])) == 127) ++hit_max;
      const double err = std::fabs(double(x[i]) - kvq::int8_decode(codes[i], scale));
      if (!(err <= scale / 2.0 + std::fabs(x[i]) * 0x1p-21)) ++bad;
      const float q = std::min(std::max(std::nearbyint(x[i] / scale), -127.0f), 127.0f);
      if (codes[i] != int8_t(q)) ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(bad_scale == 0);
  CHECK(bad_range == 0);
  CHECK(hit_max >= 4000);  // the absmax element of every token gets +-127
}

}  // namespace

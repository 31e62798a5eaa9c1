// fp32 <-> fp16 / bf16 conversions (numeric/bits.hpp, numeric/dtype.hpp).
#include "test_util.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVQ_TEST_HAVE_X86 1
#endif

namespace {

using namespace kvq_test;

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// fp16 rounding of a float written independently of bits.hpp: exact fp64 arithmetic, nearbyint
// (round half to even), overflow to Inf at 65520.
uint16_t ref_f16(float f) {
  const double x = f;
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (std::isnan(x)) return uint16_t(sign | 0x7e00u);
  const double a = std::fabs(x);
  if (a >= 65520.0) return uint16_t(sign | 0x7c00u);
  if (a < std::ldexp(1.0, -14)) return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(a, 24))));
  int e = 0;
  std::frexp(a, &e);
  int E = e - 1;  // a in [2^E, 2^(E+1))
  double m = std::nearbyint(std::ldexp(a, 10 - E));  // in [1024, 2048]
  if (m == 2048.0) m = 1024.0, ++E;
  if (E > 15) return uint16_t(sign | 0x7c00u);
  return uint16_t(sign | ((E + 15) << 10) | (int(m) - 1024));
}

// bf16 rounding of a float: pick the nearer of the two bf16 neighbours in fp64, ties to even.
uint16_t ref_bf16(float f) {
  const uint32_t x = bits_of(f);
  if (std::isnan(f)) return uint16_t((x >> 16) | 0x40u);
  const uint16_t down = uint16_t(x >> 16);
  if ((down & 0x7fffu) == 0x7f80u) return down;  // +-Inf
  const double a = std::fabs(double(f));
  const double lo = std::fabs(double(kvq::bf16_bits_to_f32(down)));
  const double hi = (down & 0x7fffu) == 0x7f7fu ? std::ldexp(1.0, 128) : std::fabs(double(kvq::bf16_bits_to_f32(uint16_t(down + 1))));
  if (a - lo < hi - a) return down;
  if (a - lo > hi - a) return uint16_t(down + 1);
  return (down & 1u) ? uint16_t(down + 1) : down;
}

// Compares soft fp16 conversion with a reference; NaN results need only be NaN of the same sign.
struct F16Compare {
  int64_t n = 0, bad = 0;
  uint32_t first = 0;
  uint16_t got = 0, want = 0;
  template <class Ref>
  void operator()(uint32_t bits, Ref&& ref) {
    ++n;
    const float f = float_of(bits);
    const uint16_t g = kvq::f32_to_f16_bits_soft(f), w = ref(f);
    const bool ok = std::isnan(f) ? (f16_is_nan(g) && (g & 0x200u) && (g & 0x8000u) == (w & 0x8000u)) : g == w;
    if (!ok && bad++ == 0) first = bits, got = g, want = w;
  }
};

TEST_CASE("bits: fp32 -> fp16 on hand-known values (65504, 65520 -> Inf, 2^-24, subnormals, ties to even, NaN)") {
  struct Case {
    float in;
    uint16_t want;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.5f, 0x3800},
      {0.1f, 0x2e66},
      {1.0f / 3.0f, 0x3555},
      {65504.0f, 0x7bff},                   // largest finite
      {65519.99f, 0x7bff},                  // just below the halfway point to 65536
      {65520.0f, 0x7c00},                   // halfway: ties to even -> Inf
      {-65520.0f, 0xfc00},
      {65536.0f, 0x7c00},
      {1e10f, 0x7c00},
      {inf, 0x7c00},
      {-inf, 0xfc00},
      {0x1p-14f, 0x0400},                   // smallest normal
      {0x1p-24f, 0x0001},                   // smallest subnormal
      {-0x1p-24f, 0x8001},
      {0x1p-25f, 0x0000},                   // half of it: tie to even -> 0
      {0x1.000002p-25f, 0x0001},            // just above the tie
      {0x1.8p-24f, 0x0002},                 // 1.5 * 2^-24: tie -> 2 (even)
      {0x1.4p-23f, 0x0002},                 // 2.5 * 2^-24: tie -> 2 (even)
      {0x1.cp-23f, 0x0004},                 // 3.5 * 2^-24: tie -> 4
      {1023.0f * 0x1p-24f, 0x03ff},         // largest subnormal
      {1023.5f * 0x1p-24f, 0x0400},         // tie between the largest subnormal and 2^-14 -> even (2^-14)
      {1022.5f * 0x1p-24f, 0x03fe},
      {1e-9f, 0x0000},
      {1.0f + 0x1p-11f, 0x3c00},            // halfway 1 .. 1+2^-10: to even
      {1.0f + 3 * 0x1p-11f, 0x3c02},        // halfway 1+2^-10 .. 1+2^-9: to even
      {1.0f + 0x1p-11f + 0x1p-23f, 0x3c01}, // just above halfway
      {2049.0f, 0x6800},                    // halfway 2048 .. 2050 -> 2048
      {2051.0f, 0x6802},                    // halfway 2050 .. 2052 -> 2052
      {2047.5f, 0x6800},                    // halfway 2047 (odd) .. 2048 -> 2048
      {0x1.ffcp15f, 0x7bff},                // 65504 written in hex
      {0x1.ff8p15f, 0x7bfe},                // 65472
      {0x1.ffep15f, 0x7c00},                // 65520 written in hex
  };
  for (const Case& c : cases) {
    CAPTURE(c.in);
    CHECK(kvq::f32_to_f16_bits_soft(c.in) == c.want);
    CHECK(kvq::f32_to_f16_bits(c.in) == c.want);
    CHECK(ref_f16(c.in) == c.want);  // the test's own reference agrees with the hand values
  }
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        float_of(0x7f800001u), float_of(0xff800001u), float_of(0x7fffffffu)};
  for (float f : nans) {
    const uint16_t h = kvq::f32_to_f16_bits_soft(f);
    CHECK(f16_is_nan(h));
    CHECK((h & 0x200u) != 0);  // quiet
    CHECK((h & 0x8000u) == ((bits_of(f) >> 16) & 0x8000u));
  }
}

TEST_CASE("bits: fp16 -> fp32 hand-known values, every fp16 and every kvq::bf16/fp16 value round-trips") {
  SUBCASE("fp16 -> fp32 on hand-known values; every fp16 round-trips exactly") {
    CHECK(kvq::f16_bits_to_f32(0x7bff) == 65504.0f);
    CHECK(kvq::f16_bits_to_f32(0xfbff) == -65504.0f);
    CHECK(kvq::f16_bits_to_f32(0x0001) == 0x1p-24f);
    CHECK(kvq::f16_bits_to_f32(0x03ff) == 1023.0f * 0x1p-24f);
    CHECK(kvq::f16_bits_to_f32(0x0400) == 0x1p-14f);
    CHECK(kvq::f16_bits_to_f32(0x3c00) == 1.0f);
    CHECK(kvq::f16_bits_to_f32(0x3555) == 0x1.554p-2f);
    CHECK(bits_of(kvq::f16_bits_to_f32(0x8000)) == 0x80000000u);
    CHECK(kvq::f16_bits_to_f32(0x7c00) == std::numeric_limits<float>::infinity());
    CHECK(kvq::f16_bits_to_f32(0xfc00) == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(kvq::f16_bits_to_f32(0x7e00)));
    CHECK(std::isnan(kvq::f16_bits_to_f32(0x7c01)));
    int64_t bad = 0;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const float f = kvq::f16_bits_to_f32(uint16_t(h));
      if (f16_is_nan(uint16_t(h))) {
        if (!std::isnan(f) || !f16_is_nan(kvq::f32_to_f16_bits_soft(f))) ++bad;
        continue;
      }
      // exact value: sign * mant * 2^(e-25) (subnormals e = 1, no implicit bit)
      const int e = int(h >> 10) & 31, m = int(h & 0x3ffu);
      const double want = (h & 0x8000u ? -1.0 : 1.0) *
                          (e == 31 ? std::numeric_limits<double>::infinity()
                                   : e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m + 1024), e - 25));
      if (double(f) != want || kvq::f32_to_f16_bits_soft(f) != h) ++bad;
    }
    CHECK(bad == 0);
  }
  SUBCASE("kvq::bf16 / kvq::fp16 round-trip their own values and use the conversions above") {
    int64_t bad = 0;
    for (uint32_t h = 0; h < 0x10000u; ++h) {
      const kvq::fp16 a{uint16_t(h)};
      const kvq::bf16 b{uint16_t(h)};
      if (!f16_is_nan(a.bits) && kvq::fp16::from_float(a.to_float()).bits != a.bits) ++bad;
      if (!bf16_is_nan(b.bits) && kvq::bf16::from_float(b.to_float()).bits != b.bits) ++bad;
      if (bits_of(a.to_float()) != bits_of(kvq::f16_bits_to_f32(a.bits)) && !f16_is_nan(a.bits)) ++bad;
      if (bits_of(b.to_float()) != (uint32_t(h) << 16)) ++bad;
    }
    CHECK(bad == 0);
    CHECK(kvq::fp16::from_float(0.1f).bits == 0x2e66);
    CHECK(kvq::bf16::from_float(0.1f).bits == 0x3dcd);
    CHECK(std::string(kvq::bf16::name()) == "bf16");
    CHECK(std::string(kvq::fp16::name()) == "fp16");
    CHECK(kvq::dtype_of<kvq::bf16>() == kvq::DType::kBF16);
    CHECK(kvq::dtype_of<kvq::fp16>() == kvq::DType::kFP16);
  }
}

TEST_CASE("bits: fp32 -> fp16 equals an independent fp64 rounding on millions of inputs") {
  F16Compare cmp;
  std::mt19937_64 rng(0xb175);
  // uniformly random bit patterns (NaN, Inf, huge, tiny)
  for (int i = 0; i < 1000000; ++i) cmp(uint32_t(rng()), ref_f16);
  // random floats with exponents around the fp16 range (2^-27 .. 2^17)
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t e = 100u + uint32_t(rng() % 45u);
    cmp(uint32_t(rng() & 0x807fffffu) | (e << 23), ref_f16);
  }
  // every mantissa of the binades where the rules change: subnormal results, the first normal
  // binade, the last binade before overflow (2^15 .. 2^16) and 2^16 itself
  for (uint32_t e : {102u, 103u, 111u, 112u, 113u, 142u, 143u})
    for (uint32_t m = 0; m < (1u << 23); m += (e == 112u || e == 142u) ? 1u : 7u) cmp((e << 23) | m, ref_f16);
  CHECK(cmp.n > 20000000);
  CHECK_MESSAGE(cmp.bad == 0, "first mismatch: input bits ", cmp.first, " got ", cmp.got, " want ", cmp.want);
}

#if defined(KVQ_TEST_HAVE_X86)
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#endif

TEST_CASE("bits: fp32 -> fp16 soft conversion equals F16C hardware on random bit patterns") {
#if defined(KVQ_TEST_HAVE_X86)
  if (!__builtin_cpu_supports("f16c")) {
    MESSAGE("CPU without F16C: hardware comparison skipped (the fp64 reference test still ran)");
    return;
  }
  F16Compare cmp;
  std::mt19937_64 rng(0xf16c);
  for (int i = 0; i < 3000000; ++i) cmp(uint32_t(rng()), hw_f32_to_f16);
  for (int i = 0; i < 3000000; ++i) {
    const uint32_t e = 98u + uint32_t(rng() % 50u);
    cmp(uint32_t(rng() & 0x807fffffu) | (e << 23), hw_f32_to_f16);
  }
  CHECK_MESSAGE(cmp.bad == 0, "first mismatch: input bits ", cmp.first, " got ", cmp.got, " want ", cmp.want);
  int64_t bad = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float a = kvq::f16_bits_to_f32(uint16_t(h)), b = hw_f16_to_f32(uint16_t(h));
    if (std::isnan(b) ? !std::isnan(a) : bits_of(a) != bits_of(b)) ++bad;
  }
  CHECK(bad == 0);
#else
  MESSAGE("not an x86 host: F16C comparison skipped");
#endif
}

TEST_CASE("bits: fp32 -> bf16 rounds to nearest even, NaN stays NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float in;
    uint16_t want;
  };
  const std::vector<Case> cases = {
      {0.0f, 0x0000},           {-0.0f, 0x8000},
      {1.0f, 0x3f80},           {-1.0f, 0xbf80},
      {1.0f + 0x1p-8f, 0x3f80},                 // halfway 1 .. 1+2^-7: to even
      {1.0f + 3 * 0x1p-8f, 0x3f82},             // halfway 1+2^-7 .. 1+2^-6: to even
      {1.0f + 0x1p-8f + 0x1p-23f, 0x3f81},      // above halfway
      {1.0f + 0x1p-8f - 0x1p-23f, 0x3f80},      // below halfway
      {65504.0f, 0x4780},                       // fp16 max is 65536 in bf16
      {3.0f, 0x4040},
      {std::numeric_limits<float>::max(), 0x7f80},  // rounds up to Inf
      {0x1.fep127f, 0x7f7f},                    // largest bf16
      {inf, 0x7f80},            {-inf, 0xff80},
      {0x1p-130f, 0x0008},                      // float subnormal 0x00080000 keeps its top bits
  };
  for (const Case& c : cases) {
    CAPTURE(c.in);
    CHECK(kvq::f32_to_bf16_bits(c.in) == c.want);
    CHECK(ref_bf16(c.in) == c.want);
  }
  CHECK(kvq::f32_to_bf16_bits(float_of(0x00018000u)) == 0x0002);  // tie at odd 0x0001 -> 0x0002
  CHECK(kvq::f32_to_bf16_bits(float_of(0x00028000u)) == 0x0002);  // tie at even 0x0002 stays
  for (uint32_t nb : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0xff800001u}) {
    const uint16_t b = kvq::f32_to_bf16_bits(float_of(nb));
    CHECK(bf16_is_nan(b));
    CHECK((b & 0x8000u) == ((nb >> 16) & 0x8000u));
  }
  std::mt19937_64 rng(0xbf16);
  int64_t bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t x = uint32_t(rng());
    const float f = float_of(x);
    const uint16_t g = kvq::f32_to_bf16_bits(f), w = ref_bf16(f);
    if (std::isnan(f) ? !bf16_is_nan(g) : g != w) ++bad;
  }
  CHECK(bad == 0);
}

}  // namespace

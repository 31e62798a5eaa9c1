// MSE key clipping (KeyClip::kMse, quant/group_codec.hpp): a brute-force reimplementation of the
// documented search gives the library's parameters and codes; the squared error never exceeds
// kMinMax's; degenerate groups (constant, two values, non-finite input, the widest range) stay
// sane; and in a record only the asymmetric key section changes.
#include "test_util.hpp"

namespace {

using namespace kvq_test;

// ---- brute force: the rule as group_codec.hpp and docs/FORMAT.md section 3.3.1 state it ---------
struct BfGroup {
  uint16_t zero = 0, scale = 0;
  std::vector<uint32_t> codes;
};

// fp16 parameters of [lo, hi] (FORMAT 3.3): zero = fp16(lo) with -0 stored as +0, scale =
// fp16((hi - lo) / M), 0 when hi == lo.
template <int Bits>
void bf_params(float lo, float hi, uint16_t& zero, uint16_t& scale) {
  constexpr float M = float((1 << Bits) - 1);
  zero = kvq::f32_to_f16_bits(lo == 0.0f ? 0.0f : lo);
  scale = hi == lo ? uint16_t(0) : kvq::f32_to_f16_bits((hi - lo) / M);
}

// code = clamp(rint((x - z) / s), 0, M) with the stored parameters; 0 for a zero scale.
template <int Bits>
uint32_t bf_code(float x, float z, float s) {
  constexpr float M = float((1 << Bits) - 1);
  if (s == 0.0f) return 0;
  const float q = std::nearbyint((x - z) / s);
  return uint32_t(std::min(std::max(q, 0.0f), M));
}

// Squared error of [lo, hi]: sum over the group in element order of (x - fma(code, s, z))^2, each
// term added with one fused multiply-add in fp32.
template <int Bits>
float bf_error(const std::vector<float>& x, float lo, float hi) {
  uint16_t zb, sb;
  bf_params<Bits>(lo, hi, zb, sb);
  const float z = kvq::f16_bits_to_f32(zb), s = kvq::f16_bits_to_f32(sb);
  float err = 0.0f;
  for (float v : x) {
    const float e = v - std::fma(float(bf_code<Bits>(v, z, s)), s, z);
    err = std::fma(e, e, err);
  }
  return err;
}

// The kMse group: min / max of the sanitised values, then two rounds of (lo over the 21
// candidates fma(span, i / 40, lo0) with hi fixed, then hi over fma(-span, i / 40, hi0) with lo
// fixed); a candidate with hi <= lo is skipped, the first smallest error wins.
template <int Bits>
BfGroup bf_encode(const std::vector<float>& raw, bool mse, float* lo_out = nullptr, float* hi_out = nullptr) {
  std::vector<float> x(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) x[i] = sanitized(raw[i]);
  float lo = 65504.0f, hi = -65504.0f;
  for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
  if (mse && hi > lo) {
    const float lo0 = lo, hi0 = hi, span = hi - lo;
    for (int round = 0; round < 2; ++round)
      for (int end = 0; end < 2; ++end) {
        float best = std::numeric_limits<float>::infinity();
        float pick = end == 0 ? lo : hi;
        for (int i = 0; i <= 20; ++i) {
          const float f = float(i) / 40.0f;
          const float cand = end == 0 ? std::fma(span, f, lo0) : std::fma(-span, f, hi0);
          const float a = end == 0 ? cand : lo, b = end == 0 ? hi : cand;
          if (!(b > a)) continue;
          const float e = bf_error<Bits>(x, a, b);
          if (e < best) best = e, pick = cand;
        }
        (end == 0 ? lo : hi) = pick;
      }
  }
  if (lo_out) *lo_out = lo;
  if (hi_out) *hi_out = hi;
  BfGroup g;
  bf_params<Bits>(lo, hi, g.zero, g.scale);
  for (float v : x) g.codes.push_back(bf_code<Bits>(v, kvq::f16_bits_to_f32(g.zero), kvq::f16_bits_to_f32(g.scale)));
  return g;
}

// ---- the library -------------------------------------------------------------------------------
struct LibGroup {
  kvq::AsymParams p{};
  std::vector<uint32_t> codes;
  uint32_t flags = 0;
  float zero() const { return kvq::f16_bits_to_f32(p.zero); }
  float scale() const { return kvq::f16_bits_to_f32(p.scale); }
  float decode(size_t i) const { return kvq::asym_decode(codes[i], zero(), scale()); }
};

template <int Bits>
LibGroup lib_encode(const std::vector<float>& x, kvq::KeyClip clip) {
  LibGroup g;
  g.codes.assign(x.size(), 0xdeadu);
  g.p = kvq::encode_asym_group<Bits>(
      int(x.size()), [&](int i) { return x[size_t(i)]; }, [&](int i, uint32_t c) { g.codes[size_t(i)] = c; }, g.flags, clip);
  return g;
}

// Squared reconstruction error in fp64 against the sanitised input.
double sq_error(const std::vector<float>& x, const LibGroup& g) {
  double e = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double(sanitized(x[i])) - double(g.decode(i));
    e += d * d;
  }
  return e;
}

// A key channel over G tokens: N(0, 1) or an outlier channel, plus one planted large token (an
// attention sink) of 5..60 times the group's spread, sometimes a second one; in the model dtype.
std::vector<float> outlier_group(std::mt19937_64& rng, int n, bool bf16_values) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const float offset = (rng() % 3 == 0) ? 20.0f * normal(rng) : 0.0f;
  const float spread = std::pow(10.0f, -2.0f + 4.0f * uni(rng));
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = offset + spread * normal(rng);
  const int big = int(rng() % uint64_t(n));
  x[size_t(big)] = offset + ((rng() & 1u) ? 1.0f : -1.0f) * spread * (5.0f + 55.0f * uni(rng));
  if (rng() % 4 == 0) x[size_t((big + 1 + int(rng() % uint64_t(n - 1))) % n)] = offset - spread * (3.0f + 10.0f * uni(rng));
  for (auto& v : x) v = bf16_values ? kvq::bf16::from_float(v).to_float() : kvq::fp16::from_float(v).to_float();
  return x;
}

template <int Bits>
void mse_random_groups(uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t groups = 0, better = 0, worse = 0, param_mismatch = 0, code_mismatch = 0, widened = 0, flagged = 0;
  double gain = 0.0;  // sum of kMse error / kMinMax error
  std::string first;
  for (int n : {8, 16, 32, 64, 128})
    for (int rep = 0; rep < 150; ++rep) {
      const std::vector<float> x = outlier_group(rng, n, rep % 2 == 0);
      const LibGroup mm = lib_encode<Bits>(x, kvq::KeyClip::kMinMax), ms = lib_encode<Bits>(x, kvq::KeyClip::kMse);
      float lo = 0.0f, hi = 0.0f;
      const BfGroup bf = bf_encode<Bits>(x, true, &lo, &hi);
      ++groups;
      flagged += (mm.flags | ms.flags) != 0u;
      if (ms.p.zero != bf.zero || ms.p.scale != bf.scale) {
        if (param_mismatch++ == 0) {
          std::ostringstream m;
          m << "INT" << Bits << " n=" << n << " rep=" << rep << ": lib zero=" << ms.p.zero << " scale=" << ms.p.scale
            << ", brute force zero=" << bf.zero << " scale=" << bf.scale;
          first = m.str();
        }
      }
      code_mismatch += ms.codes != bf.codes;
      // kMse only narrows: [lo, hi] inside [min, max]
      const float mn = *std::min_element(x.begin(), x.end()), mx = *std::max_element(x.begin(), x.end());
      widened += lo < mn || hi > mx;
      // the float error the search minimises: never above kMinMax's (i = 0 keeps the full range)
      const float e_mm = bf_error<Bits>(x, mn, mx), e_ms = bf_error<Bits>(x, lo, hi);
      if (!(e_ms <= e_mm)) ++worse;
      // and in fp64 (up to the float rounding of the sums)
      const double d_mm = sq_error(x, mm), d_ms = sq_error(x, ms);
      if (!(d_ms <= d_mm * (1.0 + 1e-5) + 1e-30)) ++worse;
      if (d_ms < d_mm * 0.999) ++better;
      gain += d_mm > 0.0 ? d_ms / d_mm : 1.0;
    }
  CHECK_MESSAGE(param_mismatch == 0, first);
  CHECK(code_mismatch == 0);
  CHECK(widened == 0);
  CHECK(worse == 0);
  CHECK(flagged == 0);
  // the search is not a no-op: with a planted outlier most groups improve (measured: INT2 738 of
  // 750 groups, mean ratio 0.30; INT4 568 of 750, mean ratio 0.84)
  CHECK(better * 10 > groups * (Bits == 2 ? 9 : 6));
  CHECK(gain / double(groups) < (Bits == 2 ? 0.5 : 0.95));
  MESSAGE("INT", Bits, ": kMse lowers the squared error in ", better, " of ", groups,
          " outlier groups; mean error ratio kMse / kMinMax = ", gain / double(groups));
}

TEST_CASE("key clip: kMse equals a brute-force reimplementation of the documented search and never has a larger error") {
  SUBCASE("INT2 groups with an outlier") { mse_random_groups<2>(0xc1a2); }
  SUBCASE("INT4 groups with an outlier") { mse_random_groups<4>(0xc1a4); }
}

TEST_CASE("key clip: kMse on ordinary groups (no outlier) equals the brute force and is no worse") {
  std::mt19937_64 rng(0xc1b0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t mismatch = 0, worse = 0;
  for (int rep = 0; rep < 400; ++rep) {
    std::vector<float> x(32);
    for (auto& v : x) v = kvq::bf16::from_float(normal(rng) * (rep % 7 + 0.5f)).to_float();
    const LibGroup m2 = lib_encode<2>(x, kvq::KeyClip::kMse), m4 = lib_encode<4>(x, kvq::KeyClip::kMse);
    const BfGroup b2 = bf_encode<2>(x, true), b4 = bf_encode<4>(x, true);
    mismatch += m2.p.zero != b2.zero || m2.p.scale != b2.scale || m2.codes != b2.codes;
    mismatch += m4.p.zero != b4.zero || m4.p.scale != b4.scale || m4.codes != b4.codes;
    worse += sq_error(x, m2) > sq_error(x, lib_encode<2>(x, kvq::KeyClip::kMinMax)) * (1.0 + 1e-5);
    worse += sq_error(x, m4) > sq_error(x, lib_encode<4>(x, kvq::KeyClip::kMinMax)) * (1.0 + 1e-5);
  }
  CHECK(mismatch == 0);
  CHECK(worse == 0);
  // the brute force's kMinMax is the library's kMinMax too (the reimplementation is sound)
  std::vector<float> x(32);
  for (auto& v : x) v = normal(rng);
  const LibGroup mm = lib_encode<2>(x, kvq::KeyClip::kMinMax);
  const BfGroup bm = bf_encode<2>(x, false);
  CHECK(mm.p.zero == bm.zero);
  CHECK(mm.p.scale == bm.scale);
  CHECK(mm.codes == bm.codes);
}

template <int Bits>
void degenerate_groups() {
  CAPTURE(Bits);
  auto finite = [](const LibGroup& g) {
    if (!std::isfinite(g.zero()) || !std::isfinite(g.scale()) || g.scale() < 0.0f) return false;
    for (size_t i = 0; i < g.codes.size(); ++i)
      if (!std::isfinite(g.decode(i)) || g.codes[i] > uint32_t((1 << Bits) - 1)) return false;
    return true;
  };
  auto same = [](const LibGroup& a, const LibGroup& b) { return a.p.zero == b.p.zero && a.p.scale == b.p.scale && a.codes == b.codes; };
  SUBCASE("constant group: scale 0, exact, the kMinMax bytes") {
    for (float c : {0.0f, -0.0f, 0.75f, -3.5f, 1000.0f, 65504.0f, -65504.0f}) {
      const std::vector<float> x(32, c);
      const LibGroup ms = lib_encode<Bits>(x, kvq::KeyClip::kMse), mm = lib_encode<Bits>(x, kvq::KeyClip::kMinMax);
      CAPTURE(c);
      CHECK(finite(ms));
      CHECK(same(ms, mm));
      CHECK(ms.p.scale == 0);
      CHECK(sq_error(x, ms) == 0.0);
    }
  }
  SUBCASE("two-value groups: exact when the step is exact in fp16, never worse than kMinMax") {
    constexpr float M = float((1 << Bits) - 1);
    // {a, a + M * s} with s a power of two: zero and scale are exact, both values reconstruct exactly
    for (float a : {-2.0f, 0.0f, 1.5f, -100.0f})
      for (float s : {0.25f, 1.0f, 8.0f})
        for (int ones : {1, 5, 16, 31}) {
          std::vector<float> x(32, a);
          for (int i = 0; i < ones; ++i) x[size_t(i * 7 % 32)] = a + M * s;
          const LibGroup ms = lib_encode<Bits>(x, kvq::KeyClip::kMse), mm = lib_encode<Bits>(x, kvq::KeyClip::kMinMax);
          CAPTURE(a);
          CAPTURE(s);
          CAPTURE(ones);
          CHECK(finite(ms));
          CHECK(sq_error(x, ms) == 0.0);
          CHECK(same(ms, mm));  // the first of the tied (zero-error) candidates is the full range
        }
    // a step fp16 cannot hold exactly: tiny error, never above kMinMax's
    for (float a : {-2.0f, 0.1f})
      for (float b : {1.0f, 3.3f, 1e4f}) {
        std::vector<float> x(16, a);
        for (int i = 0; i < 16; i += 3) x[size_t(i)] = b;
        const LibGroup ms = lib_encode<Bits>(x, kvq::KeyClip::kMse), mm = lib_encode<Bits>(x, kvq::KeyClip::kMinMax);
        CAPTURE(a);
        CAPTURE(b);
        CHECK(finite(ms));
        CHECK(sq_error(x, ms) <= sq_error(x, mm) * (1.0 + 1e-5));
        for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(ms.decode(i) - x[i]) <= 2e-3 * (b - a));
      }
  }
  SUBCASE("non-finite and out-of-range inputs are sanitised first, flags as kMinMax") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::mt19937_64 rng(0xc1d0 + Bits);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<float> x(32);
      for (auto& v : x) v = normal(rng);
      x[size_t(rep % 32)] = rep % 4 == 0 ? nan : rep % 4 == 1 ? inf : rep % 4 == 2 ? -inf : 1e6f;
      const LibGroup ms = lib_encode<Bits>(x, kvq::KeyClip::kMse), mm = lib_encode<Bits>(x, kvq::KeyClip::kMinMax);
      const BfGroup bf = bf_encode<Bits>(x, true);
      CAPTURE(rep);
      CHECK(finite(ms));
      CHECK(ms.flags == mm.flags);
      CHECK(ms.flags != 0u);
      CHECK(ms.p.zero == bf.zero);
      CHECK(ms.p.scale == bf.scale);
      CHECK(ms.codes == bf.codes);
      CHECK(sq_error(x, ms) <= sq_error(x, mm) * (1.0 + 1e-5));
    }
  }
  SUBCASE("the widest group, +-65504, and a tiny span stay finite") {
    std::vector<float> x(32, 0.0f);
    x[0] = -65504.0f;
    x[1] = 65504.0f;
    for (int i = 2; i < 32; ++i) x[size_t(i)] = float(i) * 100.0f - 1600.0f;
    const LibGroup ms = lib_encode<Bits>(x, kvq::KeyClip::kMse);
    CHECK(finite(ms));
    CHECK(sq_error(x, ms) <= sq_error(x, lib_encode<Bits>(x, kvq::KeyClip::kMinMax)) * (1.0 + 1e-5));
    std::vector<float> tiny(32, 1.0f);
    tiny[3] = std::nextafter(1.0f, 2.0f);  // span of one ulp: the scale underflows to 0
    const LibGroup mt = lib_encode<Bits>(tiny, kvq::KeyClip::kMse);
    CHECK(finite(mt));
    const BfGroup bt = bf_encode<Bits>(tiny, true);
    CHECK(mt.p.zero == bt.zero);
    CHECK(mt.p.scale == bt.scale);  // 2^-23 / M: the smallest fp16 subnormal for INT2, 0 for INT4
    CHECK(mt.codes == bt.codes);
    CHECK(sq_error(tiny, mt) <= sq_error(tiny, lib_encode<Bits>(tiny, kvq::KeyClip::kMinMax)));
  }
}

TEST_CASE("key clip: constant, two-value, non-finite, widest and tiny groups behave sanely under kMse") {
  SUBCASE("INT2") { degenerate_groups<2>(); }
  SUBCASE("INT4") { degenerate_groups<4>(); }
}

// ---- records: only the asymmetric key section depends on key_clip -------------------------------
template <class Cfg>
std::vector<uint8_t> encode_record_clip(const std::vector<typename Cfg::dtype>& rows, kvq::KeyClip clip) {
  std::vector<uint8_t> record(Cfg::record_bytes, 0xA5);
  kvq::SeqAppend s{};
  s.len_new = Cfg::page;
  s.cold_new = Cfg::page;
  kvq::CacheView<typename Cfg::dtype> view{};
  view.num_kv_heads = 1;
  view.key_clip = clip;
  uint32_t flags = 0;
  kvq::reference::encode_page<Cfg>(view, rows.data(), rows.data() + size_t(Cfg::page) * Cfg::head_dim, s, 0, record.data(),
                                   flags);
  return record;
}

// The page's K rows then V rows ([2P][D]) of a sequence with outlier channels and a large token 0.
template <class Cfg>
std::vector<typename Cfg::dtype> page_rows(uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  Seq<T> s = make_seq<T>(seed, P, 1, D);
  for (int c = 0; c < D; ++c) s.k_mut(0)[c] = T::from_float(s.k_row(0)[c].to_float() * 30.0f + 5.0f);  // a sink-like token
  std::vector<T> rows(s.k.begin(), s.k.end());
  rows.insert(rows.end(), s.v.begin(), s.v.end());
  return rows;
}

template <class Cfg>
void record_sections(uint64_t seed) {
  using T = typename Cfg::dtype;
  using KQ = typename Cfg::k_quant;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  constexpr kvq::RecordOffsets o = Cfg::record;
  const std::vector<T> rows = page_rows<Cfg>(seed);
  const std::vector<uint8_t> mm = encode_record_clip<Cfg>(rows, kvq::KeyClip::kMinMax);
  const std::vector<uint8_t> ms = encode_record_clip<Cfg>(rows, kvq::KeyClip::kMse);
  CHECK(mm == encode_record<Cfg>(rows));  // kMinMax is the default
  // values never change
  CHECK(std::equal(mm.begin() + std::ptrdiff_t(o.v_codes), mm.end(), ms.begin() + std::ptrdiff_t(o.v_codes)));
  if constexpr (KQ::kind != kvq::QuantKind::kAsym) {
    CHECK(mm == ms);  // INT8 and "none" keys ignore key_clip
  } else {
    constexpr int G = KQ::group;
    CHECK(mm != ms);
    // every key group (g, c): the brute force's parameters and codes
    int64_t bad = 0;
    double e_mm = 0.0, e_ms = 0.0;
    for (int g = 0; g < P / G; ++g)
      for (int c = 0; c < D; ++c) {
        std::vector<float> x(static_cast<size_t>(G));
        for (int k = 0; k < G; ++k) x[size_t(k)] = rows[size_t(g * G + k) * D + size_t(c)].to_float();
        const BfGroup bf = bf_encode<KQ::bits>(x, true);
        const kvq::AsymParams p = kvq::asym_params_at<KQ, Role::kKey, D, P>(ms.data() + o.k_params, g * G, c);
        bad += p.zero != bf.zero || p.scale != bf.scale;
        for (int k = 0; k < G; ++k) {
          const float got = kvq::decode_record_element<Cfg, Role::kKey>(ms.data(), g * G + k, c);
          const float want = std::fma(float(bf.codes[size_t(k)]), kvq::f16_bits_to_f32(bf.scale), kvq::f16_bits_to_f32(bf.zero));
          bad += bits_of(got) != bits_of(want);
          const double xm = x[size_t(k)], dm = kvq::decode_record_element<Cfg, Role::kKey>(mm.data(), g * G + k, c);
          e_mm += (xm - dm) * (xm - dm);
          e_ms += (xm - got) * (xm - got);
        }
      }
    CHECK(bad == 0);
    CHECK(e_ms < e_mm);
    MESSAGE("key section squared error, kMse / kMinMax: ", e_ms / e_mm);
  }
}

TEST_CASE("key clip: in a record only the asymmetric key section follows key_clip, group by group as the brute force") {
  record_sections<CfgInt2>(0xc1e1);
  record_sections<CfgInt4>(0xc1e2);
  record_sections<CfgK4V2>(0xc1e3);
  record_sections<CfgP16K4V2D64>(0xc1e4);
  record_sections<CfgP32Int2G16D64>(0xc1e5);
  record_sections<CfgFp16Int2>(0xc1e6);
  record_sections<CfgInt8>(0xc1e7);
  record_sections<CfgNone>(0xc1e8);
}

}  // namespace

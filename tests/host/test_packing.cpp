// Code order inside a record (quant/packing.hpp) against hand-worked examples of its comment:
//   element j of a word sits at bit b*(j/2) + 16*(j%2)
//   keys  : word = t * (D/n) + c/n, element j = c % n                       (n = 32/b)
//   values: word = (t/2) * (D/(n/2)) + c/(n/2), element j = 2*(c % (n/2)) + t%2
#include "test_util.hpp"

namespace {

// A record's four sections as a test reads them: key and value code words, key and value group
// parameters (fp16 bits).
struct RecordSections {
  const uint32_t* kw;
  const uint32_t* vw;
  const uint16_t* kp;
  const uint16_t* vp;
};
template <class Cfg>
RecordSections record_sections(const std::vector<uint8_t>& rec) {
  constexpr kvq::RecordOffsets o = Cfg::record;
  return {reinterpret_cast<const uint32_t*>(rec.data() + o.k_codes), reinterpret_cast<const uint32_t*>(rec.data() + o.v_codes),
          reinterpret_cast<const uint16_t*>(rec.data() + o.k_params), reinterpret_cast<const uint16_t*>(rec.data() + o.v_params)};
}

using namespace kvq_test;

struct Expect {
  int t, c, word, shift;
};

template <int Bits, int D>
void check_slots(Role role, const std::vector<Expect>& ex) {
  for (const Expect& e : ex) {
    CAPTURE(e.t);
    CAPTURE(e.c);
    const kvq::CodeSlot s = kvq::code_slot<Bits, D>(role, e.t, e.c);
    CHECK(s.word == e.word);
    CHECK(s.shift == e.shift);
    // the element index inside the word, from the shift: j = 2*(shift % 16)/b + shift/16
    const int j = 2 * ((e.shift % 16) / Bits) + e.shift / 16;
    CHECK(kvq::packed_bit_offset(Bits, j) == e.shift);
    const kvq::TokenChannel tc = kvq::slot_element<Bits, D>(role, e.word, j);
    CHECK(tc.t == e.t);
    CHECK(tc.c == e.c);
  }
}

TEST_CASE("packing: INT2 keys, D = 64, hand-worked (bit offsets, slots, a packed word)") {
  SUBCASE("bit offset of element j is b*(j/2) + 16*(j%2)") {
    const int int2[16] = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
    const int int4[8] = {0, 16, 4, 20, 8, 24, 12, 28};
    for (int j = 0; j < 16; ++j) CHECK(kvq::packed_bit_offset(2, j) == int2[j]);
    for (int j = 0; j < 8; ++j) CHECK(kvq::packed_bit_offset(4, j) == int4[j]);
  }
  SUBCASE("INT2 keys, D = 64 (16 codes per word, 4 words per token), hand-worked") {
    check_slots<2, 64>(Role::kKey, {
                                       {0, 0, 0, 0},
                                       {0, 1, 0, 16},
                                       {0, 2, 0, 2},
                                       {0, 3, 0, 18},
                                       {0, 14, 0, 14},
                                       {0, 15, 0, 30},
                                       {0, 16, 1, 0},
                                       {0, 63, 3, 30},
                                       {1, 0, 4, 0},
                                       {3, 37, 14, 20},  // word 3*4 + 37/16 = 14, element 5 -> 2*2 + 16
                                       {3, 36, 14, 4},
                                       {63, 63, 255, 30},
                                   });
    // word 0 holding codes (c & 3) for c = 0..15: even elements 0,2,0,2,.. in the low half-word,
    // odd elements 1,3,1,3,.. in the high half-word
    const uint32_t w = kvq::pack_word<2, 64>(Role::kKey, 0, [](int t, int c) { return t == 0 ? uint32_t(c & 3) : 99u; });
    CHECK(w == 0xDDDD8888u);
  }
}

TEST_CASE("packing: INT4 keys, D = 128 (8 codes per word, 16 words per token), hand-worked") {
  check_slots<4, 128>(Role::kKey, {
                                      {0, 0, 0, 0},
                                      {0, 1, 0, 16},
                                      {0, 2, 0, 4},
                                      {0, 7, 0, 28},
                                      {0, 8, 1, 0},
                                      {2, 13, 33, 24},  // word 2*16 + 1, element 5 -> 4*2 + 16
                                      {1, 127, 31, 28},
                                      {63, 127, 1023, 28},
                                  });
  const uint32_t w = kvq::pack_word<4, 128>(Role::kKey, 0, [](int t, int c) { return t == 0 ? uint32_t(c) : 99u; });
  CHECK(w == 0x75316420u);
  const uint32_t w1 = kvq::pack_word<4, 128>(Role::kKey, 17, [](int t, int c) { return uint32_t((t * 3 + c) & 15); });
  // word 17 = token 1, channels 8..15: codes (3 + c) & 15 = 11,12,13,14,15,0,1,2
  // low half: elements 0,2,4,6 -> 11,13,15,1 ; high half: 12,14,0,2
  CHECK(w1 == 0x20EC1FDBu);
}

TEST_CASE("packing: INT2 / INT4 values pair tokens (2p, 2p+1) inside a word, hand-worked") {
  // INT2, D = 64: 8 channels x 2 tokens per word, 8 words per token pair
  check_slots<2, 64>(Role::kValue, {
                                       {0, 0, 0, 0},
                                       {1, 0, 0, 16},
                                       {0, 1, 0, 2},
                                       {1, 1, 0, 18},
                                       {0, 7, 0, 14},
                                       {1, 7, 0, 30},
                                       {0, 8, 1, 0},
                                       {2, 0, 8, 0},
                                       {3, 0, 8, 16},
                                       {5, 19, 18, 22},  // word 2*8 + 2, element 2*3 + 1 = 7 -> 2*3 + 16
                                       {63, 63, 255, 30},
                                   });
  // INT4, D = 128: 4 channels x 2 tokens per word, 32 words per token pair
  check_slots<4, 128>(Role::kValue, {
                                        {0, 0, 0, 0},
                                        {1, 0, 0, 16},
                                        {0, 1, 0, 4},
                                        {1, 3, 0, 28},
                                        {0, 4, 1, 0},
                                        {7, 6, 97, 24},  // word 3*32 + 1, element 2*2 + 1 = 5 -> 4*2 + 16
                                        {62, 127, 31 * 32 + 31, 12},
                                    });
  // an INT2 value word: token 0 codes in the low half, token 1 codes in the high half
  const uint32_t w = kvq::pack_word<2, 64>(Role::kValue, 0, [](int t, int c) { return t == 0 ? 1u : uint32_t(c & 3); });
  // low half: 8 codes 1 -> 0x5555 ; high half: channels 0..7 -> 0,1,2,3,0,1,2,3 -> 0xE4E4
  CHECK(w == 0xE4E45555u);
}

template <int Bits, int D, int P>
void inverse_over_all(Role role) {
  constexpr int n = 32 / Bits;
  std::vector<int> used(static_cast<size_t>(P) * D / n * 32, 0);
  int64_t bad = 0;
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) {
      const kvq::CodeSlot s = kvq::code_slot<Bits, D>(role, t, c);
      if (s.word < 0 || s.word >= P * D / n || s.shift < 0 || s.shift > 32 - Bits || s.shift % Bits != 0) {
        ++bad;
        continue;
      }
      ++used[size_t(s.word) * 32 + size_t(s.shift)];
      const int j = 2 * ((s.shift % 16) / Bits) + s.shift / 16;
      const kvq::TokenChannel tc = kvq::slot_element<Bits, D>(role, s.word, j);
      if (tc.t != t || tc.c != c) ++bad;
    }
  // every code position of the section is used exactly once
  int64_t collisions = 0, empty = 0;
  for (int w = 0; w < P * D / n; ++w)
    for (int j = 0; j < n; ++j) {
      const int u = used[size_t(w) * 32 + size_t(kvq::packed_bit_offset(Bits, j))];
      collisions += u > 1;
      empty += u == 0;
    }
  CHECK(bad == 0);
  CHECK(collisions == 0);
  CHECK(empty == 0);
  // pack_word puts code_at(t, c) where code_slot says
  auto code_at = [](int t, int c) { return uint32_t((t * 131 + c * 7 + (t ^ c)) & ((1 << Bits) - 1)); };
  std::vector<uint32_t> words(static_cast<size_t>(P) * D / n);
  for (size_t w = 0; w < words.size(); ++w) words[w] = kvq::pack_word<Bits, D>(role, int(w), code_at);
  int64_t wrong = 0;
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) {
      const kvq::CodeSlot s = kvq::code_slot<Bits, D>(role, t, c);
      if (((words[size_t(s.word)] >> s.shift) & uint32_t((1 << Bits) - 1)) != code_at(t, c)) ++wrong;
    }
  CHECK(wrong == 0);
}

TEST_CASE("packing: code_slot and slot_element are inverse over every (t, c), every slot used once") {
  inverse_over_all<2, 64, 64>(Role::kKey);
  inverse_over_all<2, 64, 64>(Role::kValue);
  inverse_over_all<2, 128, 16>(Role::kKey);
  inverse_over_all<2, 128, 128>(Role::kValue);
  inverse_over_all<2, 256, 32>(Role::kKey);
  inverse_over_all<2, 256, 32>(Role::kValue);
  inverse_over_all<4, 64, 16>(Role::kKey);
  inverse_over_all<4, 64, 16>(Role::kValue);
  inverse_over_all<4, 128, 64>(Role::kKey);
  inverse_over_all<4, 128, 64>(Role::kValue);
  inverse_over_all<4, 256, 128>(Role::kKey);
  inverse_over_all<4, 256, 128>(Role::kValue);
}

// Pages whose every group spans [0, 2^b - 1], so zero = 0, scale = 1 and code = value exactly.
template <class Cfg>
void encoded_page_order() {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  constexpr int kmax = KQ::max_code, vmax = VQ::max_code;
  auto kcode = [](int t, int c) { return t % KQ::group == 0 ? 0 : t % KQ::group == 1 ? kmax : (t * 5 + c * 3 + t * c) % (kmax + 1); };
  auto vcode = [](int t, int c) { return c % VQ::group == 0 ? 0 : c % VQ::group == 1 ? vmax : (t * 7 + c + t * c * 3) % (vmax + 1); };
  std::vector<T> k(size_t(P) * D), v(k.size());
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) {
      k[size_t(t) * D + c] = T::from_float(float(kcode(t, c)));
      v[size_t(t) * D + c] = T::from_float(float(vcode(t, c)));
    }
  std::vector<uint8_t> rec(Cfg::record_bytes, 0xEE), scratch(size_t(P) * D);
  uint32_t flags = 0;
  kvq::encode_record<Cfg>([&](int t) { return k.data() + size_t(t) * D; }, [&](int t) { return v.data() + size_t(t) * D; },
                          rec.data(), scratch.data(), 0, 1, [] {}, flags);
  CHECK(flags == 0u);
  const auto [kw, vw, kp, vp] = record_sections<Cfg>(rec);
  int64_t bad = 0;
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) {
      bad += kvq::read_code<KQ::bits, D, P>(Role::kKey, rec.data() + Cfg::record.k_codes, t, c) != uint32_t(kcode(t, c));
      bad += kvq::read_code<VQ::bits, D, P>(Role::kValue, rec.data() + Cfg::record.v_codes, t, c) != uint32_t(vcode(t, c));
    }
  CHECK(bad == 0);
  // parameter layout (record_layout.hpp): keys scale[g][D] then zero[g][D] per token group g;
  // values scale[P][D/Gv] then zero[P][D/Gv]. Every scale is fp16(1.0) = 0x3c00, every zero 0.
  int64_t bad_params = 0;
  for (int g = 0; g < P / KQ::group; ++g)
    for (int c = 0; c < D; ++c) bad_params += kp[(2 * g) * D + c] != 0x3c00 || kp[(2 * g + 1) * D + c] != 0;
  for (int t = 0; t < P; ++t)
    for (int g = 0; g < D / VQ::group; ++g)
      bad_params += vp[t * (D / VQ::group) + g] != 0x3c00 || vp[P * (D / VQ::group) + t * (D / VQ::group) + g] != 0;
  CHECK(bad_params == 0);
}

TEST_CASE("packing: encode_record writes codes at code_slot and parameters in the documented layout") {
  SUBCASE("encode_record writes each code at code_slot and parameters in the documented layout") {
    encoded_page_order<CfgInt2>();
    encoded_page_order<CfgInt4>();
    encoded_page_order<CfgK4V2>();
    encoded_page_order<CfgP16K4V2D64>();
    encoded_page_order<CfgP32Int2G16D64>();
    encoded_page_order<CfgFp16Int2>();
    encoded_page_order<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>>();
    encoded_page_order<kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int3<16>, kvq::Int3<8>>>();
  }
  SUBCASE("parameter positions of one distinguishable group, INT8 and none token-major") {
    constexpr int D = 128, P = 64;
    using T = kvq::bf16;
    std::vector<T> k(size_t(P) * D, T::from_float(0.0f)), v(k.size(), T::from_float(0.0f));
    // key channel 5, token group 1 (tokens 32..63): lo -2, hi 4 -> scale 2, zero -2 (INT2)
    k[size_t(40) * D + 5] = T::from_float(-2.0f);
    k[size_t(50) * D + 5] = T::from_float(4.0f);
    // value token 9, channel group 1 (channels 32..63): lo 1, hi 7 -> scale 2, zero 1 ... but 0s in the
    // group make lo 0: set the whole group to 1..7
    for (int c = 32; c < 64; ++c) v[size_t(9) * D + c] = T::from_float(float(1 + (c % 7)));
    std::vector<uint8_t> rec(CfgInt2::record_bytes), scratch(size_t(P) * D);
    uint32_t flags = 0;
    kvq::encode_record<CfgInt2>([&](int t) { return k.data() + size_t(t) * D; }, [&](int t) { return v.data() + size_t(t) * D; },
                                rec.data(), scratch.data(), 0, 1, [] {}, flags);
    const uint16_t* kp = reinterpret_cast<const uint16_t*>(rec.data() + CfgInt2::record.k_params);
    const uint16_t* vp = reinterpret_cast<const uint16_t*>(rec.data() + CfgInt2::record.v_params);
    CHECK(kp[2 * D + 5] == kvq::f32_to_f16_bits(2.0f));    // scale, group 1, channel 5
    CHECK(kp[3 * D + 5] == kvq::f32_to_f16_bits(-2.0f));   // zero, group 1, channel 5
    CHECK(kp[0 * D + 5] == 0);                             // group 0 of channel 5 is constant
    CHECK(kp[2 * D + 6] == 0);
    CHECK(vp[9 * 4 + 1] == kvq::f32_to_f16_bits(2.0f));    // scale, token 9, group 1
    CHECK(vp[P * 4 + 9 * 4 + 1] == kvq::f32_to_f16_bits(1.0f));
    CHECK(vp[9 * 4 + 0] == 0);
    CHECK(vp[10 * 4 + 1] == 0);
    // INT8: codes int8 [t][c], fp32 scale per token
    std::vector<T> x(size_t(P) * D);
    for (int t = 0; t < P; ++t)
      for (int c = 0; c < D; ++c) x[size_t(t) * D + c] = T::from_float(float((t + 1) * ((c % 3) - 1)));
    std::vector<uint8_t> r8(CfgInt8::record_bytes);
    kvq::encode_record<CfgInt8>([&](int t) { return x.data() + size_t(t) * D; }, [&](int t) { return x.data() + size_t(t) * D; },
                                r8.data(), scratch.data(), 0, 1, [] {}, flags);
    const int8_t* c8 = reinterpret_cast<const int8_t*>(r8.data() + CfgInt8::record.k_codes);
    const float* s8 = reinterpret_cast<const float*>(r8.data() + CfgInt8::record.k_params);
    CHECK(s8[10] == 11.0f / 127.0f);
    CHECK(c8[10 * D + 0] == -127);
    CHECK(c8[10 * D + 1] == 0);
    CHECK(c8[10 * D + 2] == 127);
    // none: the model dtype, [t][c]
    std::vector<uint8_t> rn(CfgNone::record_bytes);
    kvq::encode_record<CfgNone>([&](int t) { return x.data() + size_t(t) * D; }, [&](int t) { return k.data() + size_t(t) * D; },
                                rn.data(), scratch.data(), 0, 1, [] {}, flags);
    CHECK(std::memcmp(rn.data() + CfgNone::record.k_codes, x.data(), x.size() * 2) == 0);
    CHECK(std::memcmp(rn.data() + CfgNone::record.v_codes, k.data(), k.size() * 2) == 0);
  }
}

// The INT8 section is encoded in three passes over 8-channel chunks (int8_codec.hpp); each token's
// scale and codes must be what encode_int8_group gives for its row, flags included.
TEST_CASE("packing: INT8 section equals encode_int8_group of each token (NaN, Inf, saturated, zero rows)") {
  using T = CfgInt8::dtype;
  constexpr int D = CfgInt8::head_dim, P = CfgInt8::page;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<T> x(size_t(P) * D);
  for (auto& e : x) e = T::from_float(nd(rng));
  for (int c = 0; c < D; ++c) x[size_t(5) * D + c] = T::from_float(0.0f);  // token 5: all zero
  x[size_t(7) * D + 3] = T::from_float(NAN);
  x[size_t(9) * D + 100] = T::from_float(INFINITY);
  x[size_t(11) * D + 64] = T::from_float(-1.0e6f);  // beyond fp16: saturates
  std::vector<uint8_t> rec(CfgInt8::record_bytes), scratch(size_t(P) * D);
  uint32_t flags = 0;
  auto row = [&](int t) { return x.data() + size_t(t) * D; };
  kvq::encode_record<CfgInt8>(row, row, rec.data(), scratch.data(), 0, 1, [] {}, flags);
  uint32_t want_flags = 0;
  int64_t bad = 0;
  for (const size_t off : {CfgInt8::record.k_codes, CfgInt8::record.v_codes}) {
    const int8_t* codes = reinterpret_cast<const int8_t*>(rec.data() + off);
    const float* scales = reinterpret_cast<const float*>(rec.data() + off + (CfgInt8::record.k_params - CfgInt8::record.k_codes));
    for (int t = 0; t < P; ++t) {
      int8_t want[D];
      const float scale = kvq::encode_int8_group(D, [&](int i) { return row(t)[i].to_float(); },
                                                 [&](int i, int8_t c) { want[i] = c; }, want_flags);
      bad += std::memcmp(&scale, &scales[t], sizeof(float)) != 0;
      bad += std::memcmp(want, codes + size_t(t) * D, D) != 0;
    }
  }
  CHECK(bad == 0);
  CHECK(flags == want_flags);
  CHECK((flags & kvq::kFlagNonFinite) != 0u);
  CHECK((flags & kvq::kFlagSaturated) != 0u);
}

// The INT2 / INT4 sections are encoded in passes over 8-element chunks (asym_codec.hpp); each
// group's parameters and codes must be what encode_asym_group gives for it, flags included.
template <class Cfg>
void asym_section_matches_groups(kvq::KeyClip clip) {
  using T = typename Cfg::dtype;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<T> k(size_t(P) * D), v(k.size());
  for (auto& e : k) e = T::from_float(nd(rng));
  for (auto& e : v) e = T::from_float(nd(rng));
  k[size_t(1) * D + 5] = T::from_float(40.0f);  // an outlier for the MSE clip
  k[size_t(3) * D + 7] = T::from_float(NAN);
  v[size_t(2) * D + 9] = T::from_float(-INFINITY);
  v[size_t(P - 1) * D + 1] = T::from_float(2.0e5f);  // beyond fp16: saturates
  std::vector<uint8_t> rec(Cfg::record_bytes), scratch(size_t(P) * D);
  uint32_t flags = 0, want_flags = 0;
  kvq::encode_record<Cfg>([&](int t) { return k.data() + size_t(t) * D; }, [&](int t) { return v.data() + size_t(t) * D; },
                          rec.data(), scratch.data(), 0, 1, [] {}, flags, clip);
  const auto [kw, vw, kp, vp] = record_sections<Cfg>(rec);
  int64_t bad = 0;
  for (int g = 0; g < P / KQ::group; ++g)  // key groups: channel c of tokens [g Gk, (g + 1) Gk)
    for (int c = 0; c < D; ++c) {
      const kvq::AsymParams p = kvq::encode_asym_group<KQ::bits>(
          KQ::group, [&](int i) { return k[size_t(g * KQ::group + i) * D + c].to_float(); },
          [&](int i, uint32_t code) {
            bad += kvq::read_code<KQ::bits, D, P>(Role::kKey, rec.data() + Cfg::record.k_codes, g * KQ::group + i, c) != code;
          },
          want_flags, clip);
      bad += kp[(2 * g) * D + c] != p.scale || kp[(2 * g + 1) * D + c] != p.zero;
    }
  constexpr int vg = D / VQ::group;
  for (int t = 0; t < P; ++t)  // value groups: channels [g Gv, (g + 1) Gv) of token t
    for (int g = 0; g < vg; ++g) {
      const kvq::AsymParams p = kvq::encode_asym_group<VQ::bits>(
          VQ::group, [&](int i) { return v[size_t(t) * D + g * VQ::group + i].to_float(); },
          [&](int i, uint32_t code) {
            bad += kvq::read_code<VQ::bits, D, P>(Role::kValue, rec.data() + Cfg::record.v_codes, t, g * VQ::group + i) != code;
          },
          want_flags);
      bad += vp[t * vg + g] != p.scale || vp[P * vg + t * vg + g] != p.zero;
    }
  CHECK(bad == 0);
  CHECK(flags == want_flags);
  CHECK((flags & kvq::kFlagNonFinite) != 0u);
  CHECK((flags & kvq::kFlagSaturated) != 0u);
}

TEST_CASE("packing: INT2 / INT3 / INT4 sections equal encode_asym_group of each group (min/max and MSE keys, groups of 64, 32, 16 and 4)") {
  using CfgSmall = kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int4<16>, kvq::Int2<4>>;
  using CfgK3V2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>;
  using CfgInt3Small = kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int3<16>, kvq::Int3<4>>;
  for (const kvq::KeyClip clip : {kvq::KeyClip::kMinMax, kvq::KeyClip::kMse}) {
    CAPTURE(int(clip));
    asym_section_matches_groups<CfgInt2>(clip);
    asym_section_matches_groups<CfgSmall>(clip);
    asym_section_matches_groups<CfgK3V2>(clip);
    asym_section_matches_groups<CfgInt3Small>(clip);
  }
}

TEST_CASE("packing: INT3 is an INT2 plane of the low bits, then a 1-bit plane of the high bits, hand-worked") {
  constexpr int D = 64, P = 16;
  // 1-bit words: keys word = t * 2 + c / 32, element j = c % 32 at bit j/2 + 16 (j%2); values
  // word = (t / 2) * 4 + c / 16, element j = 2 (c % 16) + t % 2.
  CHECK(kvq::packed_bit_offset(1, 0) == 0);
  CHECK(kvq::packed_bit_offset(1, 1) == 16);
  CHECK(kvq::packed_bit_offset(1, 31) == 31);
  check_slots<1, D>(Role::kKey, {{0, 0, 0, 0}, {0, 1, 0, 16}, {0, 31, 0, 31}, {0, 32, 1, 0}, {3, 35, 7, 17}});
  check_slots<1, D>(Role::kValue, {{0, 0, 0, 0}, {1, 0, 0, 16}, {0, 15, 0, 15}, {1, 17, 1, 17}, {6, 40, 14, 8}});
  CHECK(kvq::section_words<3, D, P>() == P * D / 16 + P * D / 32);
  // Codes 0..7 of keys: (t, c) -> (t + c) % 8. Plane 0: token 0's first word holds the low bits
  // of channels 0..15; plane 1 (P * D / 4 bytes on) holds the high bits of channels 0..31.
  auto code_at = [](int t, int c) { return uint32_t((t + c) % 8); };
  std::vector<uint32_t> words(size_t(kvq::section_words<3, D, P>()));
  for (size_t w = 0; w < words.size(); ++w) words[w] = kvq::pack_section_word<3, D, P>(Role::kKey, int(w), code_at);
  // low plane word 0: element j = channel j, low bits (j % 8) & 3 at bit 2 (j / 2) + 16 (j % 2)
  uint32_t want0 = 0, want_hi = 0;
  for (int j = 0; j < 16; ++j) want0 |= uint32_t((j % 8) & 3) << (2 * (j / 2) + 16 * (j % 2));
  for (int j = 0; j < 32; ++j) want_hi |= uint32_t((j % 8) >> 2) << (j / 2 + 16 * (j % 2));
  CHECK(words[0] == want0);
  CHECK(words[size_t(P * D / 16)] == want_hi);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(words.data());
  int wrong = 0;
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) wrong += kvq::read_code<3, D, P>(Role::kKey, bytes, t, c) != code_at(t, c);
  CHECK(wrong == 0);
  for (size_t w = 0; w < words.size(); ++w) words[w] = kvq::pack_section_word<3, D, P>(Role::kValue, int(w), code_at);
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) wrong += kvq::read_code<3, D, P>(Role::kValue, bytes, t, c) != code_at(t, c);
  CHECK(wrong == 0);
  // The record of INT3 keys with Gk 64 and INT2 values with Gv 64 has INT2/32's size (3.0 bits).
  using K3V2 = kvq::CacheConfig<kvq::bf16, 64, 64, kvq::Int3<64>, kvq::Int2<64>>;
  using Int2 = kvq::CacheConfig<kvq::bf16, 64, 64, kvq::Int2<32>, kvq::Int2<32>>;
  CHECK(K3V2::record_bytes == Int2::record_bytes);
  CHECK(K3V2::record.k_params == size_t(64 * 64 * 3 / 8));
}

}  // namespace

// docs/format_example.cpp - computes every number shown in docs/FORMAT.md (format version 1).
//
// Build and run from the repository root (host only, no GPU needed):
//
//   g++ -std=c++17 -O2 -Wall -I include docs/format_example.cpp -o /tmp/kvq_format_example
//   /tmp/kvq_format_example
//
// Do not add -ffast-math: it lets the compiler replace the division by 2^b - 1 with a multiplication
// by its reciprocal, which changes the rounded scales (see FORMAT.md section 3.9).
//
// It encodes one record of the configuration
//   kvq::CacheConfig<kvq::bf16, /*D=*/64, /*P=*/16, kvq::Int2<16>, kvq::Int2<16>>
// with the library's own encoder (kvq::encode_record, the code path of the host reference and of
// the append kernel), then recomputes the showcased groups and words with the scalar functions
// (encode_asym_group, code_slot, pack_word, asym_decode) and checks that both agree with the bytes
// of the record and with kvq::decode_record_element. It exits non-zero if any check fails.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <kvq/kvq.hpp>

namespace {

int g_failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("CHECK FAILED: %s\n", what);
    ++g_failures;
  }
}

constexpr int D = 64;
constexpr int P = 16;
constexpr int G = 16;  // Gk = Gv = 16
using KQ = kvq::Int2<G>;
using VQ = kvq::Int2<G>;
using Cfg = kvq::CacheConfig<kvq::bf16, D, P, KQ, VQ>;

// The 16 values every key group and every value group is built from (all exact in bf16).
const float kBase[16] = {0.40625f, -1.25f, 2.5f,  0.0f,  -0.5f, 1.75f,  3.0f,   -2.0f,
                         0.875f,   1.0f,   -1.0f, 2.25f, 0.5f,  -0.25f, 1.375f, 0.125f};
const float vBase[16] = {-1.5f, 1.5f,  -1.0f,  0.0f,   1.0f,  0.25f,   -0.75f,  0.5f,
                         1.25f, -0.5f, 0.75f,  -1.25f, 0.125f, 1.125f, -0.375f, 0.625f};

// K[t][c] = kBase[(t + c) % 16] * 2^(c / 16): channel c's group (tokens 0..15) holds all of kBase,
// scaled by a power of two per block of 16 channels.
float key_input(int t, int c) { return std::ldexp(kBase[(t + c) % 16], c / 16); }
// V[t][c] = vBase[(c + t) % 16] * 2^(t % 4): each value group (token t, 16 channels) holds all of
// vBase, scaled by a power of two per token.
float value_input(int t, int c) { return std::ldexp(vBase[(c + t) % 16], t % 4); }

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void print_bytes(const uint8_t* p, int n) {
  for (int i = 0; i < n; ++i) std::printf("%s%02x", i ? " " : "", p[i]);
}

// Encodes the example record (every byte is written: the fill value must not matter).
std::vector<uint8_t> encode_example(uint8_t fill, uint32_t& flags) {
  static std::vector<kvq::bf16> K, V;
  K.resize(P * D);
  V.resize(P * D);
  for (int t = 0; t < P; ++t)
    for (int c = 0; c < D; ++c) {
      K[t * D + c] = kvq::bf16::from_float(key_input(t, c));
      V[t * D + c] = kvq::bf16::from_float(value_input(t, c));
    }
  std::vector<uint8_t> record(Cfg::record_bytes, fill);
  std::vector<uint8_t> scratch(P * D);
  auto row_k = [&](int t) { return &K[t * D]; };
  auto row_v = [&](int t) { return &V[t * D]; };
  kvq::encode_record<Cfg>(row_k, row_v, record.data(), scratch.data(), 0, 1, [] {}, flags);
  return record;
}

// ---------------------------------------------------------------------------------------------
void section_scalar_rules() {
  std::printf("== 3. scalar rules\n");
  std::printf("-- sanitation (x -> sanitize(x), flags)\n");
  const float inputs[] = {NAN, INFINITY, -INFINITY, 70000.0f, -65520.0f, 65504.0f, -1.5f};
  const char* names[] = {"NaN", "+Inf", "-Inf", "70000", "-65520", "65504", "-1.5"};
  for (int i = 0; i < 7; ++i) {
    uint32_t f = 0;
    const float y = kvq::sanitize(inputs[i], f);
    std::printf("  %-7s -> %-8g flags=%u%s%s\n", names[i], y, f, (f & kvq::kFlagNonFinite) ? " (kFlagNonFinite)" : "",
                (f & kvq::kFlagSaturated) ? " (kFlagSaturated)" : "");
  }

  std::printf("-- asym_params<b>(lo, hi) special cases\n");
  struct Case {
    const char* what;
    int bits;
    float lo, hi;
  } cases[] = {
      {"constant group 0.75", 2, 0.75f, 0.75f},
      {"scale underflow hi-lo=2^-24", 2, 0.0f, std::ldexp(1.0f, -24)},
      {"smallest nonzero scale hi-lo=2^-23", 2, 0.0f, std::ldexp(1.0f, -23)},
      {"widest group INT2", 2, -65504.0f, 65504.0f},
      {"widest group INT4", 4, -65504.0f, 65504.0f},
      {"bf16 constant 129*2^-27 (not in fp16)", 2, std::ldexp(129.0f, -27), std::ldexp(129.0f, -27)},
  };
  {  // the tiny bf16 constant: a bf16 value (8 significant bits) that fp16 rounds to 16*2^-24 = 2^-20
    const float tiny = std::ldexp(129.0f, -27);
    check(kvq::bf16_bits_to_f32(kvq::f32_to_bf16_bits(tiny)) == tiny, "129*2^-27 is a bf16 value");
    check(kvq::f16_bits_to_f32(kvq::f32_to_f16_bits(tiny)) == std::ldexp(1.0f, -20), "fp16(129*2^-27) = 2^-20");
    check(kvq::asym_params<2>(tiny, tiny).zero == 0x0010, "its constant group stores zero point 0x0010");
  }
  for (const Case& c : cases) {
    const kvq::AsymParams p = c.bits == 2 ? kvq::asym_params<2>(c.lo, c.hi) : kvq::asym_params<4>(c.lo, c.hi);
    std::printf("  %-40s INT%d lo=%-12.9g hi=%-12.9g zero=0x%04x (%.9g) scale=0x%04x (%.9g)\n", c.what, c.bits, c.lo,
                c.hi, p.zero, kvq::f16_bits_to_f32(p.zero), p.scale, kvq::f16_bits_to_f32(p.scale));
  }
  {  // widest INT2 group: the top code reconstructs above 65504 (fp32 is fine)
    const kvq::AsymParams p = kvq::asym_params<2>(-65504.0f, 65504.0f);
    const float top = kvq::asym_decode(3, kvq::f16_bits_to_f32(p.zero), kvq::f16_bits_to_f32(p.scale));
    const uint16_t sat = kvq::fp16::from_float_saturate(top).bits, plain = kvq::f32_to_f16_bits(top);
    std::printf("  widest INT2: fma(3, scale, zero) = %.9g\n", top);
    std::printf("  as fp16: fp16::from_float_saturate (dequantize) = 0x%04x (%.9g); plain fp16() = 0x%04x (%.9g)\n", sat,
                kvq::f16_bits_to_f32(sat), plain, kvq::f16_bits_to_f32(plain));
    check(top == 65536.0f, "widest INT2 top code reconstructs 65536");
    check(sat == 0x7bff && plain == 0x7c00, "65536 saturates to 65504 in dequantize, a plain fp16 conversion gives +Inf");
  }

  std::printf("-- INT8 (symmetric, per token): x = {0.5, -2.54, 1.27, 0.0127}\n");
  const float x8[4] = {0.5f, -2.54f, 1.27f, 0.0127f};
  int8_t c8[4];
  uint32_t f = 0;
  const float s8 = kvq::encode_int8_group(4, [&](int i) { return x8[i]; }, [&](int i, int8_t c) { c8[i] = c; }, f);
  std::printf("  absmax=2.54 scale=absmax/127=%.9g (0x%08x)\n", s8, kvq::f32_bits(s8));
  for (int i = 0; i < 4; ++i)
    std::printf("  x=%-8g code=%4d (byte 0x%02x) -> code*scale=%.9g\n", x8[i], c8[i], uint8_t(c8[i]),
                kvq::int8_decode(c8[i], s8));
}

// ---------------------------------------------------------------------------------------------
void section_sizes() {
  std::printf("== 4. record sizes (bytes: K codes + K params + V codes + V params = record; bits/element; x vs bf16)\n");
  struct Fmt {
    const char* name;
    kvq::QuantDesc k, v;
  };
  for (int d : {64, 128, 256})
    for (int p : {16, 64}) {
      const int gk = p < 32 ? p : 32;
      const Fmt fmts[] = {
          {"none", kvq::kDescNone, kvq::kDescNone},
          {"INT8", kvq::kDescInt8, kvq::kDescInt8},
          {"INT4", kvq::desc_int4(gk), kvq::desc_int4(32)},
          {"K INT4 / V INT2", kvq::desc_int4(gk), kvq::desc_int2(32)},
          {"INT2", kvq::desc_int2(gk), kvq::desc_int2(32)},
      };
      for (const Fmt& f : fmts) {
        check(kvq::validate_layout(f.k, f.v, d, p) == kvq::Status::kSuccess, "layout valid");
        const kvq::RecordOffsets o = kvq::record_offsets(f.k, f.v, d, p);
        const double elems = 2.0 * d * p;
        std::printf("  D=%3d P=%2d Gk=%2d Gv=32 %-16s %5zu + %4zu + %5zu + %4zu = %6zu  %6.3f bits  %5.2fx\n", d, p,
                    gk, f.name, kvq::section_codes_bytes(f.k, d, p), kvq::section_params_bytes(f.k, kvq::Role::kKey, d, p),
                    kvq::section_codes_bytes(f.v, d, p), kvq::section_params_bytes(f.v, kvq::Role::kValue, d, p),
                    o.bytes, o.bytes * 8.0 / elems, elems * 2.0 / o.bytes);
      }
    }
}

// ---------------------------------------------------------------------------------------------
void section_packing_vectors() {
  std::printf("== 4. packing test vectors (a word whose element j holds code j mod 2^b)\n");
  // Key words: element j = channel j of token 0; value words: element j = (token j%2, channel j/2).
  const uint32_t k2 = kvq::pack_word<2, D>(kvq::Role::kKey, 0, [](int, int c) { return uint32_t(c % 4); });
  const uint32_t k4 = kvq::pack_word<4, D>(kvq::Role::kKey, 0, [](int, int c) { return uint32_t(c % 16); });
  const uint32_t v2 = kvq::pack_word<2, D>(kvq::Role::kValue, 0, [](int t, int c) { return uint32_t((2 * c + t) % 4); });
  const uint32_t v4 = kvq::pack_word<4, D>(kvq::Role::kValue, 0, [](int t, int c) { return uint32_t((2 * c + t) % 16); });
  std::printf("  INT2 key word 0   = 0x%08x\n", k2);
  std::printf("  INT4 key word 0   = 0x%08x\n", k4);
  std::printf("  INT2 value word 0 = 0x%08x\n", v2);
  std::printf("  INT4 value word 0 = 0x%08x\n", v4);
  std::printf("  bit offsets b*(j/2)+16*(j%%2), INT2:");
  for (int j = 0; j < 16; ++j) std::printf(" %d", kvq::packed_bit_offset(2, j));
  std::printf("\n  bit offsets, INT4:");
  for (int j = 0; j < 8; ++j) std::printf(" %d", kvq::packed_bit_offset(4, j));
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------------
void section_worked_example() {
  std::printf("== 5. worked example: CacheConfig<bf16, D=64, P=16, Int2<16>, Int2<16>>\n");
  constexpr kvq::RecordOffsets o = Cfg::record;
  std::printf("record: k_codes=%zu k_params=%zu v_codes=%zu v_params=%zu bytes=%zu\n", o.k_codes, o.k_params,
              o.v_codes, o.v_params, o.bytes);

  uint32_t flags0 = 0, flags1 = 0;
  const std::vector<uint8_t> rec = encode_example(0x00, flags0);
  const std::vector<uint8_t> rec_ff = encode_example(0xff, flags1);
  check(rec == rec_ff, "every byte of the record is written (fill 0x00 and 0xff give the same record)");
  check(flags0 == 0, "no sanitation flags for the example inputs");
  std::printf("record FNV-1a-64 = 0x%016llx\n", (unsigned long long)fnv1a64(rec.data(), rec.size()));

  // ---- 5.1 key group: channel 0, tokens 0..15 ----
  std::printf("-- 5.1 key group (channel c=0, tokens t=0..15) = kBase\n");
  uint32_t kcode[16];
  uint32_t f = 0;
  const kvq::AsymParams kp = kvq::encode_asym_group<2>(
      16, [](int k) { return kvq::bf16::from_float(key_input(k, 0)).to_float(); },
      [&](int k, uint32_t code) { kcode[k] = code; }, f);
  float lo = kBase[0], hi = kBase[0];
  for (float x : kBase) lo = std::fmin(lo, x), hi = std::fmax(hi, x);
  const float kq = kvq::div_rn(hi - lo, 3.0f);
  const float kzero = kvq::f16_bits_to_f32(kp.zero), kscale = kvq::f16_bits_to_f32(kp.scale);
  std::printf("  lo=%g hi=%g (hi-lo)/3 = %.9g (fp32 0x%08x)\n", lo, hi, kq, kvq::f32_bits(kq));
  std::printf("  zero  = fp16(lo)         = 0x%04x = %.9g\n", kp.zero, kzero);
  std::printf("  scale = fp16((hi-lo)/3)  = 0x%04x = %.9g\n", kp.scale, kscale);
  std::printf("  %3s %9s %14s %6s %5s %14s %12s\n", "t", "x", "(x-zero)/scale", "rint", "code", "x'=fma", "x'-x");
  for (int t = 0; t < 16; ++t) {
    const float x = kBase[t];
    const float q = kvq::div_rn(x - kzero, kscale);
    const float r = kvq::asym_decode(kcode[t], kzero, kscale);
    std::printf("  %3d %9g %14.9g %6g %5u %14.9g %12.9g\n", t, x, q, std::rint(q), kcode[t], r, r - x);
    check(r == kvq::decode_record_element<Cfg, kvq::Role::kKey>(rec.data(), t, 0), "key decode matches record");
  }
  std::printf("  params in the record: scale at byte %zu = %04x, zero at byte %zu = %04x\n", o.k_params + 0,
              rd16(&rec[o.k_params + 0]), o.k_params + 2 * D, rd16(&rec[o.k_params + 2 * D]));
  check(rd16(&rec[o.k_params]) == kp.scale && rd16(&rec[o.k_params + 2 * D]) == kp.zero, "key params in record");
  {  // why codes come from the stored scale: t=12 with the unrounded fp32 quotient would tie
    const float q_unrounded = kvq::div_rn(kBase[12] - lo, kq);
    std::printf("  t=12 with the unrounded scale: (0.5 - (-2)) / %.9g = %.9g -> rint %g (code %u with the stored scale)\n",
                kq, q_unrounded, std::rint(q_unrounded), kcode[12]);
  }

  // ---- 5.2 key word 0: token 0, channels 0..15 ----
  std::printf("-- 5.2 key word 0 (token 0, channels 0..15; K[0][c] = kBase[c], so code(0,c) = code of kBase[c])\n");
  // code of (t, c) for c < 16: every channel group of channels 0..15 holds kBase, same params.
  auto key_code = [&](int t, int c) { return kcode[(t + c) % 16]; };
  const uint32_t kw0 = kvq::pack_word<2, D>(kvq::Role::kKey, 0, key_code);
  std::printf("  %3s %3s %3s %4s %4s\n", "j", "c", "code", "bit", "bits");
  for (int j = 0; j < 16; ++j) {
    const kvq::CodeSlot s = kvq::code_slot<2, D>(kvq::Role::kKey, 0, j);
    check(s.word == 0 && s.shift == kvq::packed_bit_offset(2, j), "key code_slot");
    std::printf("  %3d %3d %3u %4d  %u%u\n", j, j, key_code(0, j), s.shift, (key_code(0, j) >> 1) & 1, key_code(0, j) & 1);
  }
  std::printf("  word 0 = 0x%08x ; in memory (record bytes 0..3): ", kw0);
  print_bytes(&rec[o.k_codes], 4);
  std::printf("\n");
  check(rd32(&rec[o.k_codes]) == kw0, "key word 0 in record");
  const uint32_t kw1 = kvq::pack_word<2, D>(kvq::Role::kKey, 4, key_code);  // token 1, channels 0..15
  std::printf("  word 4 (token 1, channels 0..15) = 0x%08x ; record bytes 16..19: ", kw1);
  print_bytes(&rec[o.k_codes + 16], 4);
  std::printf("\n");
  check(rd32(&rec[o.k_codes + 16]) == kw1, "key word 4 in record");
  std::printf("  first 16 bytes of K codes: ");
  print_bytes(&rec[o.k_codes], 16);
  std::printf("\n  first 16 bytes of K params: ");
  print_bytes(&rec[o.k_params], 16);
  std::printf("\n");

  // ---- 5.3 value group: token 0, channels 0..15 ----
  std::printf("-- 5.3 value group (token t=0, channels c=0..15) = vBase\n");
  uint32_t vcode[16];
  const kvq::AsymParams vp = kvq::encode_asym_group<2>(
      16, [](int k) { return kvq::bf16::from_float(value_input(0, k)).to_float(); },
      [&](int k, uint32_t code) { vcode[k] = code; }, f);
  lo = vBase[0], hi = vBase[0];
  for (float x : vBase) lo = std::fmin(lo, x), hi = std::fmax(hi, x);
  const float vq = kvq::div_rn(hi - lo, 3.0f);
  const float vzero = kvq::f16_bits_to_f32(vp.zero), vscale = kvq::f16_bits_to_f32(vp.scale);
  std::printf("  lo=%g hi=%g (hi-lo)/3 = %.9g (fp32 0x%08x)\n", lo, hi, vq, kvq::f32_bits(vq));
  std::printf("  zero  = fp16(lo)         = 0x%04x = %.9g\n", vp.zero, vzero);
  std::printf("  scale = fp16((hi-lo)/3)  = 0x%04x = %.9g\n", vp.scale, vscale);
  std::printf("  %3s %9s %14s %6s %5s %14s %12s\n", "c", "x", "(x-zero)/scale", "rint", "code", "x'=fma", "x'-x");
  for (int c = 0; c < 16; ++c) {
    const float x = vBase[c];
    const float q = kvq::div_rn(x - vzero, vscale);
    const float r = kvq::asym_decode(vcode[c], vzero, vscale);
    std::printf("  %3d %9g %14.9g %6g %5u %14.9g %12.9g\n", c, x, q, std::rint(q), vcode[c], r, r - x);
    check(r == kvq::decode_record_element<Cfg, kvq::Role::kValue>(rec.data(), 0, c), "value decode matches record");
  }
  const size_t vz_off = o.v_params + size_t(P) * (D / G) * 2;
  std::printf("  params in the record: scale at byte %zu = %04x, zero at byte %zu = %04x\n", o.v_params,
              rd16(&rec[o.v_params]), vz_off, rd16(&rec[vz_off]));
  check(rd16(&rec[o.v_params]) == vp.scale && rd16(&rec[vz_off]) == vp.zero, "value params in record");

  // ---- 5.4 value word 0: tokens 0 and 1, channels 0..7 ----
  std::printf("-- 5.4 value word 0 (tokens 0,1 x channels 0..7; V[1][c] = 2*vBase[c+1], same codes as vBase[c+1])\n");
  auto value_code = [&](int t, int c) { return vcode[(c + t) % 16]; };
  const uint32_t vw0 = kvq::pack_word<2, D>(kvq::Role::kValue, 0, value_code);
  std::printf("  %3s %3s %3s %4s %4s\n", "j", "t", "c", "code", "bit");
  for (int j = 0; j < 16; ++j) {
    const kvq::TokenChannel tc = kvq::slot_element<2, D>(kvq::Role::kValue, 0, j);
    const kvq::CodeSlot s = kvq::code_slot<2, D>(kvq::Role::kValue, tc.t, tc.c);
    check(s.word == 0 && s.shift == kvq::packed_bit_offset(2, j), "value code_slot");
    std::printf("  %3d %3d %3d %4u %4d\n", j, tc.t, tc.c, value_code(tc.t, tc.c), s.shift);
  }
  std::printf("  word 0 = 0x%08x ; in memory (record bytes %zu..%zu): ", vw0, o.v_codes, o.v_codes + 3);
  print_bytes(&rec[o.v_codes], 4);
  std::printf("\n");
  check(rd32(&rec[o.v_codes]) == vw0, "value word 0 in record");
  std::printf("  token 1 group params: scale at byte %zu = %04x (%.9g), zero at byte %zu = %04x (%.9g)\n",
              o.v_params + 2 * (D / G), rd16(&rec[o.v_params + 2 * (D / G)]),
              kvq::f16_bits_to_f32(rd16(&rec[o.v_params + 2 * (D / G)])), vz_off + 2 * (D / G),
              rd16(&rec[vz_off + 2 * (D / G)]), kvq::f16_bits_to_f32(rd16(&rec[vz_off + 2 * (D / G)])));
  std::printf("  first 16 bytes of V codes: ");
  print_bytes(&rec[o.v_codes], 16);
  std::printf("\n  first 16 bytes of V params: ");
  print_bytes(&rec[o.v_params], 16);
  std::printf("\n");

  // ---- 6. reading element (t=5, c=37) ----
  std::printf("== 6. reading (t=5, c=37)\n");
  {
    const int t = 5, c = 37;
    const kvq::CodeSlot s = kvq::code_slot<2, D>(kvq::Role::kKey, t, c);
    const uint32_t word = rd32(&rec[o.k_codes + 4 * size_t(s.word)]);
    const uint32_t code = (word >> s.shift) & 3u;
    const int g = t / G;
    const size_t so = o.k_params + 2 * (size_t(2 * g) * D + c), zo = o.k_params + 2 * (size_t(2 * g + 1) * D + c);
    const float sc = kvq::f16_bits_to_f32(rd16(&rec[so])), ze = kvq::f16_bits_to_f32(rd16(&rec[zo]));
    const float r = std::fma(float(code), sc, ze);
    std::printf("  K: input %g; word %d (byte %zu) = 0x%08x, shift %d, code %u; scale@%zu=0x%04x (%.9g) "
                "zero@%zu=0x%04x (%.9g); value %.9g\n",
                kvq::bf16::from_float(key_input(t, c)).to_float(), s.word, o.k_codes + 4 * size_t(s.word), word,
                s.shift, code, so, rd16(&rec[so]), sc, zo, rd16(&rec[zo]), ze, r);
    check(r == kvq::decode_record_element<Cfg, kvq::Role::kKey>(rec.data(), t, c), "reading K(5,37)");
  }
  {
    const int t = 5, c = 37;
    const kvq::CodeSlot s = kvq::code_slot<2, D>(kvq::Role::kValue, t, c);
    const uint32_t word = rd32(&rec[o.v_codes + 4 * size_t(s.word)]);
    const uint32_t code = (word >> s.shift) & 3u;
    const int groups = D / G;
    const size_t so = o.v_params + 2 * (size_t(t) * groups + c / G);
    const size_t zo = o.v_params + 2 * (size_t(P) * groups + size_t(t) * groups + c / G);
    const float sc = kvq::f16_bits_to_f32(rd16(&rec[so])), ze = kvq::f16_bits_to_f32(rd16(&rec[zo]));
    const float r = std::fma(float(code), sc, ze);
    std::printf("  V: input %g; word %d (byte %zu) = 0x%08x, shift %d, code %u; scale@%zu=0x%04x (%.9g) "
                "zero@%zu=0x%04x (%.9g); value %.9g\n",
                kvq::bf16::from_float(value_input(t, c)).to_float(), s.word, o.v_codes + 4 * size_t(s.word), word,
                s.shift, code, so, rd16(&rec[so]), sc, zo, rd16(&rec[zo]), ze, r);
    check(r == kvq::decode_record_element<Cfg, kvq::Role::kValue>(rec.data(), t, c), "reading V(5,37)");
  }
}

}  // namespace

int main() {
  const uint32_t one = 1;
  uint8_t first;
  std::memcpy(&first, &one, 1);
  check(first == 1, "little-endian host (records are little-endian)");
  std::printf("KVQ_FORMAT_VERSION %d\n", KVQ_FORMAT_VERSION);
  section_scalar_rules();
  section_sizes();
  section_packing_vectors();
  section_worked_example();
  std::printf(g_failures ? "%d CHECKS FAILED\n" : "all checks passed\n", g_failures);
  return g_failures ? 1 : 0;
}

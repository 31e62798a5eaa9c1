// quant/offset_code.hpp: every code at every position of a packed word becomes the exact fp16
// pair (offset + code) whatever the word's other codes are, and the offsets and their negated
// patterns are what the decode kernel subtracts.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>

#include "kvq/numeric/dtype.hpp"
#include "kvq/quant/offset_code.hpp"

namespace {

float half_value(uint32_t pair, int hi) { return kvq::fp16{uint16_t(hi ? pair >> 16 : pair & 0xFFFFu)}.to_float(); }

template <int Bits>
void check_all_positions() {
  using namespace kvq::detail;
  std::mt19937 rng(1234 + Bits);
  const uint32_t cmax = (1u << Bits) - 1u;
  for (int p = 0; p < 16; p += Bits) {
    CAPTURE(p);
    const int t = offset_code_target<Bits>(p);
    CHECK(t + Bits <= 10);  // the code fits the mantissa
    const float offset = float(offset_code_offset<Bits>(p));
    CHECK(offset <= (Bits == 2 ? 64.0f : 256.0f));  // the precision the key bias gives up (offset_code.hpp)
    CHECK(half_value(offset_code_neg_offset_pair<Bits>(p), 0) == -offset);
    CHECK(half_value(offset_code_neg_offset_pair<Bits>(p), 1) == -offset);
    for (int trial = 0; trial < 200; ++trial) {
      const uint32_t lo = rng() & cmax, hi = rng() & cmax;
      const uint32_t clear = ~((cmax << p) * 0x00010001u);
      const uint32_t x = (rng() & clear) | (lo << p) | (hi << (16 + p));
      const uint32_t pair = offset_code_pair<Bits>(x, p);
      REQUIRE(half_value(pair, 0) == offset + float(lo));
      REQUIRE(half_value(pair, 1) == offset + float(hi));
    }
  }
}

}  // namespace

// Shifts other than 0 a word of packed pairs needs.
template <int Bits>
int nonzero_shifts() {
  int seen[32] = {}, n = 0;
  for (int p = 0; p < 16; p += Bits) {
    const int s = kvq::detail::offset_code_shift<Bits>(p);
    if (s != 0 && !seen[s + 16]++) ++n;
  }
  return n;
}

TEST_CASE("offset codes: INT2 at every position is (offset + code) exactly, offsets 64, 16 and 4") {
  check_all_positions<2>();
  CHECK(nonzero_shifts<2>() == 2);  // a word's 8 pairs: positions 4, 6, 8 unshifted, two shifts for the rest
}

TEST_CASE("offset codes: INT4 at every position is (offset + code) exactly, offsets 256, 64 and 16") {
  check_all_positions<4>();
  CHECK(nonzero_shifts<4>() == 2);  // a word's 4 pairs: position 4 unshifted, 0 left by 4, 8 and 12 right by 6
}

// quant/subnormal_values.hpp, the decode kernel's blocked values: lane g's channel e of a 32-channel
// block, read from the packed V word the lane loads (blocked_value_word, at blocked_value_lane_bit;
// both checked here against packing.hpp's code_slot), is the exact fp16 subnormal pair
// (code(2p) * 2^(q - 24), code(2p + 1) * 2^(q - 24)) whatever the word's other codes are; and the
// shift is the same for the lane's four channels (INT2) or for every lane (INT4), so a word takes
// one shift.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>

#include "kvq/numeric/dtype.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/subnormal_values.hpp"

namespace {

float half_value(uint32_t pair, int hi) { return kvq::fp16{uint16_t(hi ? pair >> 16 : pair & 0xFFFFu)}.to_float(); }

template <int Bits>
void check_lane_channels() {
  using namespace kvq::detail;
  constexpr int D = 128, n = 16 / Bits;  // channels of a token pair's word
  std::mt19937 rng(77 + Bits);
  for (int g = 0; g < 8; ++g) {
    const int lane_bit = blocked_value_lane_bit<Bits>(g);
    for (int e = 0; e < 4; ++e) {
      CAPTURE(g);
      CAPTURE(e);
      const int q = subnormal_value_bit<Bits>(e);
      CHECK(q + Bits <= 10);  // inside the mantissa: exponent field 0, a subnormal
      CHECK(subnormal_value_shift<Bits>(lane_bit, e) == (Bits == 2 ? lane_bit : (e < 2 ? 0 : 8)));
      for (int p = 0; p < 4; ++p)
        for (int B = 0; B < D / 32; ++B) {
          const int c = 32 * B + 4 * g + e;
          const kvq::CodeSlot lo = kvq::code_slot<Bits, D>(kvq::Role::kValue, 2 * p, c);
          const kvq::CodeSlot hi = kvq::code_slot<Bits, D>(kvq::Role::kValue, 2 * p + 1, c);
          const int word = p * (D / n) + blocked_value_word<Bits>(B, g);  // the word the lane loads
          REQUIRE(lo.word == word);
          REQUIRE(hi.word == word);
          REQUIRE(lo.shift == lane_bit + Bits * e);
          REQUIRE(hi.shift == 16 + lane_bit + Bits * e);
        }
      const uint32_t cmax = (1u << Bits) - 1u;
      for (int trial = 0; trial < 200; ++trial) {
        const uint32_t a = rng() & cmax, b = rng() & cmax, at = lane_bit + Bits * e;
        const uint32_t x = (rng() & ~((cmax << at) * 0x00010001u)) | (a << at) | (b << (16 + at));
        const uint32_t pair = subnormal_value_pair<Bits>(x, lane_bit, e);
        REQUIRE(half_value(pair, 0) * subnormal_unit(q) == float(a));
        REQUIRE(half_value(pair, 1) * subnormal_unit(q) == float(b));
      }
    }
  }
}

}  // namespace

TEST_CASE("subnormal values: INT2 lane channels are exact subnormal pairs, one shift a word") { check_lane_channels<2>(); }

TEST_CASE("subnormal values: INT4 lane channels are exact subnormal pairs, one shift a word") { check_lane_channels<4>(); }

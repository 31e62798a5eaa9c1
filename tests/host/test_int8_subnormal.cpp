// quant/int8_subnormal.hpp, the decode kernel's INT8 keys: every INT8 code at every byte position of
// a word, read to either half of a pair, is the exact fp16 subnormal (x + 128) 2^-24 whatever the
// word's other bytes are; 2^24 times it minus 128 gives the code back, and the offset pair is
// -128 2^-24 in both halves.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>

#include "kvq/quant/int8_subnormal.hpp"
#include "kvq/quant/subnormal_code.hpp"

TEST_CASE("int8 subnormal: every code at every byte position is an exact fp16 subnormal pair") {
  using namespace kvq::detail;
  std::mt19937 rng(8);
  for (int x = -128; x <= 127; ++x)
    for (int e0 = 0; e0 < 4; ++e0)
      for (int e1 = 0; e1 < 4; ++e1) {
        if (e1 == e0) continue;
        CAPTURE(x);
        CAPTURE(e0);
        CAPTURE(e1);
        const int y = int(rng() % 256) - 128;  // the other code of the pair
        uint32_t w = rng();
        w = (w & ~(0xFFu << (8 * e0))) | (uint32_t(uint8_t(int8_t(x))) << (8 * e0));
        w = (w & ~(0xFFu << (8 * e1))) | (uint32_t(uint8_t(int8_t(y))) << (8 * e1));
        const uint32_t pair = int8_subnormal_pair(int8_subnormal_word(w), e0, e1);
        REQUIRE((pair & 0x7C007C00u) == 0u);  // exponent fields 0: subnormals (or zero)
        REQUIRE((pair & 0x80008000u) == 0u);  // positive
        REQUIRE(half_low_f32(pair) * kInt8SubnormalUnit - 128.0f == float(x));
        REQUIRE(half_high_f32(pair) * kInt8SubnormalUnit - 128.0f == float(y));
      }
}

TEST_CASE("int8 subnormal: the offset pair is -128 2^-24 in both halves") {
  using namespace kvq::detail;
  CHECK(half_low_f32(kInt8SubnormalNegOffsetPair) * kInt8SubnormalUnit == -128.0f);
  CHECK(half_high_f32(kInt8SubnormalNegOffsetPair) * kInt8SubnormalUnit == -128.0f);
}

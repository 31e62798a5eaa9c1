// kvq/quant/subnormal_values.hpp - where the decode kernel's blocked values read a lane's codes
// as fp16 subnormals (subnormal_code.hpp), one shift a word.
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/subnormal_code.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Decode attention's blocked values (decode/record_tile.cuh): lane g takes channels 4g .. 4g+3 of
// every 32-channel block. In the packed V words of a token pair (packing.hpp: n = 16 / Bits
// channels a word, token 2p in the low half-words, 2p+1 in the high ones) they sit in word
// blocked_value_word(B, g) of the pair, channel e at bit blocked_value_lane_bit(g) + Bits * e of
// both half-words.
template <int Bits>
KVQ_HD_CONSTEXPR int blocked_value_word(int B, int g) {
  return 32 / (16 / Bits) * B + 4 * g / (16 / Bits);
}
template <int Bits>
KVQ_HD_CONSTEXPR int blocked_value_lane_bit(int g) {
  return Bits * ((4 * g) % (16 / Bits));
}

// The pair is read as two fp16 subnormals code * 2^(q - 24) at bit q = subnormal_value_bit(e)
// after a right shift of the word by subnormal_value_shift(lane_bit, e) (subnormal_code_pair):
// INT2 shifts by lane_bit (0 or 8) for all four channels, INT4 by 0 or 8 (lane_bit is 0).
template <int Bits>
KVQ_HD_CONSTEXPR int subnormal_value_bit(int e) {
  return subnormal_code_bit<Bits>(Bits * e);
}
template <int Bits>
KVQ_HD_CONSTEXPR int subnormal_value_shift(int lane_bit, int e) {
  return lane_bit + Bits * e - subnormal_value_bit<Bits>(e);
}
template <int Bits>
KVQ_HD uint32_t subnormal_value_pair(uint32_t w, int lane_bit, int e) {
  return subnormal_code_pair<Bits>(w, lane_bit + Bits * e, subnormal_value_bit<Bits>(e));
}

}  // namespace detail
KVQ_NAMESPACE_END

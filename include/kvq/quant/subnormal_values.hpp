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
// every 32-channel block; in a packed V word (a token pair, packing.hpp) the lane's channel e sits
// at bit lane_bit + Bits * e of both half-words (low: token 2p, high: token 2p+1), with lane_bit =
// Bits * (4g mod 16 / Bits). The pair is read as two fp16 subnormals code * 2^(q - 24) at bit q =
// subnormal_value_bit(e) after a right shift of the word by subnormal_value_shift(lane_bit, e):
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
  return (w >> subnormal_value_shift<Bits>(lane_bit, e)) & packed_pair_mask(Bits, subnormal_value_bit<Bits>(e));
}

}  // namespace detail
KVQ_NAMESPACE_END

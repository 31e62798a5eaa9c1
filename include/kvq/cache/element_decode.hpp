// kvq/cache/element_decode.hpp - dequantize one element of a record section (the reading side of
// docs/FORMAT.md). Used by the host reference, the dequantize kernel and the tests.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvq/cache/config.hpp"
#include "kvq/quant/record_layout.hpp"
#include "kvq/numeric/bits.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/scalar.hpp"

KVQ_NAMESPACE_BEGIN

// Key parameters of the token group holding token t: scale[D] then zero[D], fp16 bits.
template <class Q, int D>
KVQ_HD const uint16_t* key_params_row(const uint8_t* params, int t) {
  return reinterpret_cast<const uint16_t*>(params) + size_t(2 * (t / Q::group)) * D;
}

// Stored parameters of an asymmetric group that covers (t, c).
template <class Q, Role R, int D, int P>
KVQ_HD AsymParams asym_params_at(const uint8_t* params, int t, int c) {
  const uint16_t* p16 = reinterpret_cast<const uint16_t*>(params);
  if constexpr (R == Role::kKey) {
    const uint16_t* row = key_params_row<Q, D>(params, t);
    return AsymParams{row[c], row[D + c]};
  }
  constexpr int groups = D / Q::group;
  return AsymParams{p16[t * groups + c / Q::group], p16[P * groups + t * groups + c / Q::group]};
}

// Value of (token t, channel c) of a section, in fp32. T is the model dtype ("none" storage).
template <class Q, Role R, int D, int P, class T>
KVQ_HD float decode_element(const uint8_t* codes, const uint8_t* params, int t, int c) {
  if constexpr (Q::kind == QuantKind::kNone) {
    return reinterpret_cast<const T*>(codes)[t * D + c].to_float();
  } else if constexpr (Q::kind == QuantKind::kInt8) {
    return int8_decode(reinterpret_cast<const int8_t*>(codes)[t * D + c], reinterpret_cast<const float*>(params)[t]);
  } else {
    const CodeSlot s = code_slot<Q::bits, D>(R, t, c);
    const uint32_t code = (reinterpret_cast<const uint32_t*>(codes)[s.word] >> s.shift) & uint32_t(Q::max_code);
    const AsymParams p = asym_params_at<Q, R, D, P>(params, t, c);
    return asym_decode(code, f16_bits_to_f32(p.zero), f16_bits_to_f32(p.scale));
  }
}

// Dequantized value of (token t, channel c) of the K (R = kKey) or V (R = kValue) half of a record.
template <class Cfg, Role R>
KVQ_HD float decode_record_element(const uint8_t* record, int t, int c) {
  constexpr RecordOffsets o = Cfg::record;
  using Q = std::conditional_t<R == Role::kKey, typename Cfg::k_quant, typename Cfg::v_quant>;
  return R == Role::kKey
             ? decode_element<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.k_codes, record + o.k_params, t, c)
             : decode_element<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.v_codes, record + o.v_params, t, c);
}

KVQ_NAMESPACE_END

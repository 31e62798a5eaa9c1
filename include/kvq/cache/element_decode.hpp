// kvq/cache/element_decode.hpp - dequantize one element of a record section (the reading side of
// docs/FORMAT.md) through its format's codec (codec/codec.hpp). Used by the host reference, the
// element-wise decode kernel, the token reads of attention/token_source.hpp and the tests.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kvq/cache/config.hpp"
#include "kvq/codec/asym_params.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/record_layout.hpp"

KVQ_NAMESPACE_BEGIN

// The format of the K (R = kKey) or V (R = kValue) half of configuration Cfg's records.
template <class Cfg, Role R>
using role_quant = std::conditional_t<R == Role::kKey, typename Cfg::k_quant, typename Cfg::v_quant>;

// Value of (token t, channel c) of a section, in fp32. T is the model dtype ("none" storage).
template <class Q, Role R, int D, int P, class T>
KVQ_HD float decode_element(const uint8_t* codes, const uint8_t* params, int t, int c) {
  return Codec<Q>::template decode_element<R, D, P, T>(codes, params, t, c);
}

// Dequantized value of (token t, channel c) of the K (R = kKey) or V (R = kValue) half of a record.
template <class Cfg, Role R>
KVQ_HD float decode_record_element(const uint8_t* record, int t, int c) {
  constexpr RecordOffsets o = Cfg::record;
  using Q = role_quant<Cfg, R>;
  return R == Role::kKey
             ? decode_element<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.k_codes, record + o.k_params, t, c)
             : decode_element<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.v_codes, record + o.v_params, t, c);
}

KVQ_NAMESPACE_END

// kvq/codec/asym_params.hpp - where the stored scale and zero point of an INT2 / INT4 element are in
// its record section (docs/FORMAT.md 4.5): keys scale[D] then zero[D] per key group, values
// scale[P][D/Gv] then zero[P][D/Gv].
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/quant/formats.hpp"
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

KVQ_NAMESPACE_END

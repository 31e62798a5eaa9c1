// kvq/cache/chunk_decode.hpp - dequantize 8 consecutive channels of one token of a record section
// at once, through its format's codec (codec/codec.hpp: the packed words and parameters are loaded
// once for the 8 elements, and each element goes through the same scalar decode as decode_element,
// so the values are identical to it bit for bit). Used by the dequantize kernel, the prefill tile
// loader's general path and the host reference's dequantize_sequence. The INT2 / INT4 pieces
// (key words, value pairs, subnormal reads) are in codec/asym_chunk.hpp, INT8's in
// codec/int8_codec.hpp.
#pragma once

#include <cstdint>

#include "kvq/cache/config.hpp"
#include "kvq/cache/element_decode.hpp"
#include "kvq/codec/asym_chunk.hpp"
#include "kvq/codec/chunk.hpp"
#include "kvq/codec/codec.hpp"

KVQ_NAMESPACE_BEGIN

// out[e] = value of (token t, channel c0 + e) of a section, e < 8, in fp32.
template <class Q, Role R, int D, int P, class T>
KVQ_HD void decode_chunk(const uint8_t* codes, const uint8_t* params, int t, int c0, float (&out)[kDecodeChunk]) {
  static_assert(D % kDecodeChunk == 0, "head dims are multiples of 8");
  Codec<Q>::template decode_chunk<R, D, P, T>(codes, params, t, c0, out);
}

// The K (R = kKey) or V (R = kValue) half of a record.
template <class Cfg, Role R>
KVQ_HD void decode_record_chunk(const uint8_t* record, int t, int c0, float (&out)[kDecodeChunk]) {
  constexpr RecordOffsets o = Cfg::record;
  using Q = role_quant<Cfg, R>;
  if constexpr (R == Role::kKey)
    decode_chunk<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.k_codes, record + o.k_params, t, c0, out);
  else
    decode_chunk<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.v_codes, record + o.v_params, t, c0, out);
}

KVQ_NAMESPACE_END

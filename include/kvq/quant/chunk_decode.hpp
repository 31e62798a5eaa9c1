// kvq/quant/chunk_decode.hpp - dequantize 8 consecutive channels of one token of a record
// section at once: the packed words and parameters are loaded once for the 8 elements, and each
// element goes through the same scalar decode as decode_element (element_decode.hpp), so the
// values are identical to it bit for bit. Used by the dequantize kernel and the host reference's
// dequantize_sequence.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvq/cache/config.hpp"
#include "kvq/quant/element_decode.hpp"

KVQ_NAMESPACE_BEGIN

constexpr int kDecodeChunk = 8;  // channels per chunk; c0 is a multiple of it

// 8 consecutive 16-bit values from a 16-byte aligned address, in one load on the device.
KVQ_HD void load8_u16(const uint16_t* p, uint16_t (&out)[kDecodeChunk]) {
#if defined(__CUDA_ARCH__)
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const uint32_t x[4] = {w.x, w.y, w.z, w.w};
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) out[e] = uint16_t(x[e / 2] >> (16 * (e % 2)));
#else
  std::memcpy(out, p, sizeof(out));
#endif
}

// The fp32 parameters of key channels c0 .. c0 + 7 (INT2 / INT4 keys) of the key group that holds
// token t: the same for every token of that group, so a caller decoding several of them
// converts them once and passes them to decode_key_chunk.
struct KeyChunkParams {
  float scale[kDecodeChunk], zero[kDecodeChunk];
};

template <class Q, int D>
KVQ_HD KeyChunkParams key_chunk_params(const uint8_t* params, int t, int c0) {
  // the 8 scales and 8 zeros are 16 aligned bytes each (rows of D fp16, c0 % 8 == 0)
  const uint16_t* row = key_params_row<Q, D>(params, t);
  uint16_t scale[kDecodeChunk], zero[kDecodeChunk];
  load8_u16(row + c0, scale);
  load8_u16(row + D + c0, zero);
  KeyChunkParams p;
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) {
    p.scale[e] = f16_bits_to_f32(scale[e]);
    p.zero[e] = f16_bits_to_f32(zero[e]);
  }
  return p;
}

// Keys (t, c0 .. c0 + 7) of an INT2 / INT4 key section with their group's parameters: channels
// c0 .. c0+7 are elements e of the word shifted to channel c0 (c0 % (32 / bits) is even).
template <class Q, int D>
KVQ_HD void decode_key_chunk(const uint8_t* codes, int t, int c0, const KeyChunkParams& p, float (&out)[kDecodeChunk]) {
  constexpr uint32_t mask = uint32_t(Q::max_code);
  const CodeSlot first = code_slot<Q::bits, D>(Role::kKey, t, c0);
  const uint32_t w = reinterpret_cast<const uint32_t*>(codes)[first.word] >> first.shift;
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) out[e] = asym_decode((w >> packed_bit_offset(Q::bits, e)) & mask, p.zero[e], p.scale[e]);
}

// Values (t, c0 .. c0 + 7) of an INT2 / INT4 value section from the words of t's token pair
// (`pair_words` = the section's words from code_slot(kValue, t, c0).word on; both tokens of a pair
// share them) and t's parity: channel c0 + e is element 2 (e % (n/2)) + parity of word e / (n/2).
// A caller decoding both tokens of a pair loads their words once.
template <class Q, int D, int P>
KVQ_HD void decode_value_chunk(const uint32_t* pair_words, const uint8_t* params, int t, int parity, int c0,
                               float (&out)[kDecodeChunk]) {
  constexpr int bits = Q::bits, half = 32 / bits / 2;
  static_assert(kDecodeChunk % half == 0, "a chunk is whole words of a token pair");
  constexpr uint32_t mask = uint32_t(Q::max_code);
  const AsymParams whole = asym_params_at<Q, Role::kValue, D, P>(params, t, c0);
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) {
    const uint32_t code = (pair_words[e / half] >> packed_bit_offset(bits, 2 * (e % half) + parity)) & mask;
    const AsymParams par = Q::group % kDecodeChunk == 0 ? whole : asym_params_at<Q, Role::kValue, D, P>(params, t, c0 + e);
    out[e] = asym_decode(code, f16_bits_to_f32(par.zero), f16_bits_to_f32(par.scale));
  }
}

// out[e] = value of (token t, channel c0 + e) of a section, e < 8, in fp32.
template <class Q, Role R, int D, int P, class T>
KVQ_HD void decode_chunk(const uint8_t* codes, const uint8_t* params, int t, int c0, float (&out)[kDecodeChunk]) {
  static_assert(D % kDecodeChunk == 0, "head dims are multiples of 8");
  if constexpr (Q::kind == QuantKind::kNone) {
    const T* row = reinterpret_cast<const T*>(codes) + t * D + c0;
    KVQ_UNROLL
    for (int e = 0; e < kDecodeChunk; ++e) out[e] = row[e].to_float();
  } else if constexpr (Q::kind == QuantKind::kInt8) {
    const int8_t* row = reinterpret_cast<const int8_t*>(codes) + t * D + c0;
    const float scale = reinterpret_cast<const float*>(params)[t];
    KVQ_UNROLL
    for (int e = 0; e < kDecodeChunk; ++e) out[e] = int8_decode(row[e], scale);
  } else {
    // The 8 codes sit in one packed word (keys; INT2 values) or two (INT4 values): code_slot of
    // the first channel gives the word and the shift of element 0 (packing.hpp); the parameters
    // come from asym_params_at, once for the chunk where a value group covers it.
    if constexpr (R == Role::kKey) {
      decode_key_chunk<Q, D>(codes, t, c0, key_chunk_params<Q, D>(params, t, c0), out);
    } else {
      const uint32_t* words = reinterpret_cast<const uint32_t*>(codes) + code_slot<Q::bits, D>(R, t, c0).word;
      decode_value_chunk<Q, D, P>(words, params, t, t & 1, c0, out);
    }
  }
}

// The K (R = kKey) or V (R = kValue) half of a record.
template <class Cfg, Role R>
KVQ_HD void decode_record_chunk(const uint8_t* record, int t, int c0, float (&out)[kDecodeChunk]) {
  constexpr RecordOffsets o = Cfg::record;
  using Q = std::conditional_t<R == Role::kKey, typename Cfg::k_quant, typename Cfg::v_quant>;
  if constexpr (R == Role::kKey)
    decode_chunk<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.k_codes, record + o.k_params, t, c0, out);
  else
    decode_chunk<Q, R, Cfg::head_dim, Cfg::page, typename Cfg::dtype>(record + o.v_codes, record + o.v_params, t, c0, out);
}

KVQ_NAMESPACE_END

// kvq/codec/asym_chunk.hpp - the pieces of the INT2 / INT4 chunk decode (codec.hpp, asym_codec.hpp)
// that the kernels also use one by one: a key chunk's word and its group's converted parameters
// (loaded once per key group by the prefill tile loader), a value chunk from a token pair's words
// (loaded once for both tokens), and the same with the codes read as fp16 subnormals
// (subnormal_code.hpp). Every piece gives Codec<IntAsym>::decode_chunk's values bit for bit
// (tests/host/test_chunk_decode.cpp).
#pragma once

#include <cstdint>

#include "kvq/codec/asym_params.hpp"
#include "kvq/codec/chunk.hpp"
#include "kvq/core/platform.hpp"
#include "kvq/numeric/bits.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/packing.hpp"
#include "kvq/quant/scalar.hpp"
#include "kvq/quant/subnormal_code.hpp"

KVQ_NAMESPACE_BEGIN

// Keys of INT2 / INT4 sections: channels c0 .. c0+7 are elements e of the word shifted to channel
// c0 (c0 % (32 / bits) is even); their 8 scales and 8 zeros are 16 aligned bytes each (rows of D
// fp16, c0 % 8 == 0).
template <class Q, int D>
KVQ_HD uint32_t key_chunk_word(const uint8_t* codes, int t, int c0) {
  static_assert(Q::bits != 3, "INT3 codes are two planes (packing.hpp read_code); no chunk pieces yet");
  const CodeSlot first = code_slot<Q::bits, D>(Role::kKey, t, c0);
  return reinterpret_cast<const uint32_t*>(codes)[first.word] >> first.shift;
}
template <class Q>
KVQ_HD uint32_t key_chunk_code(uint32_t word, int e) {
  return (word >> packed_bit_offset(Q::bits, e)) & uint32_t(Q::max_code);
}

// The fp32 parameters of key channels c0 .. c0 + 7 of the key group that holds token t: the same
// for every token of that group, so a caller decoding several of them (the prefill tile loader)
// converts them once and passes them to decode_key_chunk.
struct KeyChunkParams {
  float scale[kDecodeChunk], zero[kDecodeChunk];
};

template <class Q, int D>
KVQ_HD KeyChunkParams key_chunk_params(const uint8_t* params, int t, int c0) {
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

// Keys of a chunk from its word (key_chunk_word, already loaded) and its group's converted
// parameters (the values decode_chunk gives).
template <class Q>
KVQ_HD void decode_key_word(uint32_t w, const KeyChunkParams& p, float (&out)[kDecodeChunk]) {
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) out[e] = asym_decode(key_chunk_code<Q>(w, e), p.zero[e], p.scale[e]);
}

// Key parameters for decode_key_word_subnormal: the scales times 2^(24 - q) of each element's bit.
template <class Q>
KVQ_HD KeyChunkParams subnormal_key_params(const KeyChunkParams& p) {
  KeyChunkParams s = p;
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) s.scale[e] = p.scale[e] * detail::subnormal_code_unit<Q::bits>(Q::bits * (e >> 1));
  return s;
}

// decode_key_word with the codes read as fp16 subnormals (subnormal_code.hpp): element e of a chunk
// sits at bit bits x (e / 2) of half e % 2 (packing.hpp), so one AND serves a pair; `sp` from
// subnormal_key_params. The same values, bit for bit.
template <class Q>
KVQ_HD void decode_key_word_subnormal(uint32_t w, const KeyChunkParams& sp, float (&out)[kDecodeChunk]) {
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; e += 2) {
    const uint32_t pair = detail::subnormal_code_pair<Q::bits>(w, Q::bits * (e >> 1));
    out[e] = fmaf(detail::half_low_f32(pair), sp.scale[e], sp.zero[e]);
    out[e + 1] = fmaf(detail::half_high_f32(pair), sp.scale[e + 1], sp.zero[e + 1]);
  }
}

// Keys (t, c0 .. c0 + 7) with their group's converted parameters (the values decode_chunk gives).
template <class Q, int D>
KVQ_HD void decode_key_chunk(const uint8_t* codes, int t, int c0, const KeyChunkParams& p, float (&out)[kDecodeChunk]) {
  decode_key_word<Q>(key_chunk_word<Q, D>(codes, t, c0), p, out);
}

// Values of INT2 / INT4 sections: a token pair's word holds n/2 channels (n = 32 / bits); channel
// c0 + e of the token of parity `parity` is element 2 (e % (n/2)) + parity of word e / (n/2) of the
// pair's words from code_slot(kValue, t, c0).word on.
template <class Q>
KVQ_HD uint32_t value_chunk_code(const uint32_t* pair_words, int e, int parity) {
  static_assert(Q::bits != 3, "INT3 codes are two planes (packing.hpp read_code); no chunk pieces yet");
  constexpr int half = 32 / Q::bits / 2;
  static_assert(kDecodeChunk % half == 0, "a chunk is whole words of a token pair");
  return (pair_words[e / half] >> packed_bit_offset(Q::bits, 2 * (e % half) + parity)) & uint32_t(Q::max_code);
}

// Parameters of value element e of chunk (t, c0): `whole` (asym_params_at(t, c0)) when a value group
// covers the chunk, else element e's own.
template <class Q, int D, int P>
KVQ_HD AsymParams value_element_params(const uint8_t* params, int t, int c0, int e, const AsymParams& whole) {
  return Q::group % kDecodeChunk == 0 ? whole : asym_params_at<Q, Role::kValue, D, P>(params, t, c0 + e);
}

// Values of the token of parity `parity` of a chunk's token pair, from the pair's words (already
// loaded) and the stored parameters `par` of the one value group that covers the chunk
// (Q::group a multiple of 8; asym_params_at(t, c0)): the values decode_chunk gives.
template <class Q>
KVQ_HD void decode_value_words(const uint32_t* pair_words, int parity, const AsymParams& par, float (&out)[kDecodeChunk]) {
  static_assert(Q::group % kDecodeChunk == 0, "one value group covers the chunk");
  const float zero = f16_bits_to_f32(par.zero), scale = f16_bits_to_f32(par.scale);
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) out[e] = asym_decode(value_chunk_code<Q>(pair_words, e, parity), zero, scale);
}

// Both tokens of a chunk's token pair (out[0]: the even token, out[1]: the odd) with the codes read as
// fp16 subnormals: channel e's codes of the two tokens sit at the same bit of the two halves of
// word e / (n/2) (packing.hpp), one AND for both; one value group covers the chunk. The values
// decode_value_words gives, bit for bit.
template <class Q>
KVQ_HD void decode_value_pair_subnormal(const uint32_t* pair_words, const AsymParams& even, const AsymParams& odd,
                                        float (&out)[2][kDecodeChunk]) {
  static_assert(Q::group % kDecodeChunk == 0, "one value group covers the chunk");
  constexpr int half = 32 / Q::bits / 2;
  const float z0 = f16_bits_to_f32(even.zero), s0 = f16_bits_to_f32(even.scale);
  const float z1 = f16_bits_to_f32(odd.zero), s1 = f16_bits_to_f32(odd.scale);
  KVQ_UNROLL
  for (int e = 0; e < kDecodeChunk; ++e) {
    const int p = Q::bits * (e % half), q = detail::subnormal_code_bit_two<Q::bits>(p);  // two bits q: two s x unit each
    const uint32_t pair = detail::subnormal_code_pair<Q::bits>(pair_words[e / half], p, q);
    const float unit = detail::subnormal_unit(q);
    out[0][e] = fmaf(detail::half_low_f32(pair), s0 * unit, z0);
    out[1][e] = fmaf(detail::half_high_f32(pair), s1 * unit, z1);
  }
}

// Values (t, c0 .. c0 + 7) given the pair's words and t's parity: a caller decoding both tokens of
// a pair (the prefill tile loader) loads their words once (the values decode_chunk gives).
template <class Q, int D, int P>
KVQ_HD void decode_value_chunk(const uint32_t* pair_words, const uint8_t* params, int t, int parity, int c0,
                               float (&out)[kDecodeChunk]) {
  const AsymParams whole = asym_params_at<Q, Role::kValue, D, P>(params, t, c0);
  if constexpr (Q::group % kDecodeChunk == 0) {
    decode_value_words<Q>(pair_words, parity, whole, out);
  } else {
    KVQ_UNROLL
    for (int e = 0; e < kDecodeChunk; ++e) {
      const AsymParams par = value_element_params<Q, D, P>(params, t, c0, e, whole);
      out[e] = asym_decode(value_chunk_code<Q>(pair_words, e, parity), f16_bits_to_f32(par.zero), f16_bits_to_f32(par.scale));
    }
  }
}

KVQ_NAMESPACE_END

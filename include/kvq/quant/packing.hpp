// kvq/quant/packing.hpp - where each code of an INT2/INT4 record sits (docs/FORMAT.md section 4).
//
// Codes are packed little-endian into 32-bit words of n = 32/b codes. Inside a word, element j
// sits at bit  b*(j/2) + 16*(j%2): even elements fill the low half-word, odd elements the high
// half-word, so one shift and one mask turn a word into pairs (j, j+1) ready for a packed half2.
//
//   keys   (K section): word = one token, n consecutive channels; element j = channel c0 + j.
//          words are token-major: word index = t * (D / n) + c / n.
//   values (V section): word = a token pair (2p, 2p+1), n/2 consecutive channels;
//          element j = (token 2p + j%2, channel c0 + j/2).
//          words are pair-major: word index = (t / 2) * (D / (n/2)) + c / (n/2).
// INT8 codes are bytes, token-major, channels in order; "none" stores the model dtype the same way.
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN

KVQ_HD int packed_bit_offset(int bits, int element) { return bits * (element >> 1) + 16 * (element & 1); }

// The mask that keeps the codes at bit q of both half-words of a word (a pair's two elements, alone
// in their halves): the first step of turning a word into a packed half2 operand.
KVQ_HD_CONSTEXPR uint32_t packed_pair_mask(int bits, int q) { return (((1u << bits) - 1u) << q) * 0x00010001u; }

// Position of the code of (token t, channel c) inside a packed section of D channels.
struct CodeSlot {
  int word;
  int shift;
};

template <int Bits, int D>
KVQ_HD CodeSlot code_slot(Role role, int t, int c) {
  constexpr int n = 32 / Bits;
  if (role == Role::kKey) {
    return CodeSlot{t * (D / n) + c / n, packed_bit_offset(Bits, c % n)};
  }
  constexpr int half = n / 2;
  return CodeSlot{(t >> 1) * (D / half) + c / half, packed_bit_offset(Bits, 2 * (c % half) + (t & 1))};
}

// Inverse of code_slot: the (token, channel) of element j of word w.
struct TokenChannel {
  int t;
  int c;
};

template <int Bits, int D>
KVQ_HD TokenChannel slot_element(Role role, int word, int j) {
  constexpr int n = 32 / Bits;
  if (role == Role::kKey) {
    constexpr int words_per_token = D / n;
    return TokenChannel{word / words_per_token, (word % words_per_token) * n + j};
  }
  constexpr int half = n / 2;
  constexpr int words_per_pair = D / half;
  return TokenChannel{2 * (word / words_per_pair) + (j & 1), (word % words_per_pair) * half + (j >> 1)};
}

// Builds packed word `word` of a section from its codes; code_at(t, c) returns a code < 2^Bits.
KVQ_EXEC_CHECK_DISABLE
template <int Bits, int D, class CodeAt>
KVQ_HD uint32_t pack_word(Role role, int word, CodeAt&& code_at) {
  uint32_t w = 0;
KVQ_UNROLL
  for (int j = 0; j < 32 / Bits; ++j) {
    const TokenChannel tc = slot_element<Bits, D>(role, word, j);
    w |= static_cast<uint32_t>(code_at(tc.t, tc.c)) << packed_bit_offset(Bits, j);
  }
  return w;
}

KVQ_NAMESPACE_END

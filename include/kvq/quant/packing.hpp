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
// INT3 sections are two planes: the low 2 bits of every code, packed as an INT2 section (P x D / 4
// bytes), then the high bit of every code packed by the same rules with b = 1 (n = 32 codes a
// word, element j at bit j/2 + 16*(j%2); P x D / 8 bytes). So an INT3 key word pair covers 16 / 32
// channels of a token, and a kernel that reads INT2 words reads the low plane unchanged.
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

// The code of (token t, channel c) of a packed INT-b section (b = 2, 3, 4) of D channels and P tokens.
template <int Bits, int D, int P>
KVQ_HD uint32_t read_code(Role role, const uint8_t* codes, int t, int c) {
  if constexpr (Bits == 3) {
    return read_code<2, D, P>(role, codes, t, c) | (read_code<1, D, P>(role, codes + P * D / 4, t, c) << 2);
  } else {
    const CodeSlot s = code_slot<Bits, D>(role, t, c);
    return (reinterpret_cast<const uint32_t*>(codes)[s.word] >> s.shift) & ((1u << Bits) - 1u);
  }
}

// Words of a packed INT-b section (both planes of INT3), and word w of it from its codes.
template <int Bits, int D, int P>
KVQ_HD_CONSTEXPR int section_words() {
  return Bits == 3 ? P * D / 16 + P * D / 32 : P * D / (32 / Bits);
}

KVQ_EXEC_CHECK_DISABLE
template <int Bits, int D, int P, class CodeAt>
KVQ_HD uint32_t pack_section_word(Role role, int w, CodeAt&& code_at) {
  if constexpr (Bits == 3) {
    constexpr int low_words = P * D / 16;
    if (w < low_words) return pack_word<2, D>(role, w, [&](int t, int c) { return code_at(t, c) & 3u; });
    return pack_word<1, D>(role, w - low_words, [&](int t, int c) { return code_at(t, c) >> 2; });
  } else {
    return pack_word<Bits, D>(role, w, code_at);
  }
}

KVQ_NAMESPACE_END

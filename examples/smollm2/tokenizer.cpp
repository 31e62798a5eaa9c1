// tokenizer.cpp - byte-level BPE and the smollm pre-tokenizer (see tokenizer.hpp).
#include "tokenizer.hpp"

#include <algorithm>

#include "unicode_tables.hpp"

namespace smollm2 {
namespace {

template <size_t N>
bool in_table(const CodeRange (&t)[N], uint32_t cp) {
  const CodeRange* it = std::upper_bound(t, t + N, cp, [](uint32_t v, const CodeRange& r) { return v < r.lo; });
  return it != t && cp <= (it - 1)->hi;
}
bool is_letter(uint32_t cp) { return cp < 0x80 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z') : in_table(kLetterRanges, cp); }
bool is_number(uint32_t cp) { return cp < 0x80 ? (cp >= '0' && cp <= '9') : in_table(kNumberRanges, cp); }
// Unicode White_Space, what \s matches in the Hugging Face (Oniguruma) pattern.
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
bool is_other(uint32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }

// UTF-8 decoding that never fails: an invalid byte stands for itself (as a code point >= 0x110000
// that no class contains except "other").
struct CodePoint {
  uint32_t cp;
  size_t begin, end;  // byte range
};
std::vector<CodePoint> decode_utf8(const std::string& s) {
  std::vector<CodePoint> out;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    if (n == 0 || i + size_t(n) > s.size()) n = 0;
    for (int k = 1; k < n; ++k) {
      const uint8_t cc = uint8_t(s[i + size_t(k)]);
      if ((cc >> 6) != 2) {
        n = 0;
        break;
      }
      cp = cp << 6 | (cc & 0x3F);
    }
    if (n == 0) {
      out.push_back({0x110000u + c, i, i + 1});
      ++i;
    } else {
      out.push_back({cp, i, i + size_t(n)});
      i += size_t(n);
    }
  }
  return out;
}

// GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// on cps[b, e): appends the end index of each match.
void gpt2_split(const std::vector<CodePoint>& cps, size_t b, size_t e, std::vector<size_t>& ends) {
  size_t i = b;
  auto run = [&](size_t j, bool (*cls)(uint32_t)) {
    while (j < e && cls(cps[j].cp)) ++j;
    return j;
  };
  while (i < e) {
    const uint32_t c = cps[i].cp;
    if (c == '\'' && i + 1 < e) {
      const uint32_t n1 = cps[i + 1].cp, n2 = i + 2 < e ? cps[i + 2].cp : 0;
      size_t len = 0;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') len = 2;
      else if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) len = 3;
      if (len) {
        i += len;
        ends.push_back(i);
        continue;
      }
    }
    const size_t j = (c == ' ' && i + 1 < e) ? i + 1 : i;  // the optional leading space
    bool matched = false;
    for (bool (*cls)(uint32_t) : {is_letter, is_number, is_other}) {
      if (cls(cps[j].cp)) {
        i = run(j, cls);
        matched = true;
        break;
      }
    }
    if (matched) {
      ends.push_back(i);
      continue;
    }
    // c is whitespace here: \s+(?!\S) leaves the last space to the next word; else \s+.
    const size_t k = run(i, is_space);
    i = (k == e || k - i < 2) ? k : k - 1;
    ends.push_back(i);
  }
}

// GPT-2's byte <-> printable code point map.
void byte_map(uint32_t (&to_cp)[256]) {
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    to_cp[b] = printable ? uint32_t(b) : uint32_t(256 + n++);
  }
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

std::vector<std::string> Tokenizer::pre_tokenize(const std::string& text) {
  const std::vector<CodePoint> cps = decode_utf8(text);
  std::vector<size_t> ends;
  // Numbers one code point each (the Digits pre-tokenizer), the GPT-2 pattern on what lies between.
  size_t b = 0;
  for (size_t i = 0; i <= cps.size(); ++i) {
    if (i == cps.size() || is_number(cps[i].cp)) {
      if (i > b) gpt2_split(cps, b, i, ends);
      if (i < cps.size()) ends.push_back(i + 1);
      b = i + 1;
    }
  }
  std::vector<std::string> pieces;
  size_t start = 0;
  for (size_t e : ends) {
    pieces.push_back(text.substr(cps[start].begin, cps[e - 1].end - cps[start].begin));
    start = e;
  }
  return pieces;
}

Tokenizer::Tokenizer(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw Error("tokenizer: " + f.path() + ": tokenizer model '" + model + "' is not supported (only byte-level BPE, 'gpt2')");
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : std::string("(none)");
  if (pre != "smollm")
    throw Error("tokenizer: " + f.path() + ": pre-tokenizer '" + pre + "' is not supported (only SmolLM2's 'smollm')");
  tokens_ = f.get_strings("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = f.get_ints("tokenizer.ggml.token_type");
  if (types.size() != tokens_.size()) throw Error("tokenizer: " + f.path() + ": token_type and tokens differ in length");
  types_.assign(types.begin(), types.end());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    ids_.emplace(tokens_[i], int32_t(i));
    if (types_[i] == 3 || types_[i] == 4) specials_.push_back(tokens_[i]);
  }
  // Longest first, so that a special token that is a prefix of another never wins.
  std::sort(specials_.begin(), specials_.end(), [](const std::string& a, const std::string& c) { return a.size() > c.size(); });
  std::fill(std::begin(special_first_), std::end(special_first_), false);
  for (const std::string& s : specials_)
    if (!s.empty()) special_first_[uint8_t(s[0])] = true;
  uint32_t to_cp[256];
  byte_map(to_cp);
  std::fill(std::begin(unicode_to_byte_), std::end(unicode_to_byte_), uint8_t(0));
  for (int b = 0; b < 256; ++b) {
    // SmolLM2's vocabulary lacks a few bytes (some control characters, bytes never valid in
    // UTF-8); like the Hugging Face BPE without an unknown token, they are dropped.
    byte_token_[b] = id_of(encode_utf8(to_cp[b]));
    unicode_to_byte_[to_cp[b]] = uint8_t(b);
  }
  const std::vector<std::string> merges = f.get_strings("tokenizer.ggml.merges");
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ', 1);
    if (sp == std::string::npos) throw Error("tokenizer: " + f.path() + ": malformed merge '" + merges[r] + "'");
    const std::string a = merges[r].substr(0, sp), c = merges[r].substr(sp + 1);
    const int32_t ia = id_of(a), ic = id_of(c), im = id_of(a + c);
    if (ia < 0 || ic < 0 || im < 0) continue;
    merges_.emplace(uint64_t(uint32_t(ia)) << 32 | uint32_t(ic), std::make_pair(int32_t(r), im));
  }
  bos_ = f.has("tokenizer.ggml.bos_token_id") ? int32_t(f.get_int("tokenizer.ggml.bos_token_id")) : -1;
  eos_ = f.has("tokenizer.ggml.eos_token_id") ? int32_t(f.get_int("tokenizer.ggml.eos_token_id")) : -1;
}

int32_t Tokenizer::id_of(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

void Tokenizer::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  auto hit = cache_.find(piece);
  if (hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int32_t> w;
  w.reserve(piece.size());
  for (char ch : piece)
    if (byte_token_[uint8_t(ch)] >= 0) w.push_back(byte_token_[uint8_t(ch)]);
  // Merge the lowest-ranked adjacent pair, leftmost first, until none is left.
  while (w.size() > 1) {
    int32_t best_rank = INT32_MAX, merged = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      auto it = merges_.find(uint64_t(uint32_t(w[i])) << 32 | uint32_t(w[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        merged = it->second.second;
        at = i;
      }
    }
    if (merged < 0) break;
    const int32_t left = w[at], right = w[at + 1];
    std::vector<int32_t> next;
    next.reserve(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      if (i >= at && i + 1 < w.size() && w[i] == left && w[i + 1] == right) {
        next.push_back(merged);
        ++i;
      } else {
        next.push_back(w[i]);
      }
    }
    w.swap(next);
  }
  if (cache_.size() < 200000) cache_.emplace(piece, w);
  out.insert(out.end(), w.begin(), w.end());
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool parse_special) const {
  std::vector<int32_t> out;
  size_t begin = 0, i = 0;
  auto flush = [&](size_t end) {
    if (end > begin)
      for (const std::string& p : pre_tokenize(text.substr(begin, end - begin))) bpe(p, out);
  };
  while (parse_special && i < text.size()) {
    const std::string* hit = nullptr;
    if (special_first_[uint8_t(text[i])])
      for (const std::string& s : specials_)
        if (text.compare(i, s.size(), s) == 0) {
          hit = &s;
          break;
        }
    if (!hit) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(id_of(*hit));
    i += hit->size();
    begin = i;
  }
  flush(text.size());
  return out;
}

std::string Tokenizer::decode_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (types_[size_t(id)] == 3 || types_[size_t(id)] == 4) return tokens_[size_t(id)];
  std::string s;
  for (const CodePoint& c : decode_utf8(tokens_[size_t(id)]))
    s += c.cp < 324 ? char(unicode_to_byte_[c.cp]) : '?';
  return s;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) s += decode_token(id);
  return s;
}

}  // namespace smollm2

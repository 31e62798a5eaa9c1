// tokenizer.hpp - SmolLM2's tokenizer: byte-level BPE over the vocabulary and merges stored in the
// GGUF metadata, after the "smollm" pre-tokenizer (every Unicode number alone, then the GPT-2
// split pattern), with the special tokens (<|im_start|> ...) matched literally first.
// Hand-written: no regex library (tests/model compares it with the Hugging Face tokenizer).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf.hpp"

namespace smollm2 {

class Tokenizer {
 public:
  explicit Tokenizer(const GgufFile& file);  // throws Error on an unsupported tokenizer

  // parse_special: text like "<|im_start|>" becomes the special token, as chat prompts need.
  std::vector<int32_t> encode(const std::string& text, bool parse_special = true) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_token(int32_t id) const;

  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t id_of(const std::string& token) const;  // -1 when absent (token text in GGUF form)

  // The pre-tokenizer alone (for tests): the pieces of `text` BPE runs on, as UTF-8 strings.
  static std::vector<std::string> pre_tokenize(const std::string& text);

 private:
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;  // GGUF form (bytes mapped to printable code points)
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged)
  std::vector<std::string> specials_;                                // matched literally in text
  bool special_first_[256];  // first bytes of the special tokens
  int32_t byte_token_[256];
  uint8_t unicode_to_byte_[324];
  int32_t bos_ = -1, eos_ = -1;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace smollm2

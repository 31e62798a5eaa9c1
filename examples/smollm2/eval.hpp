// eval.hpp - the three accuracy evaluations of the example (perplexity, passkey retrieval, greedy
// generation agreement) and the CSV rows they produce (bench/results/accuracy.csv's columns).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model.hpp"
#include "tokenizer.hpp"

namespace smollm2 {

struct CsvRow {
  std::string metric;  // perplexity | passkey | agree_tokens
  int64_t context = 0;
  double value = 0.0;
  int64_t n = 0;
};

// Label of a cache configuration in the CSV: the format, "_r0" appended when R = 0.
std::string format_label(const CacheSpec& spec);
std::string variant_label(const CacheSpec& spec);
// Appends rows (writing the header first when the file is new or empty).
void append_csv(const std::string& path, const std::string& model, const CacheSpec& spec, const std::vector<CsvRow>& rows);

// Builds a model for a cache of max_seqs sequences of max_len tokens.
using ModelFactory = std::function<std::unique_ptr<Model>(const CacheSpec& spec, int max_seqs, int64_t max_len)>;

struct PerplexityOptions {
  std::string text_path;
  int64_t window = 4096;  // tokens per window; every token after the first is scored
  int windows = 4;        // consecutive, non-overlapping windows
  int64_t start = 0;      // first token of the first window (in the tokenized text)
  int chunk = 256;        // tokens per forward step
  int batch = 2;          // windows run side by side
};
std::vector<CsvRow> run_perplexity(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                   const PerplexityOptions& opt);

struct PasskeyOptions {
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192};
  std::vector<double> depths = {0.1, 0.3, 0.5, 0.7, 0.9};
  int trials = 4;  // per (length, depth); trial t uses the same key in every format
  uint64_t seed = 1;
  int chunk = 256;
};
std::vector<CsvRow> run_passkey(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                const PasskeyOptions& opt);

// run_passkey's prompt for one trial: the intro, filler, the key sentence at `depth`, filler, the
// question (length and depth as --lengths / --depths give them).
struct PasskeyPrompt {
  std::vector<int32_t> tokens;
  std::vector<int64_t> key_digits;  // positions of the key's digit tokens (both mentions of the key)
  int key = 0;
};
PasskeyPrompt passkey_prompt(const Tokenizer& tok, int64_t length, double depth, int key);
// The key of a run with one cell and one trial (passkey --lengths L --depths D --trials 1 --seed S).
int passkey_first_key(uint64_t seed);
// Greedy answer after a prompt whose last logits are `logits` (sequence `seq` of m), and its score.
std::string passkey_answer(Model& m, int seq, const Tokenizer& tok, std::vector<float>& logits);
bool passkey_correct(const std::string& answer, int key);

struct DiagnoseOptions {
  // Windows of a text (as perplexity); used when text_path is set.
  std::string text_path;
  int64_t window = 2048;
  int windows = 1;
  int64_t start = 0;
  int query_stride = 8;  // queries analysed: positions stride-1, 2*stride-1, ... of each window
  // One passkey prompt (as passkey; its key is passkey_first_key(seed)); used when length > 0.
  int64_t passkey_length = 0;
  double passkey_depth = 0.5;
  uint64_t seed = 1;
  int chunk = 256;
  std::string csv_path;  // long-format rows (eval_diagnose.cpp); empty: none
};
// Why a quantized format loses accuracy, per layer (CPU backend, decode path; eval_diagnose.cpp):
// attention on the first tokens, key-group statistics, the logit error of quantized keys and what
// it does to the attention; for the passkey prompt, the same for the key's digits at the last query.
void run_diagnose(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec, const DiagnoseOptions& opt);

struct GenerateOptions {
  std::vector<std::string> prompts;  // chat turns (the chat template is applied); empty: built-in set
  std::string passage_path;          // text for the built-in long-context prompts
  int max_new = 128;
  int chunk = 256;
};
// Greedy generation with `spec` and with "none" (same R and page); reports the first position
// where the two outputs differ (max_new when they never do).
std::vector<CsvRow> run_generate(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                 const GenerateOptions& opt);

// Runs tokens through sequence `seq` in chunks; returns the last token's logits.
void feed(Model& m, int seq, const std::vector<int32_t>& tokens, int chunk, std::vector<float>& last_logits);
int32_t argmax(const float* logits, int n);

}  // namespace smollm2

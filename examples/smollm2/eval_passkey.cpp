// eval_passkey.cpp - passkey retrieval: a random 5-digit number hidden at a given depth of
// repetitive filler text; the model is asked for it at the end and answers greedily.
// Every trial's prompt is the same in every format (same seed). The filler before the key is
// shared by all (length, depth) cells, so it is computed once per position and the cache is
// rewound to it (Model::save / restore) -- kvq's cold pages are immutable, so only the lengths
// and the hot ring need to come back.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "eval.hpp"

namespace smollm2 {
namespace {

const char* kIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.";
const char* kUnit = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const char* kQuestion = "\n\nWhat is the pass key? The pass key is";
constexpr int kAnswer = 8;  // tokens generated for the answer

std::string key_sentence(int key) {
  const std::string k = std::to_string(key);
  return " The pass key is " + k + ". Remember it. " + k + " is the pass key.";
}

struct Cell {
  int64_t length;
  double depth;
  int64_t units, before;  // filler units in total and before the key
  std::vector<int> keys;  // one per trial
  int correct = 0;
};

}  // namespace

std::vector<CsvRow> run_passkey(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                const PasskeyOptions& opt) {
  const std::vector<int32_t> intro = tok.encode(kIntro, false), unit = tok.encode(kUnit, false),
                             question = tok.encode(kQuestion, false), key_probe = tok.encode(key_sentence(12345), false);
  std::mt19937_64 rng(opt.seed);
  std::vector<Cell> cells;
  int64_t max_len = 0;
  for (int64_t len : opt.lengths)
    for (double d : opt.depths) {
      Cell c;
      c.length = len;
      c.depth = d;
      // The prompt and the answer (at most kAnswer tokens) fit in `len` tokens.
      const int64_t fixed = int64_t(intro.size() + key_probe.size() + question.size()) + kAnswer;
      if (len <= fixed + int64_t(unit.size())) throw Error("passkey: length " + std::to_string(len) + " is too short");
      c.units = (len - fixed) / int64_t(unit.size());
      c.before = std::min(c.units, std::max<int64_t>(0, std::llround(d * double(c.units))));
      for (int t = 0; t < opt.trials; ++t) c.keys.push_back(10000 + int(rng() % 90000));
      max_len = std::max(max_len, fixed + c.units * int64_t(unit.size()));
      cells.push_back(c);
    }
  std::unique_ptr<Model> model = make(spec, 1, max_len);
  const int vocab = model->config().vocab;
  std::vector<size_t> order(cells.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cells[a].before < cells[b].before; });

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  model->reset(0);
  feed(*model, 0, intro, opt.chunk, logits);
  int64_t have_units = 0;
  for (size_t oi = 0; oi < order.size(); ++oi) {
    Cell& c = cells[order[oi]];
    std::vector<int32_t> more;
    for (; have_units < c.before; ++have_units) more.insert(more.end(), unit.begin(), unit.end());
    feed(*model, 0, more, opt.chunk, logits);
    const SeqState prefix = model->save(0);
    for (size_t t = 0; t < c.keys.size(); ++t) {
      model->restore(prefix);
      std::vector<int32_t> rest = tok.encode(key_sentence(c.keys[t]), false);
      for (int64_t u = c.before; u < c.units; ++u) rest.insert(rest.end(), unit.begin(), unit.end());
      rest.insert(rest.end(), question.begin(), question.end());
      feed(*model, 0, rest, opt.chunk, logits);
      std::string answer;
      for (int g = 0; g < kAnswer; ++g) {
        const int32_t next = argmax(logits.data(), vocab);
        answer += tok.decode_token(next);
        if (next == tok.eos() || answer.find('.') != std::string::npos) break;
        model->forward({SeqTokens{0, {next}}}, false, logits);
      }
      const size_t b = answer.find_first_of("0123456789");
      const std::string digits = b == std::string::npos ? "" : answer.substr(b, answer.find_first_not_of("0123456789", b) - b);
      const bool ok = digits == std::to_string(c.keys[t]);
      c.correct += ok;
      std::printf("passkey_trial %s length %lld depth %.2f key %d answer \"%s\" %s\n", format_label(spec).c_str(),
                  (long long)c.length, c.depth, c.keys[t], answer.c_str(), ok ? "ok" : "wrong");
    }
    model->restore(prefix);
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<CsvRow> rows;
  for (int64_t len : opt.lengths) {
    int correct = 0, n = 0;
    for (const Cell& c : cells)
      if (c.length == len) {
        std::printf("passkey_cell %s length %lld depth %.2f correct %d of %d\n", format_label(spec).c_str(), (long long)len,
                    c.depth, c.correct, int(c.keys.size()));
        correct += c.correct;
        n += int(c.keys.size());
      }
    rows.push_back(CsvRow{"passkey", len, n ? double(correct) / n : 0.0, n});
    std::printf("passkey %s length %lld: %d of %d correct (%.3f)\n", describe(spec).c_str(), (long long)len, correct, n,
                n ? double(correct) / n : 0.0);
  }
  std::printf("passkey %s: %.1f s\n", describe(spec).c_str(), secs);
  return rows;
}

}  // namespace smollm2

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

// The prompt's fixed pieces, tokenized once.
struct Pieces {
  std::vector<int32_t> intro, unit, question;
  int64_t fixed;  // tokens besides the filler: intro, key sentence, question and the answer
  explicit Pieces(const Tokenizer& tok)
      : intro(tok.encode(kIntro, false)), unit(tok.encode(kUnit, false)), question(tok.encode(kQuestion, false)),
        fixed(int64_t(intro.size() + tok.encode(key_sentence(12345), false).size() + question.size()) + kAnswer) {}
};

struct Layout {
  int64_t units, before;  // filler units in total and before the key
};

// The prompt and the answer (at most kAnswer tokens) fit in `length` tokens.
Layout layout(const Pieces& pc, int64_t length, double depth) {
  if (length <= pc.fixed + int64_t(pc.unit.size())) throw Error("passkey: length " + std::to_string(length) + " is too short");
  Layout l;
  l.units = (length - pc.fixed) / int64_t(pc.unit.size());
  l.before = std::min(l.units, std::max<int64_t>(0, std::llround(depth * double(l.units))));
  return l;
}

int draw_key(std::mt19937_64& rng) { return 10000 + int(rng() % 90000); }

struct Cell : Layout {
  int64_t length;
  double depth;
  std::vector<int> keys;  // one per trial
  int correct = 0;
};

}  // namespace

int passkey_first_key(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return draw_key(rng);
}

PasskeyPrompt passkey_prompt(const Tokenizer& tok, int64_t length, double depth, int key) {
  const Pieces pc(tok);
  const Layout l = layout(pc, length, depth);
  PasskeyPrompt p;
  p.key = key;
  p.tokens = pc.intro;
  for (int64_t u = 0; u < l.before; ++u) p.tokens.insert(p.tokens.end(), pc.unit.begin(), pc.unit.end());
  for (int32_t id : tok.encode(key_sentence(key), false)) {
    const std::string s = tok.decode_token(id);
    if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) p.key_digits.push_back(int64_t(p.tokens.size()));
    p.tokens.push_back(id);
  }
  for (int64_t u = l.before; u < l.units; ++u) p.tokens.insert(p.tokens.end(), pc.unit.begin(), pc.unit.end());
  p.tokens.insert(p.tokens.end(), pc.question.begin(), pc.question.end());
  return p;
}

std::string passkey_answer(Model& m, int seq, const Tokenizer& tok, std::vector<float>& logits) {
  std::string answer;
  for (int g = 0; g < kAnswer; ++g) {
    const int32_t next = argmax(logits.data(), m.config().vocab);
    answer += tok.decode_token(next);
    if (next == tok.eos() || answer.find('.') != std::string::npos) break;
    m.forward({SeqTokens{seq, {next}}}, false, logits);
  }
  return answer;
}

bool passkey_correct(const std::string& answer, int key) {
  const size_t b = answer.find_first_of("0123456789");
  const std::string digits = b == std::string::npos ? "" : answer.substr(b, answer.find_first_not_of("0123456789", b) - b);
  return digits == std::to_string(key);
}

std::vector<CsvRow> run_passkey(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                const PasskeyOptions& opt) {
  const Pieces pc(tok);
  const std::vector<int32_t>&intro = pc.intro, &unit = pc.unit, &question = pc.question;
  std::mt19937_64 rng(opt.seed);
  std::vector<Cell> cells;
  int64_t max_len = 0;
  for (int64_t len : opt.lengths)
    for (double d : opt.depths) {
      Cell c;
      static_cast<Layout&>(c) = layout(pc, len, d);
      c.length = len;
      c.depth = d;
      for (int t = 0; t < opt.trials; ++t) c.keys.push_back(draw_key(rng));
      max_len = std::max(max_len, pc.fixed + c.units * int64_t(unit.size()));
      cells.push_back(c);
    }
  std::unique_ptr<Model> model = make(spec, 1, max_len);
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
      const std::string answer = passkey_answer(*model, 0, tok, logits);
      const bool ok = passkey_correct(answer, c.keys[t]);
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

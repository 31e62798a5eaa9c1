// eval_generate.cpp - greedy generation with a quantized cache against the "none" cache: the
// first generated token where the two differ. Short chat prompts, and long ones (a passage of the
// perplexity text, then a question) whose answer is generated over a mostly cold cache.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "eval.hpp"

namespace smollm2 {
namespace {

std::string chat(const std::string& user) {
  return "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
         "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

std::vector<int32_t> generate(Model& m, const Tokenizer& tok, const std::vector<int32_t>& prompt, int max_new, int chunk) {
  std::vector<float> logits;
  m.reset(0);
  feed(m, 0, prompt, chunk, logits);
  std::vector<int32_t> out;
  while (int(out.size()) < max_new) {
    const int32_t next = argmax(logits.data(), m.config().vocab);
    out.push_back(next);
    if (next == tok.eos() || int(out.size()) == max_new) break;
    m.forward({SeqTokens{0, {next}}}, false, logits);
  }
  return out;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

std::vector<CsvRow> run_generate(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                 const GenerateOptions& opt) {
  std::vector<std::string> prompts = opt.prompts;
  if (prompts.empty()) {
    prompts = {"What is the capital of France, and what is it famous for?",
               "Write a short story about a robot who learns to paint.",
               "Explain to a ten-year-old why the sky is blue."};
    if (!opt.passage_path.empty()) {
      std::ifstream in(opt.passage_path, std::ios::binary);
      if (!in) throw Error("generate: cannot open passage file '" + opt.passage_path + "'");
      std::stringstream ss;
      ss << in.rdbuf();
      const std::vector<int32_t> ids = tok.encode(ss.str(), false);
      auto passage = [&](size_t from, size_t n) {
        if (from + n > ids.size()) throw Error("generate: passage file too short");
        return tok.decode(std::vector<int32_t>(ids.begin() + long(from), ids.begin() + long(from + n)));
      };
      prompts.push_back(passage(20000, 1500) + "\n\nSummarize the passage above in a few sentences.");
      prompts.push_back(passage(40000, 3000) + "\n\nWho are the people in the passage above, and what happens to them?");
    }
  }
  CacheSpec base = spec;
  base.format = "none";
  std::vector<std::vector<int32_t>> ids;
  int64_t max_len = 0;
  for (const std::string& p : prompts) {
    ids.push_back(tok.encode(chat(p), true));
    max_len = std::max<int64_t>(max_len, int64_t(ids.back().size()) + opt.max_new + 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Model> ref = make(base, 1, max_len), test = make(spec, 1, max_len);
  std::vector<CsvRow> rows;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> a = generate(*ref, tok, ids[i], opt.max_new, opt.chunk);
    const std::vector<int32_t> b = generate(*test, tok, ids[i], opt.max_new, opt.chunk);
    size_t agree = 0;
    while (agree < a.size() && agree < b.size() && a[agree] == b[agree]) ++agree;
    std::printf("generate %s prompt %zu (%zu tokens): agree %zu of %zu\n  none: %s\n  %s: %s\n", format_label(spec).c_str(), i,
                ids[i].size(), agree, a.size(), one_line(tok.decode(a)).c_str(), format_label(spec).c_str(),
                one_line(tok.decode(b)).c_str());
    std::fflush(stdout);
    rows.push_back(CsvRow{"agree_tokens", int64_t(ids[i].size()), double(agree), int64_t(a.size())});
  }
  std::printf("generate %s: %.1f s\n", describe(spec).c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return rows;
}

}  // namespace smollm2

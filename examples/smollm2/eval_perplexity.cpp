// eval_perplexity.cpp - perplexity over consecutive windows of a long text. Every token of a
// window after its first is scored; with the decode attention path each scored token sees
// exactly what token-by-token decoding would (the cache's dequantized values for everything
// older than the hot window), while the model runs `chunk` tokens per step.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "eval.hpp"

namespace smollm2 {

std::vector<CsvRow> run_perplexity(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec,
                                   const PerplexityOptions& opt) {
  std::ifstream in(opt.text_path, std::ios::binary);
  if (!in) throw Error("perplexity: cannot open text file '" + opt.text_path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<int32_t> ids = tok.encode(ss.str(), /*parse_special*/ false);
  if (opt.window < 2 || opt.windows < 1 || opt.chunk < 1 || opt.batch < 1) throw Error("perplexity: bad window/chunk/batch options");
  if (opt.start < 0 || opt.start + opt.window * opt.windows > int64_t(ids.size()))
    throw Error("perplexity: the text has " + std::to_string(ids.size()) + " tokens, fewer than start + windows x window = " +
                std::to_string(opt.start + opt.window * opt.windows));
  const int batch = std::min(opt.batch, opt.windows);
  std::unique_ptr<Model> model = make(spec, batch, opt.window);
  const int vocab = model->config().vocab;
  // Buckets by position in the window: the first R + P tokens never see a quantized token.
  const int64_t early = std::min<int64_t>(opt.window, spec.residual + spec.page);
  double nll = 0.0, nll_late = 0.0;
  int64_t count = 0, count_late = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  for (int w0 = 0; w0 < opt.windows; w0 += batch) {
    const int nb = std::min(batch, opt.windows - w0);
    std::vector<double> win_nll(size_t(nb), 0.0);
    for (int s = 0; s < nb; ++s) model->reset(s);
    for (int64_t p = 0; p < opt.window; p += opt.chunk) {
      const int64_t c = std::min<int64_t>(opt.chunk, opt.window - p);
      std::vector<SeqTokens> step;
      for (int s = 0; s < nb; ++s) {
        const auto* base = ids.data() + opt.start + int64_t(w0 + s) * opt.window + p;
        step.push_back(SeqTokens{s, std::vector<int32_t>(base, base + c)});
      }
      model->forward(step, /*all_logits*/ true, logits);
      for (int s = 0; s < nb; ++s)
        for (int64_t i = 0; i < c; ++i) {
          const int64_t pos = p + i;  // the row predicts token pos + 1 of the window
          if (pos + 1 >= opt.window) continue;
          const float* row = logits.data() + (size_t(s) * size_t(c) + size_t(i)) * size_t(vocab);
          const int32_t target = ids[size_t(opt.start + int64_t(w0 + s) * opt.window + pos + 1)];
          float mx = row[0];
          for (int v = 1; v < vocab; ++v) mx = std::max(mx, row[v]);
          double z = 0.0;
          for (int v = 0; v < vocab; ++v) z += std::exp(double(row[v] - mx));
          const double l = std::log(z) + double(mx) - double(row[target]);
          nll += l;
          win_nll[size_t(s)] += l;
          ++count;
          if (pos + 1 >= early) {
            nll_late += l;
            ++count_late;
          }
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int s = 0; s < nb; ++s)
      std::printf("perplexity %s window %d: %.4f (%.0f s elapsed)\n", format_label(spec).c_str(), w0 + s,
                  std::exp(win_nll[size_t(s)] / double(opt.window - 1)), secs);
    std::fflush(stdout);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("perplexity %s: %.4f over %lld tokens (%d windows of %lld); tokens at window position >= %lld: %.4f "
              "over %lld; %.1f s, %.1f tokens/s\n",
              describe(spec).c_str(), std::exp(nll / double(count)), (long long)count, opt.windows, (long long)opt.window,
              (long long)early, std::exp(nll_late / double(std::max<int64_t>(count_late, 1))), (long long)count_late, secs,
              double(opt.windows * opt.window) / secs);
  return {CsvRow{"perplexity", opt.window, std::exp(nll / double(count)), count}};
}

}  // namespace smollm2

// The engine on SmolLM2-135M with the GPU backend (label gpu; skipped without a GPU):
// bench/serve_load.py --check in small. A fixed-seed request (temperature 0.8, a 600-token prompt
// of random ids) gives the same tokens alone and joining 40 other requests (prompts of 200 to 1,800
// tokens, greedy and sampled) that prefill and decode beside it, in every format, with the
// batch-invariant steps (GpuOptions::batch_invariant): the same kvq decode plan at every batch size
// and one cuBLASLt kernel per projection at every row count. With --batch-variant's steps the test
// only reports the first token that differs.
#include <cstdio>

#include "backend_gpu.hpp"
#include "engine_runs.hpp"

namespace {

struct Outputs {
  std::vector<int32_t> alone, loaded;
  int max_batch_seen = 0;
};

Outputs alone_and_loaded(const serve::FormatChoice& f, bool batch_invariant) {
  serve::EngineConfig cfg;
  cfg.max_batch = 48;
  cfg.token_budget = 4096;
  cfg.page = f.format.page;
  cfg.residual = f.format.residual;
  cfg.max_seq_len = 2048;
  cfg.num_pages = int64_t(cfg.max_batch) * cfg.max_seq_len / cfg.page;
  auto backend = serve::make_gpu_backend(serve_test::model_file(), f, cfg, serve::GpuOptions{true, batch_invariant});
  std::mt19937 gen(5);
  serve::RequestSpec check;
  check.prompt = serve_test::noise_prompt(gen, 600);
  check.max_tokens = 64;
  check.ignore_eos = true;
  check.sampling = serve::SamplingParams{0.8f, 1.0f, 7};
  std::vector<serve::RequestSpec> reqs;
  std::vector<int> delay;
  for (int i = 0; i < 40; ++i) {
    serve::RequestSpec r;
    r.prompt = serve_test::noise_prompt(gen, 200 + int(gen() % 1600));
    r.max_tokens = 48 + i % 32;
    r.ignore_eos = true;
    r.sampling = serve::SamplingParams{0.7f * float(i % 2), 0.95f, uint64_t(100 + i)};
    reqs.push_back(r);
    delay.push_back(i / 2);  // two more every step
  }
  reqs.push_back(check);
  delay.push_back(12);  // joins while the others prefill and decode
  Outputs out;
  out.alone = serve_test::run(*backend, cfg, {check}, {0}).tokens[0];
  const serve_test::Run loaded = serve_test::run(*backend, cfg, reqs, delay);
  out.loaded = loaded.tokens.back();
  out.max_batch_seen = loaded.max_batch_seen;
  return out;
}

size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return size_t(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

}  // namespace

TEST_CASE("SmolLM2 on the GPU backend: a fixed-seed request gives the same tokens alone and among 40 others") {
  for (const char* name : {"none", "int8", "int4", "k4v2", "int2"}) {
    const std::string format = name;
    CAPTURE(format);
    const Outputs variant = alone_and_loaded(serve::choose_format(format), false);
    std::printf("%s, batch-variant steps: alone and loaded %s (first difference at token %zu of %zu)\n", name,
                variant.alone == variant.loaded ? "identical" : "differ", first_difference(variant.alone, variant.loaded),
                variant.alone.size());
    const Outputs invariant = alone_and_loaded(serve::choose_format(format), true);
    CHECK(invariant.max_batch_seen > 20);
    REQUIRE(invariant.alone.size() == 64);
    CHECK_MESSAGE(invariant.loaded == invariant.alone,
                  "first difference at token " << first_difference(invariant.alone, invariant.loaded));
  }
}

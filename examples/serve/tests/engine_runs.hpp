// Helpers of the engine tests on SmolLM2 (serve_model_tests, serve_gpu_tests): the model file,
// prompts of random token ids (as bench/serve_load.py sends), and a run of requests that join at
// given steps.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine.hpp"
#include "gguf.hpp"

namespace serve_test {

// $SMOLLM2_GGUF, else the path smollm2_fetch_model wrote to SERVE_MODEL_PATH_FILE.
inline const smollm2::GgufFile& model_file() {
  static std::unique_ptr<smollm2::GgufFile> f = [] {
    std::string path;
    if (const char* env = std::getenv("SMOLLM2_GGUF")) {
      path = env;
    } else {
      std::ifstream in(SERVE_MODEL_PATH_FILE);
      REQUIRE_MESSAGE(bool(in), "cannot open " << SERVE_MODEL_PATH_FILE);
      std::getline(in, path);
    }
    return std::make_unique<smollm2::GgufFile>(path);
  }();
  return *f;
}

// n token ids in [1000, 48000) from `gen`.
inline std::vector<int32_t> noise_prompt(std::mt19937& gen, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(1000 + gen() % 47000));
  return p;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  int max_batch_seen = 0;
};

// Submits requests (request i after `delay[i]` steps), steps until idle.
inline Run run(serve::Backend& backend, const serve::EngineConfig& cfg, const std::vector<serve::RequestSpec>& reqs,
               const std::vector<int>& delay) {
  serve::Engine engine(backend, cfg);
  Run out;
  out.tokens.resize(reqs.size());
  size_t next = 0;
  for (int step = 0;; ++step) {
    while (next < reqs.size() && delay[next] <= step) {
      std::string why;
      const size_t i = next++;
      REQUIRE(engine.submit(reqs[i], [&out, i](const serve::Event& ev) {
        out.tokens[i].insert(out.tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
      }, &why) != 0);
    }
    const bool worked = engine.step();
    out.max_batch_seen = std::max(out.max_batch_seen, int(engine.last_step().size()));
    if (!worked && next == reqs.size()) break;
  }
  return out;
}

}  // namespace serve_test

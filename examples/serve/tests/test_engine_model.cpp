// The engine on SmolLM2-135M with the CPU backend (label model): a request's tokens do not depend
// on what else is in the batch (greedy and a fixed seed, short prompts and prompts read in several
// chunks), and they are the tokens smollm2's own Model gives when driven one sequence at a time.
// On a synthetic Llama: a request longer than the model's trained context, within --max-seq-len.
#include <doctest/doctest.h>

#include "backend.hpp"
#include "engine_runs.hpp"
#include "gguf_writer.hpp"  // tests/model: a synthetic Llama
#include "tokenizer.hpp"

namespace {

using serve_test::model_file;
using serve_test::Run;
using serve_test::run;

std::string chat(const std::string& user) {
  return "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
         "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

}  // namespace

TEST_CASE("SmolLM2 on the CPU backend: batched outputs equal each request alone and smollm2's own generation") {
  const smollm2::Tokenizer tok(model_file());
  const std::vector<std::string> prompts = {"What is the capital of France?", "Write a haiku about the sea.",
                                            "Name three prime numbers.", "Why do cats purr?"};
  for (const char* format : {"int2", "none"}) {
    CAPTURE(format);
    const serve::FormatChoice f = serve::choose_format(format);
    serve::EngineConfig cfg;
    cfg.max_batch = 4;
    cfg.page = f.format.page;
    cfg.residual = f.format.residual;
    cfg.max_seq_len = 256;
    cfg.num_pages = 16;
    auto backend = serve::make_cpu_backend(model_file(), f, cfg.max_batch, cfg.max_seq_len, 2);
    std::vector<serve::RequestSpec> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      serve::RequestSpec r;
      r.prompt = tok.encode(chat(prompts[i]), true);
      r.max_tokens = 10;
      r.ignore_eos = true;
      if (i % 2 == 1) r.sampling = serve::SamplingParams{0.8f, 0.95f, 42 + i};  // fixed seeds
      reqs.push_back(r);
    }
    // Alone: one request at a time.
    std::vector<std::vector<int32_t>> alone;
    for (const auto& r : reqs) alone.push_back(run(*backend, cfg, {r}, {0}).tokens[0]);
    // Batched, joining at different steps (decode tokens and prompts in the same steps).
    const Run batched = run(*backend, cfg, reqs, {0, 1, 3, 4});
    CHECK(batched.max_batch_seen == 4);
    for (size_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      REQUIRE(alone[i].size() == 10);
      CHECK(batched.tokens[i] == alone[i]);
    }
    // smollm2's Model driven by hand (prompt, then one token per call): the greedy requests match.
    auto model = smollm2::make_cpu_model(model_file(), f.spec, 1, cfg.max_seq_len, 2);
    for (size_t i = 0; i < reqs.size(); i += 2) {
      model->reset(0);
      std::vector<float> logits;
      model->forward({smollm2::SeqTokens{0, reqs[i].prompt}}, false, logits);
      std::vector<int32_t> got;
      for (int t = 0; t < 10; ++t) {
        const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        got.push_back(next);
        model->forward({smollm2::SeqTokens{0, {next}}}, false, logits);
      }
      CHECK(got == alone[i]);
    }
  }
}

TEST_CASE("SmolLM2 on the CPU backend: a fixed-seed request read in chunks gives the same tokens alone and under load") {
  // bench/serve_load.py --check in small: a sampled request with a fixed seed and a prompt of random
  // token ids longer than a step's budget, alone, then joining while three other requests (other
  // prompts, greedy and sampled) prefill and decode. The budget left beside them differs from step
  // to step; the prompt must still be read in the same chunks, since with a quantized cache the cut
  // changes what each token's attention sees (kvq's chunk contract).
  std::mt19937 gen(11);
  std::vector<serve::RequestSpec> reqs(4);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = serve_test::noise_prompt(gen, i == 1 ? 300 : 60 + 70 * int(i));
    reqs[i].max_tokens = i == 1 ? 12 : 20;
    reqs[i].ignore_eos = true;
    reqs[i].sampling = i == 1 ? serve::SamplingParams{0.8f, 1.0f, 7} : serve::SamplingParams{0.8f * float(i % 2), 0.9f, 100 + i};
  }
  // INT4: a quantized cache, where the cut matters (with "none" the CPU gives the same tokens for
  // any cut).
  const serve::FormatChoice f = serve::choose_format("int4");
  serve::EngineConfig cfg;
  cfg.max_batch = 4;
  cfg.token_budget = 100;  // the prompts (60 to 300 tokens) take one to four steps
  cfg.page = f.format.page;
  cfg.residual = f.format.residual;
  cfg.max_seq_len = 512;
  cfg.num_pages = 32;
  auto backend = serve::make_cpu_backend(model_file(), f, cfg.max_batch, cfg.max_seq_len, 2);
  const std::vector<int32_t> alone = run(*backend, cfg, {reqs[1]}, {0}).tokens[0];
  const Run loaded = run(*backend, cfg, reqs, {0, 2, 3, 6});
  CHECK(loaded.max_batch_seen == 4);
  REQUIRE(alone.size() == 12);
  CHECK(loaded.tokens[1] == alone);
}

TEST_CASE("a request longer than the model's trained context runs when the maximum sequence length allows it") {
  // A synthetic Llama trained for 128 tokens (tests/model/gguf_writer.hpp), served up to 512: the
  // capacity plan keeps 512, the engine admits a 300-token request and the CPU backend runs it past
  // position 128 (RoPE table and cache sized by the maximum, not by the context). With a maximum of
  // 256 the same request is refused at submission.
  smollm2_test::TinyLlamaSpec spec;
  spec.context = 128;
  const smollm2::GgufFile file(smollm2_test::write_bytes(SERVE_WORK "/tiny_llama_context128.gguf", smollm2_test::tiny_llama_model(spec)));
  const smollm2::LlamaConfig lc = smollm2::read_llama_config(file);
  REQUIRE(lc.context == 128);
  const serve::FormatChoice f = serve::choose_format("int4");
  const serve::CapacityPlan plan = serve::plan_capacity(lc, f, 64ull << 20, 2, 512);
  CHECK(plan.max_seq_len == 512);
  serve::EngineConfig cfg;
  cfg.max_batch = 2;
  cfg.token_budget = 256;
  cfg.page = f.format.page;
  cfg.residual = f.format.residual;
  cfg.max_seq_len = plan.max_seq_len;
  cfg.num_pages = std::min<int64_t>(plan.num_pages, 2 * 512 / 64);
  auto backend = serve::make_cpu_backend(file, f, cfg.max_batch, cfg.max_seq_len, 2);
  serve::RequestSpec r;
  for (int i = 0; i < 280; ++i) r.prompt.push_back(int32_t((i * 37 + 11) % spec.vocab));
  r.max_tokens = 20;
  r.ignore_eos = true;
  const Run out = run(*backend, cfg, {r}, {0});
  REQUIRE(out.tokens[0].size() == 20);
  for (int32_t t : out.tokens[0]) CHECK((t >= 0 && t < spec.vocab));
  cfg.max_seq_len = 256;
  serve::Engine shorter(*backend, cfg);
  std::string why;
  CHECK(shorter.submit(r, nullptr, &why) == 0);
  CHECK(why.find("maximum sequence length 256") != std::string::npos);
}

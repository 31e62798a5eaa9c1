// The GPU backend (--device gpu) against the CPU backend on a synthetic Llama (2 layers, 6 query /
// 2 KV heads of dim 64, random F32 weights; tests/model/gguf_writer.hpp): the same batches of two
// sequences, fed in chunks of 1 to 130 tokens (kvq::decode for <= 16 query tokens per call,
// kvq::prefill above), must give the same logits within a stated tolerance in every format.
//
// What differs between the backends: the attention output, which kvq's kernels write in bf16
// where the CPU keeps fp32, and then float summation order (cuBLAS vs the CPU GEMM, the
// attention's), expf. Through the next layers the bf16 rounding moves K/V by an ulp here and
// there, which can move an INT2/INT4 code by a step. The tolerance is therefore measured, FA3
// style, in the same run: the CPU backend with its attention output rounded to bf16
// (make_cpu_model(..., bf16_attention_out)) is the naive implementation of the GPU's precision,
// and the GPU may differ from the fp32 CPU by at most twice as much as it does (RMS and largest
// logit difference, plus 0.1% of the RMS / 1% of the largest logit). On this model that CPU
// difference is, in RMS, 0.4% of the RMS logit for none and up to 5% for int2. For the formats
// with INT2 values the GPU must also stay within a quarter of the format's own effect (CPU
// format vs CPU none): a GPU that ignored the quantization would fail that.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "eval.hpp"
#include "gguf_writer.hpp"
#include "model_gpu.hpp"

using namespace smollm2;
using namespace smollm2_test;

namespace {

// Where the synthetic model is written: $SMOLLM2_WORK_DIR, else the build tree.
std::string work_dir() {
  const char* e = std::getenv("SMOLLM2_WORK_DIR");
  return e && *e ? e : SMOLLM2_WORK;
}

const GgufFile& tiny_model() {
  static std::unique_ptr<GgufFile> f = [] {
    TinyLlamaSpec s;
    return std::make_unique<GgufFile>(write_bytes(work_dir() + "/tiny_llama_gpu_test.gguf", tiny_llama_model(s)));
  }();
  return *f;
}

CacheSpec make_spec(const std::string& format, int residual, AttentionPath path = AttentionPath::kDecode) {
  CacheSpec s;
  s.format = format;
  s.residual = residual;
  s.page = 64;
  s.gk = 32;
  s.gv = 32;
  s.path = path;
  return s;
}

// Two sequences, different chunkings, all logits: [rows][vocab] over every step.
constexpr int kChunks0[] = {100, 1, 37, 64, 16, 17, 3, 90, 1, 1, 130, 2};
constexpr int kChunks1[] = {7, 130, 1, 50, 64, 2, 20, 15, 1, 1, 65, 9};
constexpr int kMaxLen = 512;

std::vector<int32_t> tokens_of(int seq, int n, int vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t x = 12345u + uint32_t(seq) * 777u;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t[size_t(i)] = int32_t((x >> 8) % uint32_t(vocab));
  }
  return t;
}

std::vector<float> run(Model& m) {
  const int vocab = m.config().vocab;
  const std::vector<int32_t> t0 = tokens_of(0, kMaxLen, vocab), t1 = tokens_of(1, kMaxLen, vocab);
  std::vector<float> all, step;
  m.reset(0);
  m.reset(1);
  size_t p0 = 0, p1 = 0;
  for (size_t i = 0; i < sizeof(kChunks0) / sizeof(int); ++i) {
    std::vector<SeqTokens> batch = {SeqTokens{0, std::vector<int32_t>(t0.begin() + long(p0), t0.begin() + long(p0) + kChunks0[i])},
                                    SeqTokens{1, std::vector<int32_t>(t1.begin() + long(p1), t1.begin() + long(p1) + kChunks1[i])}};
    p0 += size_t(kChunks0[i]);
    p1 += size_t(kChunks1[i]);
    m.forward(batch, true, step);
    all.insert(all.end(), step.begin(), step.end());
  }
  REQUIRE(m.length(0) == int64_t(p0));
  REQUIRE(m.length(1) == int64_t(p1));
  return all;
}

struct Diff {
  double rms_diff = 0, rms_ref = 0, max_diff = 0, max_ref = 0, argmax_agree = 0;
};

Diff compare(const std::vector<float>& a, const std::vector<float>& ref, int vocab) {
  REQUIRE(a.size() == ref.size());
  Diff d;
  size_t agree = 0;
  const size_t rows = ref.size() / size_t(vocab);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = double(a[i]) - ref[i];
    d.rms_diff += e * e;
    d.rms_ref += double(ref[i]) * ref[i];
    d.max_diff = std::max(d.max_diff, std::fabs(e));
    d.max_ref = std::max(d.max_ref, std::fabs(double(ref[i])));
  }
  for (size_t r = 0; r < rows; ++r)
    agree += argmax(a.data() + r * size_t(vocab), vocab) == argmax(ref.data() + r * size_t(vocab), vocab);
  d.rms_diff = std::sqrt(d.rms_diff / double(ref.size()));
  d.rms_ref = std::sqrt(d.rms_ref / double(ref.size()));
  d.argmax_agree = double(agree) / double(rows);
  return d;
}

}  // namespace

TEST_CASE("GPU logits match the CPU backend in every format (synthetic Llama, multi-chunk, two sequences)") {
  const GgufFile& f = tiny_model();
  const int vocab = read_llama_config(f).vocab;
  std::vector<float> cpu_none;
  struct Case {
    const char* format;
    int residual;
    AttentionPath path;
  };
  const Case cases[] = {{"none", 64, AttentionPath::kDecode},  {"int8", 64, AttentionPath::kDecode},
                        {"int4", 64, AttentionPath::kDecode},  {"int2", 64, AttentionPath::kDecode},
                        {"k4v2", 64, AttentionPath::kDecode},  {"k2v4", 64, AttentionPath::kDecode},
                        {"int2", 0, AttentionPath::kDecode},
                        {"int2", 128, AttentionPath::kDecode}, {"int2", 64, AttentionPath::kReference},
                        {"none", 0, AttentionPath::kReference}};
  for (const Case& c : cases) {
    const CacheSpec s = make_spec(c.format, c.residual, c.path);
    CAPTURE(describe(s));
    auto cpu = make_cpu_model(f, s, 2, kMaxLen, 2);
    auto cpu_bf16 = make_cpu_model(f, s, 2, kMaxLen, 2, /*bf16_attention_out*/ true);
    auto gpu = make_gpu_model(f, s, 2, kMaxLen);
    const std::vector<float> want = run(*cpu), naive = run(*cpu_bf16), got = run(*gpu);
    const Diff d = compare(got, want, vocab), n = compare(naive, want, vocab), g = compare(got, naive, vocab);
    MESSAGE(describe(s) << ": rms logit " << d.rms_ref << ", max logit " << d.max_ref << "\n  GPU vs CPU:            rms diff "
                        << d.rms_diff << ", max diff " << d.max_diff << ", argmax agreement " << d.argmax_agree
                        << "\n  CPU bf16-out vs CPU:   rms diff " << n.rms_diff << ", max diff " << n.max_diff
                        << ", argmax agreement " << n.argmax_agree << "\n  GPU vs CPU bf16-out:   rms diff " << g.rms_diff
                        << ", max diff " << g.max_diff);
    CHECK(d.rms_diff <= 2.0 * n.rms_diff + 1e-3 * d.rms_ref);
    CHECK(d.max_diff <= 2.0 * n.max_diff + 1e-2 * d.max_ref);
    if (std::string(c.format) == "none" && c.residual == 64 && c.path == AttentionPath::kDecode) cpu_none = want;
    if ((std::string(c.format) == "int2" || std::string(c.format) == "k4v2") && c.residual == 64 &&
        c.path == AttentionPath::kDecode) {
      REQUIRE(!cpu_none.empty());
      const Diff q = compare(want, cpu_none, vocab);
      MESSAGE("  the format's own effect (CPU " << std::string(c.format) << " vs CPU none): rms diff " << q.rms_diff);
      CHECK(d.rms_diff <= 0.25 * q.rms_diff);
    }
  }
}

TEST_CASE("GPU logits match the CPU backend with a format per layer (--mix), and differ from either format alone") {
  const GgufFile& f = tiny_model();
  const int vocab = read_llama_config(f).vocab;
  CacheSpec s = make_spec("int2", 64);
  parse_mix(s, "k4v2:1");  // layer 0 INT2, layer 1 K4V2
  auto cpu = make_cpu_model(f, s, 2, kMaxLen, 2);
  auto cpu_bf16 = make_cpu_model(f, s, 2, kMaxLen, 2, /*bf16_attention_out*/ true);
  auto gpu = make_gpu_model(f, s, 2, kMaxLen);
  CHECK(gpu->cache().cold_bytes_per_token() == cpu->cache().cold_bytes_per_token());
  const std::vector<float> want = run(*cpu), naive = run(*cpu_bf16), got = run(*gpu);
  const Diff d = compare(got, want, vocab), n = compare(naive, want, vocab);
  MESSAGE(describe(s) << ": GPU vs CPU rms diff " << d.rms_diff << ", max diff " << d.max_diff << "; CPU bf16-out vs CPU rms diff "
                      << n.rms_diff);
  CHECK(d.rms_diff <= 2.0 * n.rms_diff + 1e-3 * d.rms_ref);
  CHECK(d.max_diff <= 2.0 * n.max_diff + 1e-2 * d.max_ref);
  for (const char* format : {"int2", "k4v2"}) {  // the mix is neither format alone
    auto alone = make_cpu_model(f, make_spec(format, 64), 2, kMaxLen, 2);
    const Diff a = compare(run(*alone), want, vocab);
    CAPTURE(format);
    CHECK(a.rms_diff > 4.0 * d.rms_diff);
  }
}

TEST_CASE("GPU save / restore rewinds a sequence past cold pages, and reset reuses its pages") {
  const GgufFile& f = tiny_model();
  const int vocab = read_llama_config(f).vocab;
  const std::vector<int32_t> t = tokens_of(3, 400, vocab);
  auto gpu = make_gpu_model(f, make_spec("int2", 64), 1, kMaxLen);
  std::vector<float> first, again, scratch;
  gpu->forward({SeqTokens{0, std::vector<int32_t>(t.begin(), t.begin() + 150)}}, false, scratch);
  const SeqState at150 = gpu->save(0);
  gpu->forward({SeqTokens{0, std::vector<int32_t>(t.begin() + 150, t.begin() + 350)}}, true, first);  // 3 pages turn cold
  gpu->restore(at150);
  CHECK(gpu->length(0) == 150);
  gpu->forward({SeqTokens{0, std::vector<int32_t>(t.begin() + 150, t.begin() + 350)}}, true, again);
  Diff d = compare(again, first, vocab);
  CHECK(d.max_diff <= 1e-5 * d.max_ref);
  gpu->reset(0);
  CHECK(gpu->length(0) == 0);
  gpu->forward({SeqTokens{0, std::vector<int32_t>(t.begin(), t.begin() + 150)}}, false, scratch);
  gpu->forward({SeqTokens{0, std::vector<int32_t>(t.begin() + 150, t.begin() + 350)}}, true, again);
  d = compare(again, first, vocab);
  CHECK(d.max_diff <= 1e-5 * d.max_ref);
}

TEST_CASE("GPU: a configuration without GPU kernels, or a sequence past the cache, is an error") {
  const GgufFile& f = tiny_model();
  CacheSpec s = make_spec("int2", 64);
  s.page = 32;
  try {
    make_gpu_model(f, s, 1, 256);
    FAIL("page 32 was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("has no GPU kernels in this binary") != std::string::npos);
  }
  auto gpu = make_gpu_model(f, make_spec("none", 64), 1, 128);
  std::vector<float> logits;
  CHECK_THROWS_AS(gpu->forward({SeqTokens{0, tokens_of(0, 129, read_llama_config(f).vocab)}}, false, logits), Error);
  CHECK(gpu->length(0) == 0);
}

// backend.cpp - format choice, capacity plan and the CPU backend (backend.hpp).
#include "backend.hpp"

#include <cstdio>
#include <cstdlib>

namespace serve {

using smollm2::Error;

FormatChoice choose_format(const std::string& name) {
  FormatChoice c;
  c.name = name;
  if (name == "int2") c.format = kvq::recommended_int2();
  else if (name == "int4") c.format = kvq::recommended_int4();
  else if (name == "k4v2") c.format = kvq::recommended_k4v2();
  else if (name == "int8") c.format = kvq::CacheFormat{kvq::kDescInt8, kvq::kDescInt8, 64, 128};
  else if (name == "none") c.format = kvq::CacheFormat{kvq::kDescNone, kvq::kDescNone, 64, 128};
  else throw Error("unknown KV format '" + name + "' (KVQ_KV_FORMAT: int2, int4, int8, k4v2, none)");
  c.spec.format = name;
  c.spec.gk = c.spec.gv = 32;
  c.spec.page = c.format.page;
  c.spec.residual = c.format.residual;
  c.spec.sinks = c.format.sinks;
  c.spec.key_clip = c.format.key_clip;
  c.spec.rotate = c.format.rotate;
  c.spec.path = smollm2::AttentionPath::kReference;  // kvq's contract, as the GPU kernels compute it
  return c;
}

std::string format_from_env(const std::string& fallback) {
  const char* v = std::getenv("KVQ_KV_FORMAT");
  return v && *v ? std::string(v) : fallback;
}

std::string describe(const FormatChoice& f) {
  std::string out = f.name;
  if (f.format.rotate || f.format.sinks || f.format.key_clip == kvq::KeyClip::kMse) {
    out += " (";
    std::string sep;
    if (f.format.rotate) out += sep + "rotation", sep = ", ";
    if (f.format.sinks) out += sep + std::to_string(f.format.sinks) + " sinks", sep = ", ";
    if (f.format.key_clip == kvq::KeyClip::kMse) out += sep + "MSE key clipping";
    out += ")";
  }
  return out + ", page " + std::to_string(f.format.page) + ", R " + std::to_string(f.format.residual);
}

CapacityPlan plan_capacity(const smollm2::LlamaConfig& m, const FormatChoice& f, uint64_t budget, int max_batch,
                           int64_t max_seq_len) {
  const kvq::ModelShape shape{m.n_layer, m.n_kv_head, m.head_dim};
  if (kvq::validate(shape, f.format) != kvq::Status::kSuccess) throw Error("capacity: format " + f.name + " invalid for this model");
  CapacityPlan p;
  p.budget_bytes = budget;
  p.max_batch = max_batch;
  const uint64_t hot = uint64_t(max_batch) * kvq::hot_bytes_per_sequence(shape, f.format);
  if (budget <= hot)
    throw Error("capacity: " + std::to_string(budget >> 20) + " MiB do not hold the hot windows of " + std::to_string(max_batch) +
                " sequences (" + std::to_string(hot >> 20) + " MiB)");
  p.num_pages = int64_t((budget - hot) / kvq::page_bytes(shape, f.format));
  p.tokens_per_seq = kvq::tokens_that_fit(budget, max_batch, shape, f.format);
  p.bf16_tokens_per_seq = int64_t(double(budget) / double(max_batch) / kvq::bytes_per_token_dense(shape));
  // One request may hold the whole pool (admission reserves pages per request, not an even split).
  // The model's trained context is no limit: RoPE extrapolates (the caller warns).
  const int64_t longest = p.num_pages * f.format.page + f.format.residual + f.format.page - 1;
  p.max_seq_len = std::min<int64_t>(max_seq_len, longest);
  char line[512];
  std::snprintf(line, sizeof line,
                "KV cache %s: %.0f MiB for %d sequences -> %lld tokens per sequence fit (bf16 would allow %lld, x%.2f); "
                "%lld cold pages of %d tokens (%.1f KiB each, every layer); requests up to %lld tokens",
                describe(f).c_str(), double(budget) / 1048576.0, max_batch, (long long)p.tokens_per_seq,
                (long long)p.bf16_tokens_per_seq, double(p.tokens_per_seq) / double(std::max<int64_t>(1, p.bf16_tokens_per_seq)),
                (long long)p.num_pages, f.format.page, double(kvq::page_bytes(shape, f.format)) / 1024.0,
                (long long)p.max_seq_len);
  p.summary = line;
  return p;
}

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const smollm2::GgufFile& file, const FormatChoice& f, int max_batch, int64_t max_seq_len, int threads)
      : model_(smollm2::make_cpu_model(file, f.spec, max_batch, max_seq_len, threads)) {}

  int vocab() const override { return model_->config().vocab; }

  void forward(const std::vector<StepSeq>& decode, const std::vector<StepSeq>& prefill, std::vector<float>& logits) override {
    std::vector<smollm2::SeqTokens> batch;
    std::vector<bool> want;
    for (const auto* list : {&decode, &prefill})
      for (const StepSeq& s : *list) {
        if (model_->length(s.slot) != s.pos)
          throw Error("cpu backend: slot " + std::to_string(s.slot) + " holds " + std::to_string(model_->length(s.slot)) +
                      " tokens, the engine says " + std::to_string(s.pos));
        batch.push_back(smollm2::SeqTokens{s.slot, std::vector<int32_t>(s.tokens, s.tokens + s.count)});
        want.push_back(s.want_logits);
      }
    // One forward over every sequence of the step (smollm2's model: the batch's rows through every
    // projection at once, each layer's cache step over all sequences), last-token logits per sequence.
    std::vector<float> all;
    model_->forward(batch, false, all);
    const size_t v = size_t(vocab());
    logits.clear();
    for (size_t i = 0; i < want.size(); ++i)
      if (want[i]) logits.insert(logits.end(), all.begin() + long(i * v), all.begin() + long((i + 1) * v));
  }

  void release(int slot) override { model_->reset(slot); }

 private:
  std::unique_ptr<smollm2::Model> model_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const smollm2::GgufFile& file, const FormatChoice& f, int max_batch,
                                          int64_t max_seq_len, int threads) {
  return std::make_unique<CpuBackend>(file, f, max_batch, max_seq_len, threads);
}

}  // namespace serve

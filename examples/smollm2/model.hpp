// model.hpp - the Llama model behind a small interface. The evaluations see only `Model`: a
// batch of sequences goes in, logits come out, the KV cache lives behind it. make_cpu_model()
// builds the CPU backend (fp32 math, weights dequantized at load, kvq host reference cache); a
// GPU backend (cuBLAS + kvq kernels) implements the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf.hpp"
#include "kv_cache.hpp"

namespace smollm2 {

struct LlamaConfig {
  int n_layer = 0, d_model = 0, n_head = 0, n_kv_head = 0, head_dim = 0, d_ff = 0, vocab = 0;
  int64_t context = 0;  // trained context length
  float rope_base = 10000.0f, rms_eps = 1e-5f;
  bool tied_output = true;
};

// Reads and checks the architecture (Llama only; shapes the example supports). Throws Error.
LlamaConfig read_llama_config(const GgufFile& file);
// Checks every tensor's presence, type and shape (both backends, before loading). Throws Error.
void check_llama_tensors(const GgufFile& file, const LlamaConfig& cfg);
// One layer's weights in fp32, row-major [out][in], as every backend uses them: the norms, q|k|v
// and gate|up fused (rows concatenated in that order), the output and down projections.
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm, qkv, wo, gate_up, down;
};
LayerWeights read_layer_weights(const GgufFile& file, int layer);
// cos/sin of RoPE for positions [0, positions): [positions][head_dim / 2][2], rotating the
// adjacent pairs (2i, 2i + 1) of GGUF's permuted Llama weights.
std::vector<float> rope_table(const LlamaConfig& cfg, int64_t positions);

struct SeqTokens {
  int seq = 0;
  std::vector<int32_t> tokens;
};

// A forward batch's rows (non-empty sequences, in batch order); throws Error when a sequence is
// listed twice or a token id is out of range.
std::vector<SeqRows> batch_rows(const std::vector<SeqTokens>& batch, int vocab);

class Model {
 public:
  virtual ~Model() = default;
  virtual const LlamaConfig& config() const = 0;
  virtual const KvCache& cache() const = 0;
  virtual int64_t length(int seq) const = 0;
  virtual void reset(int seq) = 0;
  // Runs each listed sequence's tokens (a sequence at most once per call) after what its cache
  // holds, appending their K/V. logits: [rows][vocab], one row per token when all_logits, else
  // one per sequence (its last token), in batch order. Throws Error (nothing changed) when a
  // sequence would outgrow the cache or a token id is out of range.
  virtual void forward(const std::vector<SeqTokens>& batch, bool all_logits, std::vector<float>& logits) = 0;
  virtual SeqState save(int seq) const = 0;
  virtual void restore(const SeqState& state) = 0;
  // Diagnostics (eval_diagnose.cpp): called after each layer's attention with that layer's
  // queries (KvCache::set_observer). CPU backend, decode path only; elsewhere throws Error.
  virtual void set_step_observer(StepObserver* observer);
};

// threads <= 0: all cores. bf16_attention_out: the attention output is rounded to bf16, as kvq's
// GPU kernels write it (the GPU test measures how far that alone moves the logits).
std::unique_ptr<Model> make_cpu_model(const GgufFile& file, const CacheSpec& spec, int max_seqs, int64_t max_len,
                                      int threads, bool bf16_attention_out = false);

}  // namespace smollm2

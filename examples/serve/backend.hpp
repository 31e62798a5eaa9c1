// backend.hpp - the engine's backends and its start-up choices: the KV format from
// KVQ_KV_FORMAT (kvq's recommended configurations for the quantized ones), the capacity plan
// (kvq/cache/planner.hpp: pages and tokens per sequence that fit in the memory given, beside
// bf16), and the CPU backend (smollm2's model on kvq's host reference). The GPU backend is in
// backend_gpu.hpp (built with CUDA only). Plain C++: no CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine.hpp"
#include "gguf.hpp"
#include "model.hpp"

namespace serve {

// A KV format by name: int2 | int4 | k4v2 (kvq::recommended_*(): rotation and 4 sinks;
// page 64, R 128, groups of 32), int8 | none (page 64, R 128, no options). Throws
// smollm2::Error for another name.
struct FormatChoice {
  std::string name;
  kvq::CacheFormat format;
  smollm2::CacheSpec spec;  // the same for smollm2's cache (attention path: kvq's contract)
};
FormatChoice choose_format(const std::string& name);
// KVQ_KV_FORMAT, or `fallback` when unset.
std::string format_from_env(const std::string& fallback);
std::string describe(const FormatChoice& f);  // e.g. "int2 (rotation, 4 sinks), page 64, R 128"

struct CapacityPlan {
  uint64_t budget_bytes = 0;
  int max_batch = 0;
  int64_t num_pages = 0;            // cold pages of the pool
  int64_t tokens_per_seq = 0;       // kvq::tokens_that_fit(budget, max_batch)
  int64_t bf16_tokens_per_seq = 0;  // the same budget as a dense bf16 cache
  int64_t max_seq_len = 0;          // min(the request maximum, what the whole pool holds)
  std::string summary;              // the start-up line
};
// max_seq_len: prompt + completion of one request, which may exceed the model's trained context.
// Throws smollm2::Error when not even the hot windows of max_batch sequences fit.
CapacityPlan plan_capacity(const smollm2::LlamaConfig& model, const FormatChoice& f, uint64_t budget_bytes, int max_batch,
                           int64_t max_seq_len);

// The CPU backend: smollm2's Llama forward over a batch of sequences (each with its own
// positions) and its cache of kvq::reference::HostCache per layer, the attention path being kvq's
// chunked-prefill contract (kvq::reference::attention, then kvq::reference::append, per sequence).
std::unique_ptr<Backend> make_cpu_backend(const smollm2::GgufFile& file, const FormatChoice& f, int max_batch,
                                          int64_t max_seq_len, int threads);

}  // namespace serve

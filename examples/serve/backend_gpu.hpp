// backend_gpu.hpp - the engine's GPU backend (backend_gpu.cu; built with CUDA only, define
// SERVE_HAVE_GPU). Plain C++: no CUDA header.
//
// One step on the device: the embedding and every projection of all the step's tokens at once
// (cuBLAS GEMMs, bf16 weights and activations, fp32 accumulation and residual stream); per layer
// ONE kvq append for every token of the step, ONE kvq decode call for all decoding sequences and
// ONE kvq prefill call for all prompt chunks, all through kvq::Handle (kvq/runtime/handle.hpp) of
// the configuration KVQ_KV_FORMAT names; the cache is kvq's device layout with the engine's page
// ids in a per-step block table and hot rings indexed by the engine's slots. Steps with decode
// tokens only are captured as CUDA graphs, one per batch size, and replayed with new contents in
// the same buffers (kvq's plan/run split: the plans are made once for upper bounds).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend.hpp"

namespace serve {

// Empty when a CUDA device is usable, else why not.
std::string gpu_unavailable_reason();
// Free device memory in bytes (0 without a device).
uint64_t gpu_free_bytes();
// The device's name (e.g. "NVIDIA H100 80GB HBM3").
std::string gpu_name();

struct GpuOptions {
  bool graphs = true;  // capture decode-only steps in CUDA graphs
  // A request's rows give the same bits whatever else the step holds: one kvq decode plan (the
  // largest batch's) for every batch size and one cuBLASLt kernel per projection for every row
  // count (backend_gpu.cu says why and what it costs). false: a plan per batch size and cuBLAS's
  // choice per call, faster for few long sequences, but a fixed-seed request's tokens may then
  // depend on the batch.
  bool batch_invariant = true;
};

// Throws smollm2::Error when no GPU is usable, the format has no kernels in this binary, or the
// device runs out of memory. cfg: the engine's configuration (slots, pages, budget, lengths).
std::unique_ptr<Backend> make_gpu_backend(const smollm2::GgufFile& file, const FormatChoice& f, const EngineConfig& cfg,
                                          const GpuOptions& opt);

}  // namespace serve

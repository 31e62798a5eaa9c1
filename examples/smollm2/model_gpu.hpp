// model_gpu.hpp - the GPU backend of Model (model.hpp): the same Llama forward as the CPU backend
// on a CUDA device. Weights are dequantized at load (as on the CPU) and uploaded once as fp32;
// the projections are fp32 cuBLAS GEMMs (cublasSgemm, no TF32), RMSNorm / RoPE / SwiGLU /
// embedding are small kernels, Q/K/V are rounded to bf16 for the cache, and the KV cache is
// kvq's device layout (kv_cache_gpu.hpp): kvq::append<Cfg>, kvq::decode<Cfg>, kvq::prefill<Cfg>.
// The attention output comes back in bf16 (kvq's kernels write the model dtype), the rest is fp32.
// No CUDA header here: main.cpp and the evaluations are plain C++.
#pragma once

#include <memory>
#include <string>

#include "model.hpp"

namespace smollm2 {

// Empty when a CUDA device is usable, else why not (no driver, no device, ...).
std::string gpu_unavailable_reason();

// Throws Error when no GPU is usable, the cache configuration has no GPU kernels in this binary
// (kv_cache_gpu.hpp lists those it has), or the device runs out of memory.
std::unique_ptr<Model> make_gpu_model(const GgufFile& file, const CacheSpec& spec, int max_seqs, int64_t max_len);

}  // namespace smollm2

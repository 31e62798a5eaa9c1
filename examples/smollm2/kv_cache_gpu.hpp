// kv_cache_gpu.hpp - the engine's KV cache on the GPU, in kvq's device layout: per layer a cold
// pool [pages][kv_heads][record] and hot rings [slots][R + P][kv_heads][64] of bf16, one block
// table and one hot-slot array for all layers (sequence s owns pages [s * pages_per_seq, ...) and
// ring slot s). New tokens go in with kvq::append<Cfg>, attention is kvq::decode<Cfg> (q_len <= 16)
// or kvq::prefill<Cfg> (longer), planned with kvq::plan_decode<Cfg> / kvq::plan_prefill<Cfg>.
//
// The two attention paths of kv_cache.hpp map onto kvq's attention contract (attention/batch.hpp):
//   reference  one kvq call per sequence and step: the contract itself (one cold boundary C* for
//              all the chunk's queries), identical to kvq::reference::attention + append.
//   decode     what token-by-token decoding sees: query p attends to tokens below
//              min(p, cold_after(p + 1)) dequantized and to newer ones unquantized. The contract
//              gives that for a run of queries that share this boundary (and whose boundary is
//              not above the run's first position), so the step's chunk is split into such runs
//              (at most P tokens each once the sequence is longer than R + P) and each run is one
//              append + attention call: attention_calls() of kv_cache.hpp, from lengths alone.
// Each call appends first and then attends with the cold length after the append (the contract
// allows either order).
//
// Compiled configurations (one kv_cache_gpu_*.cu each): gpu_compiled_configurations(); any other
// is refused with kvq's kNotInstantiated and that list.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kvq/append/append.hpp>
#include <kvq/decode/decode.hpp>
#include <kvq/dispatch/dispatch.hpp>
#include <kvq/prefill/prefill.hpp>

#include "kv_cache.hpp"
#include "kv_cache_configs.hpp"

namespace smollm2 {

// Exactly the configurations instantiated by the kv_cache_gpu_*.cu files.
using GpuNone = Cfg64<64, kvq::NoQuant, kvq::NoQuant>;
using GpuInt8 = Cfg64<64, kvq::Int8, kvq::Int8>;
using GpuInt4 = Cfg64<64, kvq::Int4<32>, kvq::Int4<32>>;
using GpuInt2 = Cfg64<64, kvq::Int2<32>, kvq::Int2<32>>;
using GpuK4V2 = Cfg64<64, kvq::Int4<32>, kvq::Int2<32>>;
// INT2 with key groups of 16 tokens and value groups of 64 channels: 4 + 2.5 bits, the 3.25-bit
// budget of docs/ACCURACY.md spent on the keys.
using GpuInt2K16V64 = Cfg64<64, kvq::Int2<16>, kvq::Int2<64>>;
using GpuK2V4 = Cfg64<64, kvq::Int2<32>, kvq::Int4<32>>;  // INT2 keys, INT4 values (per-layer mixes)
using GpuConfigs = kvq::ConfigList<GpuNone, GpuInt8, GpuInt4, GpuInt2, GpuK4V2, GpuInt2K16V64, GpuK2V4>;
std::string gpu_compiled_configurations();

// kvq's launchers of one configuration (bf16 model dtype), as plain function pointers: the host
// code of the cache is not a template, the kernels come from the .cu files.
struct GpuCacheOps {
  size_t record_bytes;
  kvq::Status (*append)(const kvq::CacheView<kvq::bf16>&, const kvq::AppendBatch<kvq::bf16>&, int, uint32_t*, cudaStream_t);
  kvq::Status (*plan_decode)(const kvq::DecodeShape&, kvq::DecodePlan*);
  kvq::Status (*decode)(const kvq::CacheView<kvq::bf16>&, const kvq::AttentionBatch<kvq::bf16>&, const kvq::DecodePlan&,
                        void*, size_t, kvq::bf16*, uint32_t*, cudaStream_t);
  kvq::Status (*plan_prefill)(const kvq::PrefillShape&, kvq::PrefillPlan*);
  kvq::Status (*prefill)(const kvq::CacheView<kvq::bf16>&, const kvq::AttentionBatch<kvq::bf16>&, const kvq::PrefillPlan&,
                         void*, size_t, kvq::bf16*, uint32_t*, cudaStream_t);
};

template <class Cfg>
GpuCacheOps gpu_ops() {
  return GpuCacheOps{Cfg::record_bytes, &kvq::append<Cfg>, &kvq::plan_decode<Cfg>, &kvq::decode<Cfg>,
                     &kvq::plan_prefill<Cfg>, &kvq::prefill<Cfg>};
}

class GpuKvCache : public KvCache {
 public:
  // A step: begin() (host: the calls, their lengths uploaded once), step_layer() for layers
  // 0..L-1 (device pointers, stream-ordered, no host sync), finish() (commits the lengths, reads
  // the kernels' flags: synchronises the stream; throws Error when a kernel rejected a sequence).
  virtual void begin(const std::vector<SeqRows>& items) = 0;
  // q [rows][num_q_heads][64], k, v [rows][kv_heads][64] bf16 (RoPE applied); out [rows][num_q_heads][64] bf16.
  virtual void step_layer(int layer, int num_q_heads, const kvq::bf16* q, const kvq::bf16* k, const kvq::bf16* v,
                          kvq::bf16* out) = 0;
  virtual void finish(const std::vector<SeqRows>& items) = 0;
};

// Throws Error for a configuration without GPU kernels in this binary (with the list of those it
// has), or when CUDA fails to allocate.
std::unique_ptr<GpuKvCache> make_gpu_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int head_dim, int max_seqs,
                                              int64_t max_len, cudaStream_t stream);

}  // namespace smollm2

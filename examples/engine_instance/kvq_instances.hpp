// examples/engine_instance/kvq_instances.hpp - the engine's light kvq header.
//
// What the rest of an engine includes to use kvq's GPU append, decode and chunked-prefill attention: its cache
// configurations as aliases, the list of exactly those compiled into kvq_engine_instance (one .cu
// each), and type-erased entry points that map a runtime ConfigKey to them. No CUDA header is
// included here, so any host translation unit of the engine (scheduler, model loader, ...) can
// include it.
//
//   bf16_d128_p64_none.cu  KVQ_INSTANTIATE_APPEND / _DECODE / _PREFILL(engine::Bf16D128P64None);
//   bf16_d128_p64_int2.cu  KVQ_INSTANTIATE_APPEND / _DECODE / _PREFILL(engine::Bf16D128P64Int2);
//   bf16_d128_p64_k4v2.cu  KVQ_INSTANTIATE_APPEND / _DECODE / _PREFILL(engine::Bf16D128P64K4V2);
//   engine_append.cpp      engine_append(), engine_plan_decode(), engine_decode(), engine_plan_prefill(),
//                          engine_prefill(): kvq::dispatch over engine::Instances (host compiler)
//
// Adding a configuration: an alias here, an entry in Instances, a one-line .cu. An alias is
// required anyway: KVQ_INSTANTIATE_APPEND is a macro and CacheConfig<...> has commas.
#pragma once

#include <cstddef>
#include <cstdint>

#include <kvq/append/append.hpp>  // kvq::append<Cfg> (declaration), CacheConfig, ConfigKey, cudaStream_t
#include <kvq/decode/decode.hpp>  // kvq::plan_decode<Cfg>, kvq::decode<Cfg> (declarations), DecodePlan
#include <kvq/prefill/prefill.hpp>  // kvq::plan_prefill<Cfg>, kvq::prefill<Cfg> (declarations), PrefillPlan
#include <kvq/dispatch/dispatch.hpp>

namespace engine {

// ---- the configurations this engine compiles --------------------------------------------------
using Bf16D128P64None = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::NoQuant, kvq::NoQuant>;
using Bf16D128P64Int2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using Bf16D128P64K4V2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int4<32>, kvq::Int2<32>>;  // INT4 keys, INT2 values

// Exactly the configurations with a KVQ_INSTANTIATE_APPEND in this directory. A configuration
// listed here but not instantiated is a link error; one instantiated but not listed is unreachable.
using Instances = kvq::ConfigList<Bf16D128P64None, Bf16D128P64Int2, Bf16D128P64K4V2>;

// ---- type-erased arguments: what an engine keeps when the dtype is a runtime value ------------
// Same fields and meaning as kvq::CacheView<T> / kvq::AppendBatch<T> (kvq/cache/view.hpp,
// kvq/cache/append_plan.hpp), with the model-dtype pointers as void*. Device memory.
struct LayerCache {
  void* cold = nullptr;        // [num_pages][num_kv_heads][record_bytes], 16-byte aligned
  int64_t num_pages = 0;
  void* hot_k = nullptr;       // [num_slots][residual + page][num_kv_heads][head_dim] of the model dtype
  void* hot_v = nullptr;
  int32_t num_slots = 0;
  int32_t residual = 0;        // R, a multiple of the page size
  int32_t num_kv_heads = 0;
  const int32_t* block_table = nullptr;  // [batch][max_pages_per_seq]
  int32_t max_pages_per_seq = 0;
  const int32_t* hot_slot = nullptr;     // [batch]
};

struct AppendArgs {
  int32_t batch = 0;
  kvq::SeqLengths lengths;            // before the append
  const int32_t* cu_new = nullptr;    // [batch + 1]
  const void* new_k = nullptr;        // [cu_new[batch]][num_kv_heads][head_dim] of the model dtype
  const void* new_v = nullptr;
  int32_t* cold_out = nullptr;        // optional [batch]
};

// Same fields as kvq::AttentionBatch<T> (kvq/attention/batch.hpp), model-dtype pointers as void*.
// Serves decode (q_len 1..16) and chunked prefill (any q_len) alike.
struct DecodeArgs {
  int32_t batch = 0;
  int32_t num_q_heads = 0;
  kvq::SeqLengths lengths;            // prefix lengths; cold lengths before or after this step's append
  const int32_t* cu_q = nullptr;      // [batch + 1]: q_len 1..16 per sequence (decode), any (prefill)
  const void* q = nullptr;            // [cu_q[batch]][num_q_heads][head_dim]
  const void* new_k = nullptr;        // [cu_q[batch]][num_kv_heads][head_dim]
  const void* new_v = nullptr;
  float softmax_scale = 0.0f;
  float softcap = 0.0f;
};

// Whether `key` is one of Instances (ask before building a cache of that format).
bool engine_supports(const kvq::ConfigKey& key);

// kvq::append<Cfg> for the instantiated configuration whose key is `key`; Status::kNotInstantiated
// for any other key (nothing falls back to another configuration).
kvq::Status engine_append(const kvq::ConfigKey& key, const LayerCache& cache, const AppendArgs& args,
                          int max_new_tokens, uint32_t* flags, cudaStream_t stream);

// kvq::plan_decode<Cfg>: once per batch shape (host; asks the CUDA occupancy calculator). The
// plan says how many workspace bytes engine_decode needs.
kvq::Status engine_plan_decode(const kvq::ConfigKey& key, const kvq::DecodeShape& shape, kvq::DecodePlan* plan);

// kvq::decode<Cfg>: every step; no host synchronisation or allocation (capturable in a CUDA graph).
// out: [cu_q[batch]][num_q_heads][head_dim] of the model dtype.
kvq::Status engine_decode(const kvq::ConfigKey& key, const LayerCache& cache, const DecodeArgs& args,
                          const kvq::DecodePlan& plan, void* workspace, size_t workspace_bytes, void* out,
                          uint32_t* flags, cudaStream_t stream);

// kvq::plan_prefill<Cfg> (host, once per batch shape) and kvq::prefill<Cfg> (every chunk; no host
// synchronisation or allocation): chunks of any length attending to their whole cached prefix.
kvq::Status engine_plan_prefill(const kvq::ConfigKey& key, const kvq::PrefillShape& shape, kvq::PrefillPlan* plan);
kvq::Status engine_prefill(const kvq::ConfigKey& key, const LayerCache& cache, const DecodeArgs& args,
                           const kvq::PrefillPlan& plan, void* workspace, size_t workspace_bytes, void* out,
                           uint32_t* flags, cudaStream_t stream);

}  // namespace engine

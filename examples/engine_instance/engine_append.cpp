// examples/engine_instance/engine_append.cpp - runtime key -> compiled configuration.
//
// A plain C++ translation unit (host compiler, no CUDA header): it calls kvq::append<Cfg>,
// kvq::plan_decode<Cfg> / kvq::decode<Cfg> and kvq::plan_prefill<Cfg> / kvq::prefill<Cfg>, whose
// definitions come from the KVQ_INSTANTIATE_* lines of the .cu files next to it.
#include "kvq_instances.hpp"

namespace engine {
namespace {

template <class T>
kvq::CacheView<T> typed(const LayerCache& c) {
  kvq::CacheView<T> v;
  v.cold = static_cast<uint8_t*>(c.cold);
  v.num_pages = c.num_pages;
  v.hot_k = static_cast<T*>(c.hot_k);
  v.hot_v = static_cast<T*>(c.hot_v);
  v.num_slots = c.num_slots;
  v.residual = c.residual;
  v.num_kv_heads = c.num_kv_heads;
  v.block_table = c.block_table;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.hot_slot = c.hot_slot;
  return v;
}

template <class T>
kvq::AppendBatch<T> typed(const AppendArgs& a) {
  kvq::AppendBatch<T> b;
  b.batch = a.batch;
  b.lengths = a.lengths;
  b.cu_new = a.cu_new;
  b.new_k = static_cast<const T*>(a.new_k);
  b.new_v = static_cast<const T*>(a.new_v);
  b.cold_out = a.cold_out;
  return b;
}

template <class T>
kvq::AttentionBatch<T> typed(const DecodeArgs& a) {
  kvq::AttentionBatch<T> b;
  b.batch = a.batch;
  b.num_q_heads = a.num_q_heads;
  b.lengths = a.lengths;
  b.cu_q = a.cu_q;
  b.q = static_cast<const T*>(a.q);
  b.new_k = static_cast<const T*>(a.new_k);
  b.new_v = static_cast<const T*>(a.new_v);
  b.softmax_scale = a.softmax_scale;
  b.softcap = a.softcap;
  return b;
}

}  // namespace

bool engine_supports(const kvq::ConfigKey& key) { return kvq::contains(Instances{}, key); }

kvq::Status engine_append(const kvq::ConfigKey& key, const LayerCache& cache, const AppendArgs& args,
                          int max_new_tokens, uint32_t* flags, cudaStream_t stream) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    using T = typename Cfg::dtype;
    return kvq::append<Cfg>(typed<T>(cache), typed<T>(args), max_new_tokens, flags, stream);
  });
}

kvq::Status engine_plan_decode(const kvq::ConfigKey& key, const kvq::DecodeShape& shape, kvq::DecodePlan* plan) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    return kvq::plan_decode<Cfg>(shape, plan);
  });
}

kvq::Status engine_decode(const kvq::ConfigKey& key, const LayerCache& cache, const DecodeArgs& args,
                          const kvq::DecodePlan& plan, void* workspace, size_t workspace_bytes, void* out,
                          uint32_t* flags, cudaStream_t stream) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    using T = typename Cfg::dtype;
    return kvq::decode<Cfg>(typed<T>(cache), typed<T>(args), plan, workspace, workspace_bytes, static_cast<T*>(out),
                            flags, stream);
  });
}

kvq::Status engine_plan_prefill(const kvq::ConfigKey& key, const kvq::PrefillShape& shape, kvq::PrefillPlan* plan) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    return kvq::plan_prefill<Cfg>(shape, plan);
  });
}

kvq::Status engine_prefill(const kvq::ConfigKey& key, const LayerCache& cache, const DecodeArgs& args,
                           const kvq::PrefillPlan& plan, void* workspace, size_t workspace_bytes, void* out,
                           uint32_t* flags, cudaStream_t stream) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    using T = typename Cfg::dtype;
    return kvq::prefill<Cfg>(typed<T>(cache), typed<T>(args), plan, workspace, workspace_bytes, static_cast<T*>(out),
                             flags, stream);
  });
}

}  // namespace engine

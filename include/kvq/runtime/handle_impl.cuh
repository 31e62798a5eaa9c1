// kvq/runtime/handle_impl.cuh - the ops tables of kvq/runtime/handle.hpp (include from a .cu).
//
//   KVQ_INSTANTIATE_OPS(MyConfig, kvq::kOpAppend | kvq::kOpDecode);  // an alias: no commas
//
// A table only points at the typed entry points (kvq::append<Cfg>, ...; their declarations are
// enough here), so this file compiles fast; the operations in the table's bit set must be
// instantiated in some .cu of the same binary (KVQ_INSTANTIATE_APPEND / _DECODE / _PREFILL /
// _DEQUANTIZE, with their *_impl.cuh), else the link fails. kvq_add_instances (CMake) writes
// both from one list.
#pragma once

#include <cuda_runtime.h>

#include "kvq/append/append.hpp"
#include "kvq/append/rollback.cuh"
#include "kvq/decode/decode.hpp"
#include "kvq/dequant/dequantize.hpp"
#include "kvq/prefill/prefill.hpp"
#include "kvq/runtime/handle.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// The typed views of the erased arguments (same fields, model-dtype pointers cast back).
template <class T>
CacheView<T> typed_view(const CacheView<void>& c) {
  CacheView<T> v;
  v.cold = c.cold;
  v.num_pages = c.num_pages;
  v.hot_k = static_cast<T*>(c.hot_k);
  v.hot_v = static_cast<T*>(c.hot_v);
  v.num_slots = c.num_slots;
  v.residual = c.residual;
  v.num_kv_heads = c.num_kv_heads;
  v.block_table = c.block_table;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.hot_slot = c.hot_slot;
  v.sink_k = static_cast<T*>(c.sink_k);
  v.sink_v = static_cast<T*>(c.sink_v);
  v.sinks = c.sinks;
  v.key_clip = c.key_clip;
  return v;
}

template <class T>
AppendBatch<T> typed_append(const AppendBatch<void>& a) {
  AppendBatch<T> b;
  b.batch = a.batch;
  b.lengths = a.lengths;
  b.cu_new = a.cu_new;
  b.new_k = static_cast<const T*>(a.new_k);
  b.new_v = static_cast<const T*>(a.new_v);
  b.cold_out = a.cold_out;
  return b;
}

template <class T>
AttentionBatch<T> typed_attention(const AttentionBatch<void>& a) {
  AttentionBatch<T> b;
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

template <class Cfg>
Status erased_append(const CacheView<void>& cache, const AppendBatch<void>& batch, int max_new_tokens, uint32_t* flags,
                     cudaStream_t stream) {
  using T = typename Cfg::dtype;
  return append<Cfg>(typed_view<T>(cache), typed_append<T>(batch), max_new_tokens, flags, stream);
}

template <class Cfg>
Status erased_plan_decode(const DecodeShape& shape, DecodePlan* plan) {
  return plan_decode<Cfg>(shape, plan);
}

template <class Cfg>
Status erased_decode(const CacheView<void>& cache, const AttentionBatch<void>& batch, const DecodePlan& plan,
                     void* workspace, size_t workspace_bytes, void* out, uint32_t* flags, cudaStream_t stream) {
  using T = typename Cfg::dtype;
  return decode<Cfg>(typed_view<T>(cache), typed_attention<T>(batch), plan, workspace, workspace_bytes,
                     static_cast<T*>(out), flags, stream);
}

template <class Cfg>
Status erased_plan_prefill(const PrefillShape& shape, PrefillPlan* plan) {
  return plan_prefill<Cfg>(shape, plan);
}

template <class Cfg>
Status erased_prefill(const CacheView<void>& cache, const AttentionBatch<void>& batch, const PrefillPlan& plan,
                      void* workspace, size_t workspace_bytes, void* out, uint32_t* flags, cudaStream_t stream) {
  using T = typename Cfg::dtype;
  return prefill<Cfg>(typed_view<T>(cache), typed_attention<T>(batch), plan, workspace, workspace_bytes,
                      static_cast<T*>(out), flags, stream);
}

template <class Cfg>
Status erased_dequantize(const CacheView<void>& cache, const SeqLengths& lengths, int batch, const int32_t* cu_out,
                         int64_t max_len, void* k_out, void* v_out, uint32_t* flags, cudaStream_t stream) {
  using T = typename Cfg::dtype;
  return dequantize<Cfg>(typed_view<T>(cache), lengths, batch, cu_out, max_len, static_cast<T*>(k_out),
                         static_cast<T*>(v_out), flags, stream);
}

// The table of Cfg: an operation outside Ops is a null entry and its typed entry point is not
// referenced (if constexpr), so it need not be instantiated anywhere.
template <class Cfg, unsigned Ops>
constexpr OpsTable make_ops_table() {
  OpsTable t{key_of<Cfg>(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &rollback};
  if constexpr ((Ops & kOpAppend) != 0) t.append = &erased_append<Cfg>;
  if constexpr ((Ops & kOpDecode) != 0) {
    t.plan_decode = &erased_plan_decode<Cfg>;
    t.decode = &erased_decode<Cfg>;
  }
  if constexpr ((Ops & kOpPrefill) != 0) {
    t.plan_prefill = &erased_plan_prefill<Cfg>;
    t.prefill = &erased_prefill<Cfg>;
  }
  if constexpr ((Ops & kOpDequantize) != 0) t.dequantize = &erased_dequantize<Cfg>;
  return t;
}

}  // namespace detail

template <class Cfg, unsigned Ops>
const OpsTable& ops_table() {
  static_assert((Ops & ~unsigned(kOpAll)) == 0, "Ops: a bit set of kvq::Operation values");
  static constexpr OpsTable table = detail::make_ops_table<Cfg, Ops>();
  return table;
}

#define KVQ_INSTANTIATE_OPS(Cfg, Ops) template const ::kvq::OpsTable& kvq::ops_table<Cfg, Ops>()

KVQ_NAMESPACE_END

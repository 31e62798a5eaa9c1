// kvq/runtime/typed_args.hpp - the type-erased arguments of kvq::Handle (CacheView<void>,
// AppendBatch<void>, AttentionBatch<void>) turned back into the typed structs of a configuration's
// model dtype (the same fields, the model-dtype pointers cast back), and a typed view erased. Host code, shared by the
// handle's ops tables (runtime/handle_impl.cuh) and by callers that run the host reference on
// erased arguments; one place, so that a field added to a view reaches every path.
#pragma once

#include "kvq/attention/batch.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

// A view with the same fields and the model-dtype pointers cast (void* <-> T*): one field list, so
// that a field added to CacheView reaches both directions.
template <class To, class From>
CacheView<To> view_cast(const CacheView<From>& c) {
  CacheView<To> v;
  v.cold = c.cold;
  v.num_pages = c.num_pages;
  v.hot_k = static_cast<To*>(c.hot_k);
  v.hot_v = static_cast<To*>(c.hot_v);
  v.num_slots = c.num_slots;
  v.residual = c.residual;
  v.num_kv_heads = c.num_kv_heads;
  v.block_table = c.block_table;
  v.max_pages_per_seq = c.max_pages_per_seq;
  v.hot_slot = c.hot_slot;
  v.sink_k = static_cast<To*>(c.sink_k);
  v.sink_v = static_cast<To*>(c.sink_v);
  v.sinks = c.sinks;
  v.key_clip = c.key_clip;
  return v;
}

template <class T>
CacheView<T> typed_view(const CacheView<void>& c) {
  return view_cast<T>(c);
}

// The inverse of typed_view: what an engine holding a typed view passes to a Handle.
template <class T>
CacheView<void> erased_view(const CacheView<T>& t) {
  return view_cast<void>(t);
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

KVQ_NAMESPACE_END

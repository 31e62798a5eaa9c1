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
#include "kvq/runtime/typed_args.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

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

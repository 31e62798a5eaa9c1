// kvq/runtime/handle.hpp - a runtime handle over an engine's compiled configurations (light: no
// CUDA headers, so any host translation unit of an engine can include it).
//
//   kvq::Handle h;
//   kvq::Status st = kvq::make_handle(Instances{}, key, &h);  // kNotInstantiated: key not compiled
//   h.append(cache, batch, max_new_tokens, flags, stream);                  kvq::append<Cfg>
//   h.plan_decode(shape, &plan);   h.decode(cache, attn, plan, ws, bytes, out, flags, stream);
//   h.plan_prefill(shape, &pplan); h.prefill(cache, attn, pplan, ws, bytes, out, flags, stream);
//   h.dequantize(cache, lengths, batch, cu_out, max_len, k_out, v_out, flags, stream);
//   h.rollback(len, cold, new_len, batch, flags, stream);                   kvq::rollback
//
// Each call is the typed entry point of the handle's configuration (same arguments, same Status,
// same contract: kvq/append/append.hpp, decode/decode.hpp, prefill/prefill.hpp,
// dequant/dequantize.hpp, append/rollback.cuh) with the model dtype erased: CacheView<void>,
// AppendBatch<void> and AttentionBatch<void> have the fields of the typed structs, their
// model-dtype pointers as void* (pointing at the dtype of the handle's key).
//
// One OpsTable per compiled configuration, defined by kvq/runtime/handle_impl.cuh and
// instantiated by KVQ_INSTANTIATE_OPS(Cfg, Ops) in a .cu file; the CMake helper
// kvq_add_instances writes those files, the kernels' instantiations and the matching ConfigList
// from one list, so the list a handle is looked up in cannot drift from what was compiled. A key
// not in the list is Status::kNotInstantiated, and so is an operation the table was built
// without; nothing falls back to another configuration.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/attention/batch.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/cuda_fwd.hpp"
#include "kvq/core/status.hpp"
#include "kvq/decode/plan.hpp"
#include "kvq/dispatch/dispatch.hpp"
#include "kvq/prefill/plan.hpp"

KVQ_NAMESPACE_BEGIN

// The per-configuration operations a table may hold (a bit set). Rollback does not depend on
// the configuration and is always there.
enum Operation : unsigned {
  kOpAppend = 1u << 0,
  kOpDecode = 1u << 1,      // plan_decode and decode
  kOpPrefill = 1u << 2,     // plan_prefill and prefill
  kOpDequantize = 1u << 3,
  kOpAll = kOpAppend | kOpDecode | kOpPrefill | kOpDequantize,
};

// One configuration's entry points with the model dtype erased; a null entry was not compiled.
struct OpsTable {
  ConfigKey key;
  Status (*append)(const CacheView<void>& cache, const AppendBatch<void>& batch, int max_new_tokens, uint32_t* flags,
                   cudaStream_t stream);
  Status (*plan_decode)(const DecodeShape& shape, DecodePlan* plan);
  Status (*decode)(const CacheView<void>& cache, const AttentionBatch<void>& batch, const DecodePlan& plan,
                   void* workspace, size_t workspace_bytes, void* out, uint32_t* flags, cudaStream_t stream);
  Status (*plan_prefill)(const PrefillShape& shape, PrefillPlan* plan);
  Status (*prefill)(const CacheView<void>& cache, const AttentionBatch<void>& batch, const PrefillPlan& plan,
                    void* workspace, size_t workspace_bytes, void* out, uint32_t* flags, cudaStream_t stream);
  Status (*dequantize)(const CacheView<void>& cache, const SeqLengths& lengths, int batch, const int32_t* cu_out,
                       int64_t max_len, void* k_out, void* v_out, uint32_t* flags, cudaStream_t stream);
  Status (*rollback)(int32_t* len, const int32_t* cold, const int32_t* new_len, int batch, uint32_t* flags,
                     cudaStream_t stream);
};

// The table of configuration Cfg with the operations of the bit set Ops. Defined in
// handle_impl.cuh; a table never instantiated (KVQ_INSTANTIATE_OPS) is a link error.
template <class Cfg, unsigned Ops>
const OpsTable& ops_table();

// A configuration's operations, chosen at run time. Cheap to copy (one pointer); a
// default-constructed handle answers kNotInstantiated to everything.
class Handle {
 public:
  Handle() = default;
  explicit Handle(const OpsTable* ops) : ops_(ops) {}

  bool valid() const { return ops_ != nullptr; }
  // The configuration the handle runs (a value-initialized key when !valid()).
  ConfigKey key() const { return ops_ ? ops_->key : ConfigKey{}; }
  // Whether the handle's table holds every operation of the bit set `ops`.
  bool has(unsigned ops) const {
    if (!ops_) return false;
    return (!(ops & kOpAppend) || ops_->append) && (!(ops & kOpDecode) || (ops_->plan_decode && ops_->decode)) &&
           (!(ops & kOpPrefill) || (ops_->plan_prefill && ops_->prefill)) &&
           (!(ops & kOpDequantize) || ops_->dequantize);
  }

  Status append(const CacheView<void>& cache, const AppendBatch<void>& batch, int max_new_tokens, uint32_t* flags,
                cudaStream_t stream) const {
    return ops_ && ops_->append ? ops_->append(cache, batch, max_new_tokens, flags, stream) : Status::kNotInstantiated;
  }
  Status plan_decode(const DecodeShape& shape, DecodePlan* plan) const {
    return ops_ && ops_->plan_decode ? ops_->plan_decode(shape, plan) : Status::kNotInstantiated;
  }
  Status decode(const CacheView<void>& cache, const AttentionBatch<void>& batch, const DecodePlan& plan, void* workspace,
                size_t workspace_bytes, void* out, uint32_t* flags, cudaStream_t stream) const {
    return ops_ && ops_->decode ? ops_->decode(cache, batch, plan, workspace, workspace_bytes, out, flags, stream)
                                : Status::kNotInstantiated;
  }
  Status plan_prefill(const PrefillShape& shape, PrefillPlan* plan) const {
    return ops_ && ops_->plan_prefill ? ops_->plan_prefill(shape, plan) : Status::kNotInstantiated;
  }
  Status prefill(const CacheView<void>& cache, const AttentionBatch<void>& batch, const PrefillPlan& plan,
                 void* workspace, size_t workspace_bytes, void* out, uint32_t* flags, cudaStream_t stream) const {
    return ops_ && ops_->prefill ? ops_->prefill(cache, batch, plan, workspace, workspace_bytes, out, flags, stream)
                                 : Status::kNotInstantiated;
  }
  Status dequantize(const CacheView<void>& cache, const SeqLengths& lengths, int batch, const int32_t* cu_out,
                    int64_t max_len, void* k_out, void* v_out, uint32_t* flags, cudaStream_t stream) const {
    return ops_ && ops_->dequantize
               ? ops_->dequantize(cache, lengths, batch, cu_out, max_len, k_out, v_out, flags, stream)
               : Status::kNotInstantiated;
  }
  Status rollback(int32_t* len, const int32_t* cold, const int32_t* new_len, int batch, uint32_t* flags,
                  cudaStream_t stream) const {
    return ops_ && ops_->rollback ? ops_->rollback(len, cold, new_len, batch, flags, stream) : Status::kNotInstantiated;
  }

 private:
  const OpsTable* ops_ = nullptr;
};

// Whether no two configurations of a list share a key (two spellings of one configuration: the
// second could never be reached).
template <class... Cfgs>
constexpr bool keys_unique(ConfigList<Cfgs...>) {
  constexpr int n = int(sizeof...(Cfgs));
  const ConfigKey keys[n + 1] = {key_of<Cfgs>()..., ConfigKey{}};
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (keys[i] == keys[j]) return false;
  return true;
}

// The handle of the configuration of `list` whose key is `key`, its table holding the operations
// Ops (what the .cu files instantiated). Status::kNotInstantiated and an empty handle for a key
// not in the list.
template <unsigned Ops = kOpAll, class... Cfgs>
Status make_handle(ConfigList<Cfgs...> list, const ConfigKey& key, Handle* handle) {
  static_assert(keys_unique(ConfigList<Cfgs...>{}), "a configuration appears twice in the list");
  if (!handle) return Status::kNullPointer;
  *handle = Handle{};
  return dispatch(list, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    *handle = Handle(&ops_table<Cfg, Ops>());
    return Status::kSuccess;
  });
}

KVQ_NAMESPACE_END

// kvq/attention/run_checks.hpp - the host-side argument checks every attention launcher makes
// before it launches anything (decode and chunked prefill share them; no CUDA needed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "kvq/attention/batch.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

// What a launcher's plan fixed, as the checks need it.
struct PlannedAttention {
  int head_dim, page;
  size_t record_bytes;
  int num_q_heads, num_kv_heads, residual;
  int64_t batch;           // sequences planned for
  size_t workspace_bytes;  // workspace the plan asked for
};

// In order: the view and the batch (check_view, check_attention_args); the plan against the
// configuration Cfg and the call (kConfigMismatch); more sequences than planned or than a grid
// dimension holds (kInvalidShape); null buffers; a workspace smaller than planned; a workspace
// not 256-byte aligned, a pool or a row buffer (q, new K/V, hot rings, sink rows) not 16-byte aligned
// (kInvalidShape).
template <class Cfg>
Status check_attention_run(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
                           const PlannedAttention& plan, const void* workspace, size_t workspace_bytes, const void* out,
                           const uint32_t* flags) {
  Status st = check_view(cache, Cfg::page);
  if (st == Status::kSuccess) st = check_sinks<Cfg>(cache);
  if (st == Status::kSuccess) st = check_attention_args(batch, cache.num_kv_heads);
  if (st != Status::kSuccess) return st;
  if (plan.head_dim != Cfg::head_dim || plan.page != Cfg::page || plan.record_bytes != Cfg::record_bytes ||
      plan.num_q_heads != batch.num_q_heads || plan.num_kv_heads != cache.num_kv_heads || plan.residual != cache.residual)
    return Status::kConfigMismatch;
  if (batch.batch > plan.batch || batch.batch > 65535) return Status::kInvalidShape;
  if (!workspace || !out || !flags) return Status::kNullPointer;
  if (workspace_bytes < plan.workspace_bytes) return Status::kWorkspaceTooSmall;
  if (reinterpret_cast<uintptr_t>(workspace) % 256 || reinterpret_cast<uintptr_t>(cache.cold) % 16) return Status::kInvalidShape;
  // The kernels read model-dtype rows (queries, new K/V, the hot rings, the sink rows) with
  // 16-byte loads.
  for (const void* rows : {static_cast<const void*>(batch.q), static_cast<const void*>(batch.new_k),
                           static_cast<const void*>(batch.new_v), static_cast<const void*>(cache.hot_k),
                           static_cast<const void*>(cache.hot_v), static_cast<const void*>(cache.sink_k),
                           static_cast<const void*>(cache.sink_v)})
    if (reinterpret_cast<uintptr_t>(rows) % 16) return Status::kInvalidShape;
  return Status::kSuccess;
}

KVQ_NAMESPACE_END

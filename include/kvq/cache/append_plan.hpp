// kvq/cache/append_plan.hpp - what one append does to one sequence, shared by the host reference
// and the append kernel: the batch arguments, the per-sequence checks and where each token's
// raw K/V row comes from.
#pragma once

#include <climits>
#include <cstdint>

#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/core/batch_rows.hpp"
#include "kvq/core/status.hpp"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN

// A batch of appends (prompt, chunk or decode tokens alike). Pointers are host memory for the
// host reference and device memory for the kernel.
template <class T>
struct AppendBatch {
  int32_t batch = 0;
  SeqLengths lengths;              // before the append
  const int32_t* cu_new = nullptr; // [batch + 1] prefix sums of new tokens per sequence, cu_new[0] = 0
  // New tokens' K and V: [cu_new[batch]][num_kv_heads][head_dim] (e.g. the QKV projection after RoPE).
  const T* new_k = nullptr;
  const T* new_v = nullptr;
  int32_t* cold_out = nullptr;     // optional [batch]: the cold length after the append
};
// The GPU append reads and writes 16 bytes at a time: cold, hot_k, hot_v, new_k and new_v must be
// 16-byte aligned (a slice of a packed QKV buffer may need a copy); the launcher checks it.

// One sequence's append, resolved from lengths.
struct SeqAppend {
  int64_t len_old, cold_old, len_new, cold_new;
  int64_t new_begin;  // row of the sequence's first new token in new_k / new_v
  int32_t slot;
  Status status;
};

// Checks one sequence's lengths and hot slot and resolves its append. max_new: the caller's bound
// on new tokens per sequence (the kernel's grid is sized from it). The page ids of the pages that
// turn cold are checked separately (new_pages_valid), so a kernel can spread that over threads.
template <class T>
KVQ_HD SeqAppend plan_sequence(const CacheView<T>& v, const AppendBatch<T>& a, int b, int page,
                               int64_t max_new = INT64_MAX) {
  SeqAppend s{};
  s.len_old = a.lengths.len[b];
  s.cold_old = a.lengths.cold[b];
  const BatchRows rows = batch_rows_of(a.cu_new, b, a.batch);
  s.new_begin = rows.begin;
  const int64_t n = rows.count();
  s.len_new = s.len_old + n;
  s.slot = v.hot_slot[b];
  s.status = n > max_new || a.cu_new[0] != 0 ? Status::kInvalidShape
                                             : check_lengths(s.len_old, s.cold_old, n, v.residual, page, v.max_pages_per_seq);
  if (s.status == Status::kSuccess && !rows.inside()) s.status = Status::kInvalidShape;
  if (s.status == Status::kSuccess && (s.slot < 0 || s.slot >= v.num_slots)) s.status = Status::kInvalidHotSlot;
  if (s.status == Status::kSuccess) s.cold_new = cold_after(s.len_new, s.cold_old, v.residual, page);
  return s;
}

// Whether the block-table entries of the pages turning cold name pages of the pool. Thread tid of
// nthreads checks every nthreads-th entry (the host reference passes 0 and 1).
template <class T>
KVQ_HD bool new_pages_valid(const CacheView<T>& v, int b, const SeqAppend& s, int page, int tid, int nthreads) {
  const int32_t* row = v.block_table + int64_t(b) * v.max_pages_per_seq;
  bool ok = true;
  for (int64_t p = s.cold_old / page + tid; p < s.cold_new / page; p += nthreads)
    ok = ok && page_in_pool(v, row[p]);
  return ok;
}

// Raw row (head_dim values) of token t of the sequence for one head: from the hot ring while
// t < len_old, else from the new tokens.
template <class T>
KVQ_HD const T* source_row(const CacheView<T>& v, const T* ring, const T* fresh, const SeqAppend& s,
                           int64_t t, int head, int head_dim, int page) {
  const int window = v.residual + page;
  if (t < s.len_old) return ring + hot_offset(s.slot, ring_row(t, window), head, window, v.num_kv_heads, head_dim);
  return fresh + (size_t(s.new_begin + (t - s.len_old)) * size_t(v.num_kv_heads) + size_t(head)) * size_t(head_dim);
}

// Token whose row the page encoder reads for token t: sink tokens (t < v.sinks, all in page 0)
// read as token `sinks`, so they do not widen their groups' ranges; their own codes are never
// read back (attention and dequantize take them from sink_k / sink_v).
template <class T>
KVQ_HD int64_t encoder_token(const CacheView<T>& v, int64_t t) {
  return t < v.sinks ? int64_t(v.sinks) : t;
}

// Host-side checks of a view that need no device memory access.
template <class T>
inline Status check_view(const CacheView<T>& v, int page) {
  if (!v.cold || !v.hot_k || !v.hot_v || !v.block_table || !v.hot_slot) return Status::kNullPointer;
  // KV heads are a grid dimension of every kernel (at most 65535); the window R + P is an int.
  if (v.num_kv_heads <= 0 || v.num_kv_heads > 65535 || v.num_slots <= 0 || v.num_pages < 0 || v.max_pages_per_seq < 0)
    return Status::kInvalidShape;
  if (v.residual < 0 || v.residual % page != 0 || INT32_MAX - page < v.residual) return Status::kConfigMismatch;
  if (v.sinks < 0 || v.sinks > kMaxSinks || v.sinks >= page) return Status::kConfigMismatch;
  if (v.sinks > 0 && (!v.sink_k || !v.sink_v)) return Status::kNullPointer;
  if (v.key_clip != KeyClip::kMinMax && v.key_clip != KeyClip::kMse) return Status::kConfigMismatch;
  return Status::kSuccess;
}

// Sinks keep tokens unquantized that a "none" configuration never quantizes: such a view asks
// for work no kernel does, so it is refused (the many-row decode kernel, "none" only, has no sink
// path).
template <class Cfg, class T>
inline Status check_sinks(const CacheView<T>& v) {
  const bool unquantized = !Codec<typename Cfg::k_quant>::quantized && !Codec<typename Cfg::v_quant>::quantized;
  return v.sinks > 0 && unquantized ? Status::kConfigMismatch : Status::kSuccess;
}

template <class T>
inline Status check_append_args(const AppendBatch<T>& a) {
  if (a.batch < 0) return Status::kInvalidShape;
  if (a.batch == 0) return Status::kSuccess;
  if (!a.lengths.len || !a.lengths.cold || !a.cu_new || !a.new_k || !a.new_v) return Status::kNullPointer;
  return Status::kSuccess;
}

KVQ_NAMESPACE_END

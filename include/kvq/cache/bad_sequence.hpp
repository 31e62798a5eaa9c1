// kvq/cache/bad_sequence.hpp - which sequences of a batch a kernel rejected, and why (host only).
//
// A kernel that rejects a sequence (invalid lengths, hot slot, page ids or rows) leaves it
// untouched and ORs one bit, kFlagBadSequence, into the caller's flags: the hot path stays one
// atomic, and the flags word stays one word. When the bit is set, an engine finds the sequences and
// the reasons here, on the host, by re-running the kernels' per-sequence checks on host copies of
// the call's arguments (the same functions the kernels call where they exist: plan_sequence,
// new_pages_valid, check_rollback, check_lengths, batch_rows_of, page_in_pool).
//
// Only metadata is read: the lengths, the row prefix sums (cu_new, cu_out) and the view's
// block_table and hot_slot, which must point to host copies. The view's cold pool and hot rings are
// never dereferenced (they may stay device pointers). Attention batches: attention/bad_sequence.hpp.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/rollback.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/batch_rows.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

// One rejected sequence: its index in the batch and what its check returned. index -1: the call
// itself is invalid (what the launcher returns before any kernel runs; no sequence is examined).
struct BadSequence {
  int32_t index;
  Status reason;
};

// Sequences a kvq::append(cache, batch, max_new_tokens, ...) leaves untouched: plan_sequence's
// status (kInvalidLength, kBlockTableOverflow, kInvalidShape for rows outside the batch's or more
// than max_new_tokens, kInvalidHotSlot), else kInvalidPageId for a page turning cold whose
// block-table entry is outside the pool. (Two sequences sharing a hot slot are not a per-sequence
// check: the host reference refuses the whole batch, the kernel does not look.)
template <class T>
std::vector<BadSequence> bad_append_sequences(const CacheView<T>& v, const AppendBatch<T>& a, int page,
                                              int64_t max_new_tokens = INT64_MAX) {
  Status st = page > 0 ? check_view(v, page) : Status::kConfigMismatch;
  if (st == Status::kSuccess) st = check_append_args(a);
  if (st == Status::kSuccess && (max_new_tokens < 0 || a.batch > 65535)) st = Status::kInvalidShape;
  if (st != Status::kSuccess) return {BadSequence{-1, st}};
  std::vector<BadSequence> bad;
  for (int b = 0; b < a.batch; ++b) {
    const SeqAppend s = plan_sequence(v, a, b, page, max_new_tokens);
    if (s.status != Status::kSuccess)
      bad.push_back(BadSequence{b, s.status});
    else if (!new_pages_valid(v, b, s, page, 0, 1))
      bad.push_back(BadSequence{b, Status::kInvalidPageId});
  }
  return bad;
}

// Sequences a kvq::rollback(len, cold, new_len, batch, ...) leaves at their length (kInvalidLength:
// the new length is below the cold length or above the length). A negative new_len is "no change".
inline std::vector<BadSequence> bad_rollback_sequences(const int32_t* len, const int32_t* cold, const int32_t* new_len,
                                                       int batch) {
  if (batch < 0) return {BadSequence{-1, Status::kInvalidShape}};
  if (batch > 0 && (!len || !cold || !new_len)) return {BadSequence{-1, Status::kNullPointer}};
  std::vector<BadSequence> bad;
  for (int b = 0; b < batch; ++b) {
    if (new_len[b] < 0) continue;
    const Status st = check_rollback(len[b], cold[b], new_len[b]);
    if (st != Status::kSuccess) bad.push_back(BadSequence{b, st});
  }
  return bad;
}

// Sequences a kvq::dequantize(cache, lengths, batch, cu_out, max_len, ...) skips, with the checks of
// its kernel (dequant/dequantize_impl.cuh, dequantize_blocks): check_lengths (kInvalidLength,
// kBlockTableOverflow), the hot slot (kInvalidHotSlot), rows (kInvalidShape: fewer rows in cu_out
// than tokens, rows outside [0, cu_out[batch]), or a length above max_len), then kInvalidPageId for
// a cold page whose block-table entry is outside the pool.
template <class T>
std::vector<BadSequence> bad_dequantize_sequences(const CacheView<T>& v, const SeqLengths& lengths, int batch,
                                                  const int32_t* cu_out, int64_t max_len, int page) {
  Status st = page > 0 ? check_view(v, page) : Status::kConfigMismatch;
  if (st == Status::kSuccess && (batch < 0 || max_len < 0 || batch > 65535 || max_len > INT32_MAX)) st = Status::kInvalidShape;
  if (st != Status::kSuccess) return {BadSequence{-1, st}};
  if (batch == 0 || max_len == 0) return {};  // the launcher runs nothing
  if (!lengths.len || !lengths.cold || !cu_out) return {BadSequence{-1, Status::kNullPointer}};
  std::vector<BadSequence> bad;
  for (int b = 0; b < batch; ++b) {
    const int64_t len = lengths.len[b], cold = lengths.cold[b];
    const BatchRows rows = batch_rows_of(cu_out, b, batch);
    const int32_t slot = v.hot_slot[b];
    Status s = check_lengths(len, cold, 0, v.residual, page, v.max_pages_per_seq);
    if (s == Status::kSuccess && (slot < 0 || slot >= v.num_slots)) s = Status::kInvalidHotSlot;
    if (s == Status::kSuccess && (rows.count() < len || len > max_len || !rows.inside())) s = Status::kInvalidShape;
    if (s == Status::kSuccess) {
      const int64_t pool_end = cold < len ? cold : len;
      const int32_t* ids = v.block_table + int64_t(b) * v.max_pages_per_seq;
      for (int64_t p = 0; p < (pool_end + page - 1) / page && s == Status::kSuccess; ++p)
        if (!page_in_pool(v, ids[p])) s = Status::kInvalidPageId;
    }
    if (s != Status::kSuccess) bad.push_back(BadSequence{b, s});
  }
  return bad;
}

KVQ_NAMESPACE_END

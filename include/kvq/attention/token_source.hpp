// kvq/attention/token_source.hpp - where the attention reads token t's K and V from, per the
// contract of attention/batch.hpp. Shared by every attention kernel.
//
//   t <  sinks and t < records end   never a record: the sink row (t < cold) or the ring row
//                                    (page 0 turning cold in this step) -- attention sinks
//   t <  min(cold, len)              a cold record of the pool (dequantized)
//   cold <= t < min(target, len)     a page turning cold in this step: a record quantized on the
//                                    fly into the caller's transition area (same code as append)
//   max(cold, target) <= t < len     a hot ring row
//   len <= t                         the new tokens' fresh K/V
#pragma once

#include <climits>
#include <cstdint>

#include "kvq/attention/batch.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/batch_rows.hpp"
#include "kvq/cache/element_decode.hpp"

KVQ_NAMESPACE_BEGIN

// One sequence of an attention call, resolved from its lengths.
struct SeqAttention {
  int64_t len;     // prefix length
  int64_t cold;    // cold tokens in the pool now
  int64_t target;  // cold length after this step's append
  int64_t q0;      // first row of the sequence in q / new_k / new_v
  int32_t q_len;
  int32_t slot;
  Status status;
};

template <class T>
KVQ_HD SeqAttention resolve_attention(const CacheView<T>& v, const AttentionBatch<T>& a, int b, int page) {
  SeqAttention s{};
  s.len = a.lengths.len[b];
  s.cold = a.lengths.cold[b];
  const BatchRows rows = batch_rows_of(a.cu_q, b, a.batch);
  s.q0 = rows.begin;
  const int64_t q_len = rows.count();
  s.q_len = q_len >= 0 && q_len <= INT32_MAX ? int32_t(q_len) : -1;  // a count outside int32 (malformed cu_q): a length error
  s.slot = v.hot_slot[b];
  s.status = check_attention_lengths(s.len, s.cold, s.q_len, v.residual, page, v.max_pages_per_seq);
  if (s.status == Status::kSuccess && !rows.inside()) s.status = Status::kInvalidShape;
  if (s.status == Status::kSuccess && (s.slot < 0 || s.slot >= v.num_slots)) s.status = Status::kInvalidHotSlot;
  if (s.status == Status::kSuccess) s.target = cold_after(s.len + s.q_len, s.cold, v.residual, page);
  return s;
}

// The same sequence seen as an append of its q_len new tokens (for quantizing transition pages
// with the append's own code).
KVQ_HD SeqAppend as_append(const SeqAttention& s) {
  SeqAppend p{};
  p.len_old = s.len;
  p.cold_old = s.cold;
  p.len_new = s.len + s.q_len;
  p.cold_new = s.target;
  p.new_begin = s.q0;
  p.slot = s.slot;
  p.status = s.status;
  return p;
}

// Pages turning cold in this step that hold prefix tokens: [cold/P, transition_pages_end).
KVQ_HD int64_t transition_pages_end(const SeqAttention& s, int page) {
  const int64_t by_len = (s.len + page - 1) / page;
  const int64_t by_target = s.target / page;
  return by_len < by_target ? by_len : by_target;
}

// Row of q (and of the output) that query row rg of KV head h's GQA group reads: the kernels pack
// a sequence's rows as rg = token * group + head in the group, the token counted from the
// sequence's first new token q0; q is [total_q][num_q_heads][D].
KVQ_HD size_t packed_query_row(int64_t q0, int rg, int group, int num_q_heads, int h) {
  return size_t(q0 + rg / group) * num_q_heads + h * group + rg % group;
}

// End of the tokens served by records (cold pool + pages turning cold in this step).
KVQ_HD int64_t records_end(const SeqAttention& s) {
  const int64_t r = s.cold > s.target ? s.cold : s.target;
  return r < s.len ? r : s.len;
}

// Row of token j of one role when it is not read from a record: below sink_end (an attention
// sink, j < sinks, below the sequence's prefix and the pool's cold length: pass min(cold, len)
// where j may be a new token) the sink buffer's row (written when page 0 turned cold), else the
// ring or fresh row (a sink of page 0 turning cold in this step, a hot or a new token;
// source_row). token_ref, the decode tail kernel and prefill's SinkRows read sink tokens through it.
template <class T>
KVQ_HD const T* sink_row(const CacheView<T>& v, const T* sink, const T* ring, const T* fresh, const SeqAppend& p,
                         int64_t sink_end, int64_t j, int h, int head_dim, int page) {
  return j < sink_end ? sink + sink_offset(p.slot, int(j), h, v.sinks, v.num_kv_heads, head_dim)
                      : source_row(v, ring, fresh, p, j, h, head_dim, page);
}

// Token t as the attention reads it: either a record (quantized) or raw rows.
template <class T>
struct TokenRef {
  const uint8_t* record;  // non-null: dequantize row t_in_page of this record
  int t_in_page;
  const T* k;             // else: raw rows
  const T* v;
};

// transition: records of this sequence's transition pages, [page - cold/P][num_kv_heads][record].
template <class T>
KVQ_HD TokenRef<T> token_ref(const CacheView<T>& v, const AttentionBatch<T>& a, int b, int h, const SeqAttention& s,
                             int64_t t, int page, int head_dim, size_t record_bytes, const uint8_t* transition) {
  TokenRef<T> r{nullptr, int(t % page), nullptr, nullptr};
  if (t >= v.sinks && t < s.cold && t < s.len) {
    const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + t / page];
    r.record = v.cold + record_offset(id, h, v.num_kv_heads, record_bytes);
  } else if (t >= v.sinks && t < s.target && t < s.len) {
    r.record = transition + record_offset(t / page - s.cold / page, h, v.num_kv_heads, record_bytes);
  } else {
    // A sink token or a hot / new token: only a sink token lies below min(cold, len) here (a new
    // token may lie below cold when the step's append ran first).
    const SeqAppend p = as_append(s);
    const int64_t sink_end = s.cold < s.len ? s.cold : s.len;
    r.k = sink_row(v, v.sink_k, v.hot_k, a.new_k, p, sink_end, t, h, head_dim, page);
    r.v = sink_row(v, v.sink_v, v.hot_v, a.new_v, p, sink_end, t, h, head_dim, page);
  }
  return r;
}

// Channel c of token ref's key / value in fp32.
template <class Cfg>
KVQ_HD float token_key(const TokenRef<typename Cfg::dtype>& r, int c) {
  return r.record ? decode_record_element<Cfg, Role::kKey>(r.record, r.t_in_page, c) : r.k[c].to_float();
}
template <class Cfg>
KVQ_HD float token_value(const TokenRef<typename Cfg::dtype>& r, int c) {
  return r.record ? decode_record_element<Cfg, Role::kValue>(r.record, r.t_in_page, c) : r.v[c].to_float();
}

KVQ_NAMESPACE_END

// kvq/reference/append.hpp - host reference of the append (the specification and CPU fallback).
//
// For each sequence: pages [C_old/P, C_new/P) are quantized from the hot ring and/or the new
// tokens into the cold pages the block table names, then tokens >= C_new go to the ring.
// Every sequence is checked before anything is written: on a bad argument nothing changes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/core/status.hpp"
#include "kvq/codec/section_codec.hpp"

KVQ_NAMESPACE_BEGIN
namespace reference {

// Checks every sequence of the batch; fills plans on success.
template <class Cfg>
Status plan_append(const CacheView<typename Cfg::dtype>& v, const AppendBatch<typename Cfg::dtype>& a,
                   std::vector<SeqAppend>& plans) {
  Status st = check_view(v, Cfg::page);
  if (st == Status::kSuccess) st = check_sinks<Cfg>(v);
  if (st == Status::kSuccess) st = check_append_args(a);
  if (st != Status::kSuccess) return st;
  plans.resize(size_t(a.batch));
  std::vector<int32_t> slots;
  for (int b = 0; b < a.batch; ++b) {
    plans[size_t(b)] = plan_sequence(v, a, b, Cfg::page);
    if (plans[size_t(b)].status != Status::kSuccess) return plans[size_t(b)].status;
    if (!new_pages_valid(v, b, plans[size_t(b)], Cfg::page, 0, 1)) return Status::kInvalidPageId;
    slots.push_back(plans[size_t(b)].slot);
  }
  std::sort(slots.begin(), slots.end());
  if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) return Status::kInvalidHotSlot;
  return Status::kSuccess;
}

// Quantizes page `page_index` of a sequence (all KV heads) into `record0` (the head-0 record;
// heads follow at Cfg::record_bytes strides). Rows come from source_row().
template <class Cfg>
void encode_page(const CacheView<typename Cfg::dtype>& v, const typename Cfg::dtype* fresh_k,
                 const typename Cfg::dtype* fresh_v, const SeqAppend& s, int64_t page_index, uint8_t* record0,
                 uint32_t& flags) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  std::vector<uint8_t> scratch(size_t(P) * D);
  for (int h = 0; h < v.num_kv_heads; ++h) {
    auto row_k = [&](int t) { return source_row(v, v.hot_k, fresh_k, s, encoder_token(v, page_index * P + t), h, D, P); };
    auto row_v = [&](int t) { return source_row(v, v.hot_v, fresh_v, s, encoder_token(v, page_index * P + t), h, D, P); };
    encode_record<Cfg>(row_k, row_v, record0 + size_t(h) * Cfg::record_bytes, scratch.data(), 0, 1, [] {}, flags,
                       v.key_clip);
  }
}

template <class Cfg>
Status append(const CacheView<typename Cfg::dtype>& v, const AppendBatch<typename Cfg::dtype>& a,
              uint32_t* flags = nullptr) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  std::vector<SeqAppend> plans;
  const Status st = plan_append<Cfg>(v, a, plans);
  if (st != Status::kSuccess) return st;
  const int window = v.residual + P;
  uint32_t f = 0;
  for (int b = 0; b < a.batch; ++b) {
    const SeqAppend& s = plans[size_t(b)];
    const int32_t* pages = v.block_table + int64_t(b) * v.max_pages_per_seq;
    for (int64_t p = s.cold_old / P; p < s.cold_new / P; ++p)
      encode_page<Cfg>(v, a.new_k, a.new_v, s, p, v.cold + record_offset(pages[p], 0, v.num_kv_heads, Cfg::record_bytes), f);
    // Page 0 turned cold: its sink rows keep their model-dtype values (before any ring write).
    if (s.cold_old == 0 && s.cold_new > 0)
      for (int t = 0; t < v.sinks; ++t)
        for (int h = 0; h < v.num_kv_heads; ++h) {
          const size_t dst = sink_offset(s.slot, t, h, v.sinks, v.num_kv_heads, D);
          std::copy_n(source_row(v, v.hot_k, a.new_k, s, t, h, D, P), D, v.sink_k + dst);
          std::copy_n(source_row(v, v.hot_v, a.new_v, s, t, h, D, P), D, v.sink_v + dst);
        }
    // Ring writes come after the sequence's quantization: a ring row may hold a token being
    // quantized and be the destination of a new one.
    for (int64_t t = std::max(s.len_old, s.cold_new); t < s.len_new; ++t)
      for (int h = 0; h < v.num_kv_heads; ++h) {
        const size_t dst = hot_offset(s.slot, ring_row(t, window), h, window, v.num_kv_heads, D);
        std::copy_n(source_row(v, v.hot_k, a.new_k, s, t, h, D, P), D, v.hot_k + dst);
        std::copy_n(source_row(v, v.hot_v, a.new_v, s, t, h, D, P), D, v.hot_v + dst);
      }
    if (a.cold_out) a.cold_out[b] = int32_t(s.cold_new);
  }
  if (flags) *flags |= f;
  return Status::kSuccess;
}

}  // namespace reference
KVQ_NAMESPACE_END

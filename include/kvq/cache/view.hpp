// kvq/cache/view.hpp - CacheView: the non-owning description of one layer's paged cache.
//
// The engine owns every buffer; kvq only reads and writes through the pointers below. All byte
// offsets are computed in 64 bits (one layer of 100,000 pages x 8 heads exceeds 2^31 bytes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/quant/group_codec.hpp"

KVQ_NAMESPACE_BEGIN

template <class T>
struct CacheView {
  // Cold pool: [num_pages][num_kv_heads][record_bytes]; record layout in kvq/quant/record_layout.hpp.
  // 16-byte aligned.
  uint8_t* cold = nullptr;
  int64_t num_pages = 0;

  // Hot rings: [num_slots][window][num_kv_heads][head_dim] of T each, window = residual + page.
  // Token t of the sequence in slot s is row t mod window of ring s while it is hot. 16-byte
  // aligned (the attention kernels read rows with 16-byte loads).
  T* hot_k = nullptr;
  T* hot_v = nullptr;
  int32_t num_slots = 0;
  int32_t residual = 0;  // R: a multiple of the page size (0 allowed)

  int32_t num_kv_heads = 0;

  // Block table: [batch][max_pages_per_seq] page ids; row b lists sequence b's cold pages in
  // token order (entry i holds tokens [i*P, (i+1)*P)).
  const int32_t* block_table = nullptr;
  int32_t max_pages_per_seq = 0;

  // Hot slot of each sequence in the batch: [batch]. Assigned by the engine, not the batch index.
  const int32_t* hot_slot = nullptr;

  // Attention sinks: tokens [0, sinks) of every sequence are never read quantized (0 <= sinks <=
  // kMaxSinks and sinks < page; quantized configurations only). When page 0 turns cold, the append
  // copies its first `sinks` rows here, [num_slots][sinks][num_kv_heads][head_dim] of T each,
  // indexed by hot slot like the rings; they leave page 0's group statistics (the encoder reads
  // them as token `sinks`). Null when sinks is 0. 16-byte aligned.
  T* sink_k = nullptr;
  T* sink_v = nullptr;
  int32_t sinks = 0;

  // How the append (and a page turning cold inside an attention call) chooses the range of each
  // asymmetric key group: quant/group_codec.hpp. The bytes' meaning does not change.
  KeyClip key_clip = KeyClip::kMinMax;
};

// The largest number of sink tokens a view may keep.
constexpr int kMaxSinks = 16;

// Whether block-table entry `id` names a page of the cold pool (host reference and kernels alike:
// an entry outside it rejects its sequence).
template <class T>
KVQ_HD bool page_in_pool(const CacheView<T>& v, int32_t id) {
  return id >= 0 && id < v.num_pages;
}

// Byte offset of record (page, head) inside the cold pool.
KVQ_HD size_t record_offset(int64_t page, int head, int num_kv_heads, size_t record_bytes) {
  return (size_t(page) * size_t(num_kv_heads) + size_t(head)) * record_bytes;
}

// Element offset of (slot, row, head, 0) inside a hot ring buffer.
KVQ_HD size_t hot_offset(int slot, int row, int head, int window, int num_kv_heads, int head_dim) {
  return ((size_t(slot) * size_t(window) + size_t(row)) * size_t(num_kv_heads) + size_t(head)) * size_t(head_dim);
}

// Element offset of (slot, sink row, head, 0) inside sink_k / sink_v.
KVQ_HD size_t sink_offset(int slot, int row, int head, int sinks, int num_kv_heads, int head_dim) {
  return ((size_t(slot) * size_t(sinks) + size_t(row)) * size_t(num_kv_heads) + size_t(head)) * size_t(head_dim);
}

// Per-sequence lengths of a batch, as the engine keeps them (device or host memory, matching the
// entry point). `len` counts tokens already in the cache (before this step's new tokens),
// `cold` the cold tokens (a multiple of the page size).
struct SeqLengths {
  const int32_t* len = nullptr;   // [batch]
  const int32_t* cold = nullptr;  // [batch]
};

KVQ_NAMESPACE_END

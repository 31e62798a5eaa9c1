// kvq/decode/plan.hpp - the host-side plan of a decode attention call (no CUDA needed).
//
// plan_decode() runs once per batch shape: from upper bounds on the batch (sequences, longest
// sequence, longest q_len, total query tokens) it picks the split-KV size and reports the
// workspace the caller must provide. The run step (kvq::decode) then reads the actual lengths
// from device memory, so one plan (and one captured CUDA graph) serves every batch within the
// planned bounds.
#pragma once

#include <cstddef>
#include <climits>
#include <cstdint>

#include "kvq/quant/record_layout.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

constexpr int kDecodeMaxQLen = 16;    // speculative decoding: up to 16 new tokens per sequence
constexpr int kDecodeRowsPerCta = 8;   // query rows (GQA heads x new tokens) one element-wise CTA carries
constexpr int kDecodeTailChunk = 16;   // tail tokens (hot rows + new tokens) one tail CTA reads
constexpr int kDecodeSplitMinPages = 4;  // pages a split holds at least (one per warp of a records CTA)

constexpr int kDecodeManyRows = 64;     // query rows one CTA of the many-row kernel carries (rows_kernel.cuh)

// Query rows one CTA of the tensor-core split kernel carries. The records kernel unpacks each tile in
// registers for its rows: 16 when the GQA group x q_len needs more than 8 and the head dim leaves
// registers for two row tiles, else 8 (more rows take more row-tile CTAs). For configurations that
// store the model dtype in both roles ("none": many_rows_kernel), more than 16 rows go to the
// many-row kernel, kDecodeManyRows a CTA over tiles in shared memory, where the plan's batch holds
// at least kDecodeManyRowsMinTokens tokens (batch_tokens: batch x max_tokens): with fewer, its
// per-CTA fixed costs make it slower (measured on an H100: +24 % at batch 1 x 32K, q_len 8). For
// quantized configurations that kernel's dequantization in shared memory measured slower than the
// records kernel's unpacking (H100). Both in docs/PERF_NOTES.md.
constexpr int64_t kDecodeManyRowsMinTokens = int64_t(1) << 17;
constexpr int decode_rows_per_cta(int head_dim, int group, int max_q_len, bool many_rows_kernel = false,
                                  int64_t batch_tokens = 0) {
  return many_rows_kernel && group * max_q_len > 16 && batch_tokens >= kDecodeManyRowsMinTokens ? kDecodeManyRows
         : head_dim <= 128 && group * max_q_len > 8                                                   ? 16
                                                                                                      : 8;
}
// Tokens of a K/V tile of the many-row kernel: 64, or 32 at head dim 256 (shared memory). Its splits
// are whole tiles, so that a split's tiles never reach into the next split's pages.
KVQ_HD_CONSTEXPR int decode_rows_tile_tokens(int head_dim) { return head_dim > 128 ? 32 : 64; }

struct DecodeShape {
  int32_t batch;          // sequences (upper bound)
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t residual;       // R of the cache
  int64_t max_tokens;     // upper bound of len + q_len over the batch
  int32_t max_q_len;      // 1 .. kDecodeMaxQLen
  int64_t total_q;        // upper bound of the sum of q_len (rows of q)
  int32_t num_sms;        // multiprocessors of the GPU (cudaDevAttrMultiProcessorCount)
};

// Workspace layout (all offsets 256-byte aligned, sizes in bytes):
//   transition records [batch][R/P + 1][num_kv_heads][record_bytes]   pages turning cold this step
//   partial outputs    [slots][total_q][num_q_heads][head_dim] fp32  unnormalised
//   partial max/sum    [slots][total_q][num_q_heads][2] fp32
// slots = max_splits record splits, then tail_slots slots of tail_span chunks of kDecodeTailChunk
// tail tokens each (hot rows and new tokens: fewer than R + P + max_q_len of them; a view's
// attention sinks are one more chunk of tail slot 0, tail_kernel.cuh: no slot of their own).
//   sequence status    [batch] int32
struct DecodePlan {
  DecodeShape shape;
  int32_t head_dim, page;
  size_t record_bytes;
  int32_t rows_per_cta;      // query rows per split CTA (decode_rows_per_cta; kDecodeManyRows: the many-row kernel)
  int32_t split_tokens;      // tokens per split (a multiple of the page, and of decode_rows_tile_tokens for the many-row kernel)
  int32_t max_splits;        // splits of the longest sequence
  int32_t transition_pages;  // R/P + 1
  int32_t tail_chunks;       // ceil((R + P + max_q_len) / kDecodeTailChunk): chunks of the longest tail
  int32_t tail_span;         // chunks one tail slot covers (decode_tail_schedule)
  int32_t tail_slots;        // ceil(tail_chunks / tail_span)
  int32_t tail_ctas;         // 0: the tail kernel runs after the records kernel, one CTA per item;
                             // > 0: it runs beside it (a dependent launch) in this many CTAs, each
                             // taking every tail_ctas-th item (decode_tail_schedule)
  int32_t dependent_launches;  // 1: decode chains its launches as dependent launches (plan_decode<Cfg>
                               // on a device and with kernels that take them); 0: ordinary launches
  size_t transition_offset, partial_offset, stats_offset, status_offset, workspace_bytes;
};

constexpr size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

// Where and how the tail kernel runs (tail_kernel.cuh). Its work is items of (sequence, KV head x
// row tile, slot): a slot is `span` consecutive chunks of kDecodeTailChunk tail tokens, which one
// CTA walks with one softmax state and writes as one partial slot.
struct TailSchedule {
  int32_t ctas;   // 0: after the records kernel, one CTA an item; > 0: beside it in this many CTAs
  int32_t span;   // chunks a slot covers
  int32_t slots;  // ceil(chunks / span)
};

// Cost model of a tail item on the H200, in microseconds: resolving the sequence, staging its query
// rows and storing the slot (a few dependent round trips), then the slot's chunks in rounds of
// kDecodeTailChunksInFlight (one chunk per warp, each round a load round trip and two small
// tensor-core products). Measured alone on the H200, a batch-8 x 128K tail (4 items of 13 chunks
// a CTA) takes 42 us, a batch-1 one (an item of 7 chunks a CTA) 12 us; the model's round of 2 us
// leaves room for the slowdown beside the records kernel.
constexpr int kTailItemUs = 4, kTailRoundUs = 2;
constexpr int kDecodeTailChunksInFlight = 4;  // a tail CTA's warps (workspace.cuh, kDecodeWarps)
constexpr int64_t decode_tail_item_us(int32_t span) {
  return kTailItemUs + int64_t(kTailRoundUs) * ((span + kDecodeTailChunksInFlight - 1) / kDecodeTailChunksInFlight);
}
// A records CTA's life (INT2 at D 128, wider formats take longer): ~6 us of prologue and epilogue
// plus ~1 us a page of its split, estimated from H200 timings of the records kernel. It is only
// compared with the tail's costs above (measured on the same GPU), so on another GPU what matters
// is their ratio.
constexpr int64_t decode_records_cta_us(int64_t split_pages) { return 6 + split_pages; }
// The tail beside the records kernel (its dependent launch) takes the room the one-wave records
// grid leaves: free_slots records CTAs' worth, tails_per_slot tail CTAs each (0 when the device has
// no dependent launch). The span is chosen to minimise a CTA's share of items (decode_tail_item_us
// each); beside only if that share fits in a records CTA's life, else after it with one round of
// chunks an item (every CTA's warps busy once, all items in parallel). base_items: sequences x KV
// heads x row tiles; chunks: the tail chunks of the longest tail.
constexpr TailSchedule decode_tail_schedule(int64_t free_slots, int tails_per_slot, int64_t base_items, int32_t chunks,
                                            int64_t split_pages) {
  const int32_t after_span = chunks < kDecodeTailChunksInFlight ? (chunks > 0 ? chunks : 1) : kDecodeTailChunksInFlight;
  const TailSchedule after{0, after_span, (chunks + after_span - 1) / after_span};
  if (free_slots <= 0 || tails_per_slot <= 0 || base_items <= 0 || chunks <= 0) return after;
  TailSchedule best = after;
  int64_t best_us = decode_records_cta_us(split_pages) + 1;  // beside only within a records CTA's life
  for (int32_t slots = 1; slots <= chunks; ++slots) {
    const int32_t span = (chunks + slots - 1) / slots;
    if ((chunks + span - 1) / span != slots) continue;  // the same span as fewer slots
    const int64_t items = base_items * slots;
    const int64_t ctas = free_slots * tails_per_slot < items ? free_slots * tails_per_slot : items;
    const int64_t us = (items + ctas - 1) / ctas * decode_tail_item_us(span);
    if (us < best_us) {
      best_us = us;
      best = TailSchedule{int32_t(ctas), span, slots};
    }
  }
  return best;
}

// Fewer splits for the tail's sake: a records CTA whose split is short is bound by its latency
// (prologue, first loads, epilogue), so half as many CTAs, each with twice the pages, take about
// as long, and the room they leave lets the tail run beside them instead of after them (one
// kernel fewer in series). A long split is bound by issue or DRAM, and halving the CTAs costs
// time. So a halved split may read at most kDecodeTailRoomSplitBytes and hold at most
// kDecodeTailRoomSplitPages pages. Measured on the H200 at 4K tokens, halving against not: gains
// where the halved split reads up to 704 KB in up to 64 pages ("none" batch 8 69 -> 64 us with 22
// pages of 32 KB; INT4 batch 32 102 -> 99 us with 64 pages of 10 KB; INT2 batch 32 88 -> 75 us), a
// loss at 1 MB (INT8 batch 32, 64 pages: 131 -> 160 us). The page bound keeps long splits of small
// records (INT2 batch 1 x 128K, q_len 4: 63 -> 128 pages) at one wave.
constexpr int64_t kDecodeTailRoomSplitBytes = int64_t(768) << 10;
constexpr int64_t kDecodeTailRoomSplitPages = 64;
constexpr int64_t decode_tail_room_split_pages(size_t record_bytes) {
  const int64_t by_bytes = record_bytes > 0 ? kDecodeTailRoomSplitBytes / int64_t(record_bytes) : 0;
  return by_bytes < kDecodeTailRoomSplitPages ? by_bytes : kDecodeTailRoomSplitPages;
}

// ctas_per_sm: CTAs of the split kernel one multiprocessor holds at once (kvq::plan_decode<Cfg>
// asks the CUDA occupancy calculator). The split count fills exactly one wave: floor, not ceil,
// since one CTA past the wave doubles the time of the whole launch; fewer where that makes room for
// the tail (decode_tail_room_split_pages). dependent_launches: whether
// the device and the compiled kernels take dependent launches (plan_decode<Cfg> asks once, so
// kvq::decode does not at every launch). tails_per_slot: tail CTAs that fit on a multiprocessor
// holding one records CTA fewer than it can (registers and shared memory) where they do, else 0.
// many_rows_kernel: the configuration has the many-row kernel (decode_rows_per_cta; plan_decode<Cfg>
// says so for "none" configurations).
inline Status plan_decode(const DecodeShape& s, int head_dim, int page, size_t record_bytes, DecodePlan* plan,
                          int ctas_per_sm = 4, int tails_per_slot = 0, bool dependent_launches = false,
                          bool many_rows_kernel = false) {
  if (!plan) return Status::kNullPointer;
  if (s.batch < 0 || s.num_kv_heads <= 0 || s.num_q_heads <= 0 || s.num_q_heads % s.num_kv_heads != 0 ||
      s.max_tokens < 0 || s.max_q_len < 1 || s.max_q_len > kDecodeMaxQLen || s.total_q < 0 || s.num_sms <= 0 ||
      s.total_q > int64_t(s.batch) * s.max_q_len || s.max_tokens > INT32_MAX)
    return Status::kInvalidShape;
  if (s.residual < 0 || page <= 0 || s.residual % page != 0) return Status::kConfigMismatch;
  const int group = s.num_q_heads / s.num_kv_heads;
  const int rows_per_cta = decode_rows_per_cta(head_dim, group, s.max_q_len, many_rows_kernel, int64_t(s.batch) * s.max_tokens);
  // Tokens a split is a multiple of: whole pages, and for the many-row kernel whole tiles.
  const int64_t granule = rows_per_cta == kDecodeManyRows && decode_rows_tile_tokens(head_dim) > page ? decode_rows_tile_tokens(head_dim)
                                                                                                     : page;
  // A split holds at most 2^31 - 1 tokens (the kernels count a split's tokens in int).
  if ((s.max_tokens + granule - 1) / granule * granule > INT32_MAX) return Status::kInvalidShape;
  DecodePlan p{};
  p.shape = s;
  p.head_dim = head_dim;
  p.page = page;
  p.record_bytes = record_bytes;
  p.rows_per_cta = rows_per_cta;
  const int64_t row_tiles = (int64_t(group) * s.max_q_len + p.rows_per_cta - 1) / p.rows_per_cta;
  const int64_t ctas_without_split = int64_t(s.batch > 0 ? s.batch : 1) * s.num_kv_heads * row_tiles;
  const int64_t pages = (s.max_tokens + page - 1) / page;
  int64_t splits = int64_t(s.num_sms) * (ctas_per_sm > 0 ? ctas_per_sm : 1) / ctas_without_split;
  // A split of fewer than kDecodeSplitMinPages pages would leave warps of its CTA idle (a warp
  // streams whole pages) and only add slots to merge.
  if (splits > pages / kDecodeSplitMinPages) splits = pages / kDecodeSplitMinPages;
  if (splits < 1) splits = 1;
  p.transition_pages = s.residual / page + 1;
  const size_t rows = size_t(s.total_q) * size_t(s.num_q_heads);
  p.transition_offset = 0;
  p.partial_offset = align256(size_t(s.batch) * p.transition_pages * s.num_kv_heads * record_bytes);
  p.tail_chunks = (s.residual + page + s.max_q_len + kDecodeTailChunk - 1) / kDecodeTailChunk;
  const int64_t row_tiles8 = (int64_t(group) * s.max_q_len + kDecodeRowsPerCta - 1) / kDecodeRowsPerCta;
  p.dependent_launches = dependent_launches ? 1 : 0;
  const int64_t slots_on_gpu = int64_t(s.num_sms) * (ctas_per_sm > 0 ? ctas_per_sm : 1);
  TailSchedule tail{};
  const int64_t granule_pages = granule / page;
  const auto with_splits = [&](int64_t n) {
    p.split_tokens = int32_t(((pages + n - 1) / n + granule_pages - 1) / granule_pages * granule_pages * page);
    if (p.split_tokens == 0) p.split_tokens = page;
    p.max_splits = int32_t((s.max_tokens + p.split_tokens - 1) / p.split_tokens);
    if (p.max_splits < 1) p.max_splits = 1;
    const int64_t records_ctas = int64_t(p.max_splits) * ctas_without_split;
    tail = decode_tail_schedule(slots_on_gpu - records_ctas, tails_per_slot, int64_t(s.batch) * s.num_kv_heads * row_tiles8,
                                p.tail_chunks, p.split_tokens / page);
  };
  with_splits(splits);
  // Where the one-wave plan leaves no room for the tail, fewer and longer splits can: halved while
  // the tail would run after the records kernel and a halved split reads at most
  // kDecodeTailRoomSplitBytes of records in at most kDecodeTailRoomSplitPages pages
  // (decode_tail_room_split_pages).
  for (int64_t n = splits / 2; tail.ctas == 0 && n >= 1; n /= 2) {
    if (((pages + n - 1) / n) > decode_tail_room_split_pages(record_bytes)) break;
    const DecodePlan keep = p;
    const TailSchedule keep_tail = tail;
    with_splits(n);
    if (tail.ctas == 0) p = keep, tail = keep_tail;
  }
  p.tail_ctas = tail.ctas;
  p.tail_span = tail.span;
  p.tail_slots = tail.slots;
  const size_t slots = size_t(p.max_splits) + size_t(p.tail_slots);
  p.stats_offset = p.partial_offset + align256(slots * rows * head_dim * 4);
  p.status_offset = p.stats_offset + align256(slots * rows * 2 * 4);
  p.workspace_bytes = p.status_offset + align256(size_t(s.batch) * 4);
  *plan = p;
  return Status::kSuccess;
}

KVQ_NAMESPACE_END

// kvq/prefill/plan.hpp - the host-side plan of a chunked-prefill attention call (no CUDA needed).
//
// plan_prefill() runs once per batch shape: from upper bounds on the batch (sequences, longest
// len + q_len, longest chunk, total query tokens) it sizes the grid and the workspace. The run
// step (kvq::prefill) reads the actual lengths from device memory, so one plan serves every
// batch within its bounds (and a captured CUDA graph can be replayed with new lengths).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include "kvq/quant/record_layout.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

// Query rows (chunk tokens x GQA heads, token-major) one CTA of 4 warps carries: 128 (two m-tiles
// of 16 per warp share each K/V fragment, and the dequantization of a tile serves twice the rows)
// where the registers allow (head dim up to 128), else 64.
constexpr int kPrefillRowsSmall = 64, kPrefillRowsLarge = 128;
constexpr int prefill_rows_per_cta(int head_dim, bool /*quantized*/) {
  return head_dim <= 128 ? kPrefillRowsLarge : kPrefillRowsSmall;
}

// The tensor-core kernel that serves a plan: mma.sync (sm_80 and sm_90, every head dim; CTAs of
// kPrefillRowsSmall or kPrefillRowsLarge rows) or, on Hopper (an sm_90a build on a compute
// capability 9.0 GPU, head dims 64 and 128, kPrefillRowsLarge rows a CTA), wgmma_ws
// (warp-specialized: two producer warpgroups copy and dequantize K/V tiles for two consumer
// warpgroups). kAuto: the Hopper kernel where available (prefill_hopper_default). The values are
// the ones the benchmarks' CSVs record.
enum class PrefillKernel : int32_t { kAuto = -1, kMmaSync = 0, kWgmmaWs = 2 };

// The Hopper kernel kAuto takes for configuration Cfg where the wgmma kernels are available.
template <class Cfg>
constexpr PrefillKernel prefill_hopper_default() {
  return PrefillKernel::kWgmmaWs;
}

struct PrefillShape {
  int32_t batch;         // sequences (upper bound)
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t residual;      // R of the cache
  int64_t max_tokens;    // upper bound of len + q_len over the batch
  int32_t max_q_len;     // longest chunk (any length >= 1)
  int64_t total_q;       // upper bound of the sum of q_len (rows of q)
};

// Workspace layout (offsets 256-byte aligned):
//   transition records [batch][R/P + 1][num_kv_heads][record_bytes]   prefix pages turning cold
//                                                                     in this step
struct PrefillPlan {
  PrefillShape shape;
  int32_t head_dim, page;
  size_t record_bytes;
  int32_t rows_per_cta;      // kPrefillRowsSmall or kPrefillRowsLarge
  PrefillKernel kernel;      // kMmaSync or kWgmmaWs (never kAuto in a plan)
  int32_t tile_tokens;       // K/V tile of the wgmma_ws kernel (64 or 128); 0 for mma.sync
  int32_t row_tiles;         // CTAs per (sequence, KV head): ceil(group * max_q_len / rows_per_cta)
  int32_t transition_pages;  // R/P + 1
  size_t transition_offset, workspace_bytes;
};

// Paired CTAs of the warp-specialized kernel (prefill_ws_kernel.cuh) come in clusters of two along
// the row tiles: the grid holds the row tiles rounded up to even (the last CTA of an odd count has
// no rows), and CTA x (row tile row_tiles - 1 - x) pairs with CTA x ^ 1.
KVQ_HD int64_t prefill_paired_grid_tiles(int32_t row_tiles) { return (int64_t(row_tiles) + 1) / 2 * 2; }
// The row tile of CTA x (the longest rows, the latest tokens, first); -1 for the padding CTA of an
// odd count. The warp-specialized kernel's CTA x pairs with CTA x ^ 1 when both tiles hold rows of
// the sequence (tile >= 0 and tile * rows_per_cta < its rows); both CTAs of a cluster decide from the
// same sequence, so they decide alike.
KVQ_HD int prefill_cta_tile(int32_t row_tiles, unsigned x) { return row_tiles - 1 - int(x); }

inline Status plan_prefill(const PrefillShape& s, int head_dim, int page, size_t record_bytes, int rows_per_cta,
                           PrefillPlan* plan) {
  if (!plan) return Status::kNullPointer;
  if (s.batch < 0 || s.batch > 65535 || s.num_kv_heads <= 0 || s.num_kv_heads > 65535 || s.num_q_heads <= 0 ||
      s.num_q_heads % s.num_kv_heads != 0 || s.max_q_len < 1 || s.total_q < 0 ||
      s.total_q > int64_t(s.batch) * s.max_q_len || s.max_tokens < 0 || s.max_tokens > INT32_MAX)
    return Status::kInvalidShape;
  if (s.residual < 0 || page <= 0 || s.residual % page != 0) return Status::kConfigMismatch;
  if (rows_per_cta != kPrefillRowsSmall && rows_per_cta != kPrefillRowsLarge) return Status::kInvalidShape;
  const int64_t group = s.num_q_heads / s.num_kv_heads;
  // A sequence's rows (chunk tokens x GQA heads) are counted in int by the kernels.
  if (group * s.max_q_len > INT32_MAX) return Status::kInvalidShape;
  const int64_t row_tiles = (group * s.max_q_len + rows_per_cta - 1) / rows_per_cta;
  PrefillPlan p{};
  p.shape = s;
  p.head_dim = head_dim;
  p.page = page;
  p.record_bytes = record_bytes;
  p.rows_per_cta = rows_per_cta;
  p.kernel = PrefillKernel::kMmaSync;
  p.tile_tokens = 0;
  p.row_tiles = int32_t(row_tiles);
  p.transition_pages = s.residual / page + 1;
  p.transition_offset = 0;
  p.workspace_bytes = (size_t(s.batch) * p.transition_pages * s.num_kv_heads * record_bytes + 255) & ~size_t(255);
  if (p.workspace_bytes == 0) p.workspace_bytes = 256;
  *plan = p;
  return Status::kSuccess;
}

KVQ_NAMESPACE_END

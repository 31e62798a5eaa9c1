// kvq/prefill/prefill_setup.cuh - what the prefill kernels (prefill_kernel.cuh,
// prefill_ws_kernel.cuh) do before their loop: resolve the CTA's sequence and rows against the
// plan, and describe where its K/V tiles come from.
#pragma once

#include <cuda_runtime.h>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/prefill/plan.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// The query rows of a prefill CTA: `rows` = GQA group x q_len of its sequence (0 when the
// sequence was rejected), the CTA's first row `row0`, and the position of its last row.
struct PrefillCtaRows {
  int rows, row0;
  int64_t last_pos;
};

// CTA-wide (both barriers reached by every thread): thread 0 resolves sequence b into the shared
// `s` / `bad`; then the CTA's rows; every CTA of a sequence checks all its pages (all or none
// write; an invalid one sets kFlagBadSequence). False: the CTA has nothing to do and returns.
template <class T>
__device__ inline bool prefill_cta_rows(const CacheView<T>& v, const AttentionBatch<T>& a, const PrefillPlan& plan, int b,
                                        int page, int bm, int tile, uint32_t* flags, SeqAttention& s, int& bad,
                                        PrefillCtaRows& r) {
  const int group = a.num_q_heads / v.num_kv_heads;
  if (threadIdx.x == 0) {
    s = resolve_attention(v, a, b, page);
    bad = s.status != Status::kSuccess || s.q_len > plan.shape.max_q_len || s.q0 + s.q_len > plan.shape.total_q ||
          s.len + s.q_len > plan.shape.max_tokens;
  }
  __syncthreads();
  r.rows = bad ? 0 : group * s.q_len;
  r.row0 = tile * bm;
  if (r.row0 >= r.rows && tile != 0) return false;
  r.last_pos = r.rows > 0 ? s.len + (min(r.rows, r.row0 + bm) - 1) / group : 0;
  if (!pages_valid(v, b, s, bad, 0, bad ? 0 : s.len + s.q_len, page)) {
    if (threadIdx.x == 0) atomicOr(flags, uint32_t(kFlagBadSequence));
    return false;
  }
  return r.row0 < r.rows;
}

// The tile source of the CTA's sequence b and KV head h (keys up to its last row's position).
template <class Cfg>
__device__ inline TileSource<typename Cfg::dtype> prefill_tile_source(const CacheView<typename Cfg::dtype>& v,
                                                                      const AttentionBatch<typename Cfg::dtype>& a,
                                                                      const PrefillPlan& plan, uint8_t* transition,
                                                                      const SeqAttention& s, int64_t last_pos, int b, int h) {
  return TileSource<typename Cfg::dtype>{
      v, a.new_k, a.new_v,
      transition + record_offset(int64_t(b) * plan.transition_pages, 0, v.num_kv_heads, Cfg::record_bytes), as_append(s),
      s.cold, records_end(s), last_pos + 1, b, h};
}

}  // namespace detail
KVQ_NAMESPACE_END

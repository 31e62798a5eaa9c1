// kvq/reference/dequantize.hpp - host reference: a sequence's cache back in the model dtype.
#pragma once

#include <cstdint>

#include "kvq/attention/batch.hpp"
#include "kvq/attention/token_source.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN
namespace reference {

// Sequence b of a batch of `batch` sequences (the rows of v.block_table and v.hot_slot), holding
// `len` tokens of which `cold` are cold. k_out, v_out: [len][num_kv_heads][head_dim] in the model
// dtype (cold tokens rounded to it, fp16 saturating at +-65504: numeric/dtype.hpp).
// kInvalidShape when b is outside [0, batch); nothing is written on any error.
template <class Cfg>
Status dequantize_sequence(const CacheView<typename Cfg::dtype>& v, int batch, int b, int64_t len, int64_t cold,
                           typename Cfg::dtype* k_out, typename Cfg::dtype* v_out) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  Status st = check_view(v, P);
  if (st == Status::kSuccess) st = check_sinks<Cfg>(v);
  if (st != Status::kSuccess) return st;
  if (b < 0 || b >= batch) return Status::kInvalidShape;  // would read past hot_slot / the block table
  if (!k_out || !v_out) return Status::kNullPointer;
  st = check_lengths(len, cold, 0, v.residual, P, v.max_pages_per_seq);
  if (st != Status::kSuccess) return st;
  const int32_t slot = v.hot_slot[b];
  if (slot < 0 || slot >= v.num_slots) return Status::kInvalidHotSlot;
  for (int64_t p = 0; p < cold / P; ++p) {
    const int32_t page = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
    if (!page_in_pool(v, page)) return Status::kInvalidPageId;
  }
  // Each token as the attention reads it (attention/token_source.hpp, the device dequantize's
  // token_ref too): a record below `cold` (sink tokens from sink_k / sink_v), the ring row above.
  SeqAttention s{};
  s.len = len;
  s.cold = cold;
  s.target = cold;
  s.slot = slot;
  const AttentionBatch<T> none{};  // no new tokens: token_ref never reads them
  for (int64_t t = 0; t < len; ++t)
    for (int h = 0; h < v.num_kv_heads; ++h) {
      const TokenRef<T> ref = token_ref(v, none, b, h, s, t, P, D, Cfg::record_bytes, nullptr);
      for (int c = 0; c < D; ++c) {
        const size_t o = (size_t(t) * v.num_kv_heads + h) * D + c;
        k_out[o] = T::from_float_saturate(token_key<Cfg>(ref, c));
        v_out[o] = T::from_float_saturate(token_value<Cfg>(ref, c));
      }
    }
  return Status::kSuccess;
}

}  // namespace reference
KVQ_NAMESPACE_END

// kvq/cache/planner.hpp - capacity planning from lengths and shapes alone (host, constexpr).
//
// All sizes count every layer of a model: an engine multiplies nothing by hand.
//
// The sizes assume a shape and format that validate() accepts. The functions that divide
// (bytes_per_token, cold_pages_for, sequences_that_fit, tokens_that_fit) never divide by zero:
// for a pair validate() rejects, or dtype_bytes <= 0, they return 0; call validate() for the reason.
#pragma once

#include <cstdint>

#include "kvq/quant/record_layout.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/status.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/group_codec.hpp"

KVQ_NAMESPACE_BEGIN

struct ModelShape {
  int layers;
  int kv_heads;
  int head_dim;
};

struct CacheFormat {
  QuantDesc k;
  QuantDesc v;
  int page;      // P
  int residual;  // R, a multiple of P
  // The accuracy options of docs/ACCURACY.md (cache/view.hpp, quant/rotation.hpp):
  int sinks = 0;                         // attention sinks kept unquantized (0..16, < page)
  KeyClip key_clip = KeyClip::kMinMax;   // key-group range rule of the encoder
  bool rotate = false;                   // the engine rotates q/k/v (and unrotates the output)
};

// kvq's recommended configurations (docs/ACCURACY.md: the measured choices), page 64, R = 128:
// INT2 and INT4 keys/values, and INT4 keys with INT2 values, in groups of 32, each with the
// rotation and 4 attention sinks. Key groups keep min/max ranges: MSE clipping lowers perplexity
// but clips the rare keys that retrieval needs (INT2 passkey 41 of 60 -> 2 of 60 on the GPU).
constexpr CacheFormat recommended_int2() { return CacheFormat{desc_int2(32), desc_int2(32), 64, 128, 4, KeyClip::kMinMax, true}; }
constexpr CacheFormat recommended_int4() { return CacheFormat{desc_int4(32), desc_int4(32), 64, 128, 4, KeyClip::kMinMax, true}; }
constexpr CacheFormat recommended_k4v2() { return CacheFormat{desc_int4(32), desc_int2(32), 64, 128, 4, KeyClip::kMinMax, true}; }

// kInvalidShape: layers or KV heads <= 0; kConfigMismatch: page, residual or formats that no
// configuration has (page <= 0, R < 0 or not a multiple of P, head dim or group sizes unsupported).
constexpr Status validate(const ModelShape& m, const CacheFormat& f) {
  return m.layers <= 0 || m.kv_heads <= 0 ? Status::kInvalidShape
         : f.residual < 0 || f.page <= 0 || f.residual % f.page != 0 || f.sinks < 0 || f.sinks > kMaxSinks ||
                   f.sinks >= f.page || (f.sinks > 0 && f.k.kind == QuantKind::kNone && f.v.kind == QuantKind::kNone) ||
                   (f.key_clip != KeyClip::kMinMax && f.key_clip != KeyClip::kMse)
             ? Status::kConfigMismatch
             : validate_layout(f.k, f.v, m.head_dim, f.page);
}

// Bytes of one cold page of every layer and KV head.
constexpr uint64_t page_bytes(const ModelShape& m, const CacheFormat& f) {
  return uint64_t(m.layers) * uint64_t(m.kv_heads) * record_offsets(f.k, f.v, m.head_dim, f.page).bytes;
}

// Cold bytes per token, every layer (the steady-state cost of a long context); 0 for page <= 0.
constexpr double bytes_per_token(const ModelShape& m, const CacheFormat& f) {
  return f.page > 0 ? double(page_bytes(m, f)) / double(f.page) : 0.0;
}

// The same in bf16/fp16 without any quantization or window (what an engine stores today).
constexpr double bytes_per_token_dense(const ModelShape& m, int dtype_bytes = 2) {
  return 2.0 * m.layers * m.kv_heads * m.head_dim * dtype_bytes;
}

// The hot ring of one sequence, every layer: K and V, W = R + P rows of the model dtype, and its
// sink rows (sink_k / sink_v).
constexpr uint64_t hot_bytes_per_sequence(const ModelShape& m, const CacheFormat& f, int dtype_bytes = 2) {
  return 2ull * uint64_t(m.layers) * uint64_t(f.residual + f.page + (f.sinks > 0 ? f.sinks : 0)) * uint64_t(m.kv_heads) *
         uint64_t(m.head_dim) * uint64_t(dtype_bytes);
}

// Cold pages a sequence of `len` tokens holds after appends alone (0 for page <= 0).
constexpr int64_t cold_pages_for(int64_t len, const CacheFormat& f) {
  return f.page > 0 ? cold_after(len, 0, f.residual, f.page) / f.page : 0;
}

// Bytes one sequence of `len` tokens occupies: its cold pages plus its hot ring.
constexpr uint64_t bytes_for_sequence(int64_t len, const ModelShape& m, const CacheFormat& f, int dtype_bytes = 2) {
  return uint64_t(cold_pages_for(len, f)) * page_bytes(m, f) + hot_bytes_per_sequence(m, f, dtype_bytes);
}

// How many sequences of `len` tokens fit in `budget` bytes (0 when validate(m, f) fails or
// dtype_bytes <= 0).
constexpr int64_t sequences_that_fit(uint64_t budget, int64_t len, const ModelShape& m, const CacheFormat& f,
                                     int dtype_bytes = 2) {
  if (validate(m, f) != Status::kSuccess || dtype_bytes <= 0) return 0;
  const uint64_t per_seq = bytes_for_sequence(len, m, f, dtype_bytes);
  return per_seq > 0 ? int64_t(budget / per_seq) : 0;  // 0 only if the shape's product wraps
}

// The longest length each of `num_seqs` sequences can reach within `budget` bytes (0 if not even
// the hot rings fit, num_seqs <= 0, dtype_bytes <= 0 or validate(m, f) fails): with n cold pages a
// sequence holds up to n*P + R + P - 1 tokens.
constexpr int64_t tokens_that_fit(uint64_t budget, int64_t num_seqs, const ModelShape& m, const CacheFormat& f,
                                  int dtype_bytes = 2) {
  if (num_seqs <= 0 || dtype_bytes <= 0 || validate(m, f) != Status::kSuccess) return 0;
  const uint64_t per_seq = budget / uint64_t(num_seqs);
  const uint64_t hot = hot_bytes_per_sequence(m, f, dtype_bytes);
  const uint64_t page = page_bytes(m, f);
  if (per_seq < hot || page == 0) return 0;  // page == 0 only if the shape's product wraps
  const int64_t pages = int64_t((per_seq - hot) / page);
  return pages * f.page + f.residual + f.page - 1;
}

KVQ_NAMESPACE_END

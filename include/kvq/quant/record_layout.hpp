// kvq/quant/record_layout.hpp - byte layout of one cold record (one page x one KV head).
//
// A record holds everything needed to dequantize it (docs/FORMAT.md section 4):
//
//   offset k_codes : K codes      (P x D codes of the K format)
//   offset k_params: K parameters (scales/zeros of the K format; empty for "none")
//   offset v_codes : V codes
//   offset v_params: V parameters
//
// every part starts on a 16-byte boundary and the record size is a multiple of 16.
// Parameters of the asymmetric formats, fp16 each:
//   keys  : for each token group g in [0, P/Gk): scale[D] then zero[D]
//   values: scale[P][D/Gv] then zero[P][D/Gv]
// INT8: one fp32 scale per token: scale[P].
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/core/status.hpp"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN

constexpr size_t align16(size_t n) { return (n + 15) & ~size_t(15); }

constexpr size_t section_codes_bytes(QuantDesc q, int D, int P) {
  return size_t(P) * size_t(D) * size_t(q.bits) / 8;
}

constexpr size_t section_params_bytes(QuantDesc q, Role role, int D, int P) {
  return q.kind == QuantKind::kNone   ? 0
         : q.kind == QuantKind::kInt8 ? size_t(P) * 4
         : role == Role::kKey         ? size_t(P / q.group) * size_t(D) * 4
                                      : size_t(P) * size_t(D / q.group) * 4;
}

struct RecordOffsets {
  size_t k_codes, k_params, v_codes, v_params, bytes;
};

constexpr RecordOffsets record_offsets(QuantDesc kq, QuantDesc vq, int D, int P) {
  const size_t k_params = align16(section_codes_bytes(kq, D, P));
  const size_t v_codes = k_params + align16(section_params_bytes(kq, Role::kKey, D, P));
  const size_t v_params = v_codes + align16(section_codes_bytes(vq, D, P));
  const size_t bytes = v_params + align16(section_params_bytes(vq, Role::kValue, D, P));
  return RecordOffsets{0, k_params, v_codes, v_params, bytes};
}

constexpr bool is_supported_head_dim(int D) { return D == 64 || D == 128 || D == 256; }
constexpr bool is_supported_page(int P) { return P == 16 || P == 32 || P == 64 || P == 128; }

// Whether a format can serve a role for a head dim and page size (the runtime twin of the
// static_asserts in CacheConfig, used by the planner and the dispatcher).
constexpr bool format_fits(QuantDesc q, Role role, int D, int P) {
  return q.kind == QuantKind::kNone   ? q.bits == 16 && q.group == 0
         : q.kind == QuantKind::kInt8 ? q.bits == 8 && q.group == 0
         : q.bits >= 2 && q.bits <= 4 && q.group >= 1 &&
               (role == Role::kKey ? P % q.group == 0 : D % q.group == 0);
}

constexpr Status validate_layout(QuantDesc kq, QuantDesc vq, int D, int P) {
  return !is_supported_head_dim(D) || !is_supported_page(P) ? Status::kConfigMismatch
         : !format_fits(kq, Role::kKey, D, P) || !format_fits(vq, Role::kValue, D, P)
             ? Status::kConfigMismatch
             : Status::kSuccess;
}

KVQ_NAMESPACE_END

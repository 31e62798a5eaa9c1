// kvq/cache/rollback.hpp - speculative-decoding rollback: truncating a sequence to its accepted
// length (DESIGN section 5). O(1) and nothing moves: only the length changes. Tokens below the
// cold length are quantized for good, so the accepted length may not go below it.
//
//   kvq::check_rollback(len, cold, new_len)   the rule, shared by the host reference and the kernel
//   kvq::rollback(...)                        the device op (kvq/append/rollback.cuh)
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

KVQ_HD_CONSTEXPR Status check_rollback(int64_t len, int64_t cold, int64_t new_len) {
  return new_len < cold || new_len > len ? Status::kInvalidLength : Status::kSuccess;
}

KVQ_NAMESPACE_END

// kvq/cache/window.hpp - the hot-window rule of DESIGN section 5, as functions of lengths alone.
//
// A sequence of length L has cold tokens [0, C) and hot tokens [C, L). The hot ring of a sequence
// has W = R + P rows; token t lives in row t mod W while hot. An append quantizes pages while
// L - C >= R + P, so a page turns cold exactly once, when it leaves the window.
#pragma once

#include <climits>
#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN

// Cold length after the sequence grows to `len` tokens from cold length `cold` (tokens).
// Idempotent: cold_after(len, cold_after(len, c, ..), ..) == cold_after(len, c, ..).
KVQ_HD_CONSTEXPR int64_t cold_after(int64_t len, int64_t cold, int residual, int page) {
  const int64_t over = len - cold - residual;
  return over >= page ? cold + (over / page) * page : cold;
}

// Cold pages an append of `num_new` tokens turns cold (the page ids the engine must supply).
KVQ_HD_CONSTEXPR int64_t cold_pages_needed(int64_t len, int64_t cold, int64_t num_new, int residual, int page) {
  return (cold_after(len + num_new, cold, residual, page) - cold) / page;
}

// Lengths are int32 (checked by check_lengths), so a 32-bit modulo serves.
KVQ_HD_CONSTEXPR int ring_row(int64_t token, int window) {
  return static_cast<int>(static_cast<uint32_t>(token) % static_cast<uint32_t>(window));
}

// The checks every append and attention entry point applies to one sequence's lengths
// (host reference and kernels call this same function).
//   len: tokens in the cache, cold: cold tokens, num_new: tokens this step adds,
//   max_pages: block-table row capacity.
KVQ_HD_CONSTEXPR Status check_lengths(int64_t len, int64_t cold, int64_t num_new, int residual, int page,
                            int64_t max_pages) {
  if (len < 0 || cold < 0 || num_new < 0 || cold > len || cold % page != 0) return Status::kInvalidLength;
  if (len + num_new > INT32_MAX) return Status::kInvalidLength;
  if (len - cold >= int64_t(residual) + page) return Status::kInvalidLength;  // hot span larger than the window allows
  if (cold_after(len + num_new, cold, residual, page) / page > max_pages) return Status::kBlockTableOverflow;
  return Status::kSuccess;
}

KVQ_NAMESPACE_END

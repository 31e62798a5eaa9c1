// kvq/core/batch_rows.hpp - where one sequence's new tokens lie in a batch's token-major buffers.
//
// A batch gives its sequences' new rows as prefix sums cu[0 .. batch] (cu_q of an attention batch,
// cu_new of an append): sequence b owns rows [cu[b], cu[b + 1]) of buffers that hold cu[batch]
// rows. The host reference and the kernels share these checks, so a malformed cu (a negative
// entry, a decreasing step, an entry past the last one) rejects the sequences whose rows it would
// put outside the buffers instead of reading or writing through them. A decreasing step is a
// negative row count, which the callers' length checks reject first; the sequences on either
// side of it may then own overlapping rows: inside the buffers, but their outputs are not
// reliable (the batch's kFlagBadSequence tells the caller that a sequence was rejected).
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

// Rows of sequence b, computed in 64 bits (a malformed cu cannot overflow it).
KVQ_HD int64_t batch_rows(const int32_t* cu, int b) { return int64_t(cu[b + 1]) - int64_t(cu[b]); }

// Whether sequence b's rows lie inside the batch's: 0 <= cu[b] <= cu[b + 1] <= cu[batch].
KVQ_HD bool batch_rows_inside(const int32_t* cu, int b, int batch) {
  return cu[b] >= 0 && cu[b] <= cu[b + 1] && cu[b + 1] <= cu[batch];
}

KVQ_NAMESPACE_END

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

// Sequence b's entries cu[b], cu[b + 1] and the batch's end cu[batch], read together: three
// loads that do not depend on each other or on any test, so a kernel resolving a sequence pays
// one round trip for them (a load of cu[batch] behind the length checks costs a second one:
// ~0.5-1 us a decode call, measured on an H200).
struct BatchRows {
  int32_t begin, end, last;
  // Rows of the sequence, computed in 64 bits (a malformed cu cannot overflow it).
  KVQ_HD int64_t count() const { return int64_t(end) - int64_t(begin); }
  // Whether they lie inside the batch's: 0 <= cu[b] <= cu[b + 1] <= cu[batch].
  KVQ_HD bool inside() const { return begin >= 0 && begin <= end && end <= last; }
};
// cu[batch] is read through a volatile pointer: it is used only behind the length checks, and
// nvcc otherwise sinks its load there, after the others have returned.
KVQ_HD BatchRows batch_rows_of(const int32_t* cu, int b, int batch) {
  const int32_t last = *static_cast<const volatile int32_t*>(cu + batch);
  return BatchRows{cu[b], cu[b + 1], last};
}

KVQ_NAMESPACE_END

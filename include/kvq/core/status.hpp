// kvq/core/status.hpp - the Status every kvq entry point returns (no exceptions, no exit).
#pragma once

#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

enum class Status : int {
  kSuccess = 0,
  kNullPointer,          // a required pointer is null
  kInvalidShape,         // a count, head number or stride is out of range
  kInvalidLength,        // a sequence length is inconsistent (C > L, C not page-aligned, hot span too long, rollback below C)
  kBlockTableOverflow,   // a length needs more pages than the block table row holds
  kInvalidPageId,        // a block-table entry is outside [0, num_pages)
  kInvalidHotSlot,       // a hot slot id is outside [0, num_slots)
  kConfigMismatch,       // a runtime value (head dim, page size, window) disagrees with the compiled configuration
  kNotInstantiated,      // the requested configuration was not compiled into this binary
  kWorkspaceTooSmall,    // the caller's workspace is smaller than the plan asked for
  kCudaError,            // a CUDA runtime call kvq made failed (a launch, a kernel attribute or occupancy
                         // query); last_cuda_error() below gives its cudaError_t
};

inline const char* to_string(Status s) {
  switch (s) {
    case Status::kSuccess: return "success";
    case Status::kNullPointer: return "null pointer";
    case Status::kInvalidShape: return "invalid shape";
    case Status::kInvalidLength: return "invalid sequence length";
    case Status::kBlockTableOverflow: return "length beyond the block table";
    case Status::kInvalidPageId: return "page id out of range";
    case Status::kInvalidHotSlot: return "hot slot out of range";
    case Status::kConfigMismatch: return "runtime value does not match the compiled configuration";
    case Status::kNotInstantiated: return "configuration not instantiated";
    case Status::kWorkspaceTooSmall: return "workspace too small";
    case Status::kCudaError: return "CUDA error";
  }
  return "unknown status";
}

namespace detail {
// Per host thread: the CUDA error behind the latest kCudaError (set by core/launch.cuh).
inline int& cuda_error_slot() {
  static thread_local int error = 0;
  return error;
}
}  // namespace detail

// CUDA errors. A kvq launcher reports only the CUDA calls it makes itself: it launches with
// cudaLaunchKernelEx (which returns that launch's own error) and never calls cudaGetLastError or
// cudaPeekAtLastError, so an error an engine caused before the call (say a launch with a bad
// configuration, still pending in the runtime's last-error state) is neither reported as kvq's nor
// cleared: the engine's own cudaGetLastError still returns it. One exception: the first kvq call
// that raises a kernel's dynamic shared memory limit (normally the first plan or launch of a
// configuration) calls cudaFuncSetAttribute, inside which the CUDA runtime clears a pending error
// (core/launch.cuh, allow_dynamic_smem). (A sticky error, one that breaks the context, makes kvq's
// own calls fail too: those calls then return kCudaError.)
//
// When a kvq call returns kCudaError, last_cuda_error() returns the cudaError_t of the call that
// failed, e.g. cudaGetErrorString(static_cast<cudaError_t>(kvq::last_cuda_error())). It is an int
// so that this header needs no CUDA header, per host thread like cudaGetLastError, 0
// (cudaSuccess) until a kvq call on the thread has failed, and left as it is by reading it and by
// kvq calls that succeed: read it right after the call that returned kCudaError. The runtime also
// records the failure in its own last-error state, as for any failed runtime call. (One slot per
// thread in the process while kvq's inline functions keep default visibility; a library built with
// -fvisibility=hidden has its own, so read it in the library that made the kvq call.)
inline int last_cuda_error() { return detail::cuda_error_slot(); }

// Bits a kernel (or the host reference) ORs into the caller's `flags` word. They report what
// happened to the data, or a per-sequence argument error that only the device could see. Which
// sequences kFlagBadSequence stands for, and why: bad_append_sequences, bad_rollback_sequences,
// bad_dequantize_sequences (cache/bad_sequence.hpp) and bad_attention_sequences
// (attention/bad_sequence.hpp) re-run the kernels' checks on host copies of the arguments.
enum Flag : uint32_t {
  kFlagNonFinite = 1u << 0,     // a NaN or +-Inf input was sanitised (NaN -> 0, Inf -> +-65504)
  kFlagSaturated = 1u << 1,     // a finite input beyond the fp16 range was saturated to +-65504
  kFlagBadSequence = 1u << 2,   // a sequence's lengths/pages were invalid on the device; that sequence was left untouched
};

KVQ_NAMESPACE_END

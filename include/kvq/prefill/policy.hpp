// kvq/prefill/policy.hpp - the compile-time tuning of the prefill kernels (no CUDA needed).
//
// A policy is a type, a template argument of kvq::prefill<Cfg, Policy> and of the kernels it
// launches: a translation unit that tunes them differently compiles kernels of other names, never
// another body under the same name. To try another value, derive and override the member:
//   struct Unpaired : kvq::PrefillPolicy { static constexpr bool kWsPairs = false; };
#pragma once

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

// Of the warp-specialized Hopper kernel (prefill_ws_kernel.cuh); the defaults were chosen by
// measurements on an H200 (docs/PERF_NOTES.md).
struct PrefillPolicy {
  // Stages: as many as fit in the shared memory a CTA may have, at most this many (at least 3).
  static constexpr int kWsMaxStages = 5;
  // Paired CTAs (clusters of two that dequantize each full record tile once for both) where both
  // roles are quantized and have the fast decode path; false compiles the unpaired kernel.
  static constexpr bool kWsPairs = true;
  // The paired kernel launched in clusters of two; false: plain launches, in which the same kernel
  // runs unpaired (a measurement knob).
  static constexpr bool kWsClusters = true;
};

KVQ_NAMESPACE_END

// kvq/decode/policy.hpp - the compile-time tuning of the decode kernels (no CUDA needed).
//
// A policy is a type, a template argument of kvq::plan_decode<Cfg, Policy> and
// kvq::decode<Cfg, Policy> and of the kernels they launch: a translation unit that tunes the
// kernels differently compiles kernels of other names, never another body under the same name.
// To try another value, derive and override the member (both calls with the same policy: the
// plan's splits come from the kernel's occupancy):
//   struct MinCtas5 : kvq::DecodePolicy { static constexpr int kMinCtas = 5; };
//   kvq::plan_decode<Cfg, MinCtas5>(shape, &plan);  kvq::decode<Cfg, MinCtas5>(...);
#pragma once

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

struct DecodePolicy {
  // CTAs per multiprocessor the single-row-tile records kernel is compiled for (registers per
  // thread at most 65536 / (128 x this)); measured on an H200: 3 and 5 are slower
  // (docs/PERF_NOTES.md).
  static constexpr int kMinCtas = 4;
  // CTAs per multiprocessor the two-row-tile records kernel (9-16 query rows) is compiled for;
  // measured on an H200: 3 is faster in some cells, slower in others (docs/PERF_NOTES.md).
  static constexpr int kMinCtasWide = 1;
  // Tiles of one online-softmax step of the records kernel where its ring has 4 stages (1 or 2;
  // the copies in flight are the other 4 - this); measured on an H200: 1 is slower (the extra
  // softmax updates cost more than the deeper copy queue gives).
  static constexpr int kStep = 2;
};

KVQ_NAMESPACE_END

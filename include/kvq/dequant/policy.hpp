// kvq/dequant/policy.hpp - the compile-time tuning of the dequantize kernels (no CUDA needed).
//
// A policy is a type, a template argument of kvq::dequantize<Cfg, Policy> and of the kernels it
// launches: a translation unit that tunes them differently compiles kernels of other names, never
// another body under the same name. To try another value, derive and override the member:
//   struct Blocks6 : kvq::DequantizePolicy { static constexpr int kStridedMinBlocks = 6; };
#pragma once

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

// Measured on an H200 (docs/PERF_NOTES.md): 128 threads x batches of 4 (each thread handles 8
// items of a 64-token page at head dim 128). The strided kernel at 5 blocks a multiprocessor takes
// 77-96 registers without spills (~106 unbounded; 6 blocks spill 32 bytes), where the one-page
// kernel takes 40-72.
struct DequantizePolicy {
  static constexpr int kThreads = 128;          // threads a block
  static constexpr int kBatch = 4;              // items a thread decodes before storing any
  static constexpr int kStridedMinBlocks = 5;   // blocks a multiprocessor the strided kernel is compiled for
};

KVQ_NAMESPACE_END

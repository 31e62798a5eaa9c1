// kvq/append/append_impl.cuh - the append kernel (include from one .cu per configuration).
//
// Work items of a sequence and KV head: items [0, W/P) are the ring's "row pages" (rows
// [i*P, (i+1)*P)): item i first quantizes the one page turning cold whose tokens sit in those
// rows (if any), then, after a block barrier, writes the new hot tokens that land in the same
// rows. Only item i touches those rows, which resolves the hazard of a row holding a token being
// quantized while it is the destination of a new one. Items from W/P on quantize pages made only
// of new tokens.
// Grid: x = item blocks, y = sequence, z = KV head. A block takes items blockIdx.x, + gridDim.x,
// ...: a step of at most P new tokens a sequence (decode, speculative steps, small chunks) runs
// one block per sequence and head, which handles its items in turn (at most two pages turn cold;
// a decode step's blocks then fit one wave); a larger chunk runs one block per item.
#pragma once

#include <cuda_runtime.h>

#include "kvq/append/append.hpp"
#include "kvq/kernels/page_encoder.cuh"
#include "kvq/core/launch.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kAppendThreads = kEncoderThreads;

// The new tokens that stay hot, into their ring rows (fewer than W = R + P tokens in all): those
// whose rows belong to row page `item`, or all of them for item -1. Every thread of the block.
template <class Cfg>
__device__ __forceinline__ void write_new_rows(const CacheView<typename Cfg::dtype>& v, const AppendBatch<typename Cfg::dtype>& a,
                                               const SeqAppend& plan, int h, int item, int row_pages) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, kVec = 16 / sizeof(T), kVecPerRow = D / kVec;
  const int window = v.residual + P;
  const int lo = int(plan.len_old > plan.cold_new ? plan.len_old : plan.cold_new);  // lengths are int32
  const int count = (int(plan.len_new) - lo) * kVecPerRow;
  for (int i = int(threadIdx.x); i < count; i += kAppendThreads) {
    const int t = lo + i / kVecPerRow;
    if (item >= 0 && unsigned(t / P) % unsigned(row_pages) != unsigned(item)) continue;
    const int c = int(i % kVecPerRow) * kVec;
    const size_t dst = hot_offset(plan.slot, ring_row(t, window), h, window, v.num_kv_heads, D) + c;
    *reinterpret_cast<uint4*>(v.hot_k + dst) = *reinterpret_cast<const uint4*>(source_row(v, v.hot_k, a.new_k, plan, t, h, D, P) + c);
    *reinterpret_cast<uint4*>(v.hot_v + dst) = *reinterpret_cast<const uint4*>(source_row(v, v.hot_v, a.new_v, plan, t, h, D, P) + c);
  }
}

template <class Cfg>
__global__ void __launch_bounds__(kAppendThreads) KVQ_HIDDEN
    append_kernel(CacheView<typename Cfg::dtype> v, AppendBatch<typename Cfg::dtype> a, int max_new, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  __shared__ SeqAppend plan;
  const int b = blockIdx.y, h = blockIdx.z;
  const int tid = threadIdx.x;
  if (tid == 0) plan = plan_sequence(v, a, b, P, max_new);
  __syncthreads();
  const bool ok = plan.status == Status::kSuccess && new_pages_valid(v, b, plan, P, tid, kAppendThreads);
  if (!__syncthreads_and(ok)) {
    if (tid == 0 && blockIdx.x == 0 && h == 0) atomicOr(flags, uint32_t(kFlagBadSequence));
    return;
  }
  const int window = v.residual + P, row_pages = window / P, items = row_pages + max_new / P;
  const int64_t first = plan.cold_old / P, end = plan.cold_new / P;
  if (first == end) {
    // No page turns cold (most decode steps): no ring row is read, so block 0 writes every new
    // row and the others have nothing to do.
    if (blockIdx.x == 0) write_new_rows<Cfg>(v, a, plan, h, -1, row_pages);
    if (blockIdx.x == 0 && h == 0 && tid == 0 && a.cold_out) a.cold_out[b] = int32_t(plan.cold_new);
    return;
  }
  uint32_t f = 0;
  auto encode = [&](int64_t p) {
    // Page 0's sink rows, kept in the model dtype. Read here, before the encoder's closing
    // barrier, so before any ring write of this item.
    constexpr int kVec = 16 / sizeof(T), kVecPerRow = D / kVec;
    for (int i = tid; p == 0 && i < v.sinks * kVecPerRow; i += kAppendThreads) {
      const int t = i / kVecPerRow, c = (i % kVecPerRow) * kVec;
      const size_t dst = sink_offset(plan.slot, t, h, v.sinks, v.num_kv_heads, D) + c;
      *reinterpret_cast<uint4*>(v.sink_k + dst) = *reinterpret_cast<const uint4*>(source_row(v, v.hot_k, a.new_k, plan, t, h, D, P) + c);
      *reinterpret_cast<uint4*>(v.sink_v + dst) = *reinterpret_cast<const uint4*>(source_row(v, v.hot_v, a.new_v, plan, t, h, D, P) + c);
    }
    const int32_t page = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
    encode_page_block<Cfg>(v, a.new_k, a.new_v, plan, p, h, v.cold + record_offset(page, h, v.num_kv_heads, Cfg::record_bytes), f);
  };
  for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
    if (item < row_pages) {
      const int64_t p = first + ((item - first % row_pages) + row_pages) % row_pages;
      if (p < end && p * P < plan.len_old) encode(p);  // ends with a barrier: reads are done
      write_new_rows<Cfg>(v, a, plan, h, item, row_pages);
    } else {
      const int64_t p = (first > (plan.len_old + P - 1) / P ? first : (plan.len_old + P - 1) / P) + (item - row_pages);
      if (p < end) encode(p);
    }
  }
  if (blockIdx.x == 0 && h == 0 && tid == 0 && a.cold_out) a.cold_out[b] = int32_t(plan.cold_new);
  if (f) atomicOr(flags, f);
}

}  // namespace detail

template <class Cfg>
Status append(const CacheView<typename Cfg::dtype>& cache, const AppendBatch<typename Cfg::dtype>& batch,
              int max_new_tokens, uint32_t* flags, cudaStream_t stream) {
  Status st = check_view(cache, Cfg::page);
  if (st == Status::kSuccess) st = check_sinks<Cfg>(cache);
  if (st == Status::kSuccess) st = check_append_args(batch);
  if (st != Status::kSuccess) return st;
  if (!flags) return Status::kNullPointer;
  if (max_new_tokens < 0 || batch.batch > 65535 || cache.num_kv_heads > 65535) return Status::kInvalidShape;
  if (reinterpret_cast<uintptr_t>(cache.cold) % 16 || reinterpret_cast<uintptr_t>(cache.hot_k) % 16 ||
      reinterpret_cast<uintptr_t>(cache.hot_v) % 16 || reinterpret_cast<uintptr_t>(batch.new_k) % 16 ||
      reinterpret_cast<uintptr_t>(batch.new_v) % 16 || reinterpret_cast<uintptr_t>(cache.sink_k) % 16 ||
      reinterpret_cast<uintptr_t>(cache.sink_v) % 16)
    return Status::kInvalidShape;  // records and rows are read and written 16 bytes at a time
  if (batch.batch == 0) return Status::kSuccess;
  const int row_pages = (cache.residual + Cfg::page) / Cfg::page;
  const int item_blocks = max_new_tokens <= Cfg::page ? 1 : row_pages + max_new_tokens / Cfg::page;
  const dim3 grid(unsigned(item_blocks), unsigned(batch.batch), unsigned(cache.num_kv_heads));
  size_t smem = 0;
  st = detail::page_encoder_smem_bytes<Cfg>(detail::append_kernel<Cfg>, &smem);
  if (st != Status::kSuccess) return st;
  return detail::launch(detail::append_kernel<Cfg>, grid, dim3(detail::kAppendThreads), smem, stream, cache, batch, max_new_tokens,
                        flags);
}

#define KVQ_INSTANTIATE_APPEND(Cfg)                                                                        \
  template ::kvq::Status kvq::append<Cfg>(const ::kvq::CacheView<typename Cfg::dtype>&,                   \
                                         const ::kvq::AppendBatch<typename Cfg::dtype>&, int, uint32_t*, \
                                         cudaStream_t)

KVQ_NAMESPACE_END

// kvq/dequant/dequantize_impl.cuh - the dequantize kernel (include from one .cu per configuration).
//
// Grid (page blocks, sequence, KV head). Up to kDequantMaxPageCtas pages a sequence, block x
// writes page x (dequantize_kernel); past that, kDequantMaxPageCtas blocks write pages x,
// x + kDequantMaxPageCtas, ... (dequantize_strided_kernel). A page is its tokens x head_dim
// channels of K and V. A thread takes (token, 8 consecutive channels) items: it decodes the 8
// elements of a cold token with decode_record_chunk (each element through the reference's scalar
// decode, so the bytes equal kvq::reference::dequantize_sequence's), copies a hot token's, and
// writes them with one 16-byte store per tensor. A full cold page (the common case) takes a
// branch-free path: one block-table read per page, and each thread decodes a batch of items before
// storing any, so their loads overlap (a store between them would keep the compiler from hoisting
// the next item's loads: the output might alias the cache).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kvq/attention/pages_valid.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/core/batch_rows.hpp"
#include "kvq/core/launch.cuh"
#include "kvq/dequant/dequantize.hpp"
#include "kvq/dequant/policy.hpp"
#include "kvq/cache/chunk_decode.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Blocks along a sequence's pages. Every block checks all of its sequence's page ids before it
// writes (a sequence with a bad id is left entirely unwritten), so with one block a page that
// check costs pages^2 loads per sequence and head: at 1M tokens and page 16, ~4 x 10^9. Past this
// many pages the strided kernel runs instead: this many blocks, each writing pages x, x + this,
// ..., which bounds the checks at this many times the pages (at 65,536 pages: 128 MB of
// block-table reads from L2 per head, beside 512 MB of bf16 writes). Up to this many pages the
// kernel is the one-page-a-block kernel (its bandwidth: docs/PERF_NOTES.md, docs/PERFORMANCE.md).
constexpr int kDequantMaxPageCtas = 512;
constexpr int kDequantChunk = kDecodeChunk;  // channels per thread item: one 16-byte store

// 8 floats as 8 T values in one 16-byte word.
template <class T>
KVQ_DEVICE uint4 pack_chunk(const float (&f)[kDequantChunk]) {
  uint32_t w[kDequantChunk / 2];
  KVQ_UNROLL
  for (int e = 0; e < kDequantChunk; e += 2)
    w[e / 2] = uint32_t(T::from_float_saturate(f[e]).bits) | uint32_t(T::from_float_saturate(f[e + 1]).bits) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The same for 8 values format Q's codec decoded: where the codec says its values convert exactly
// (Codec<Q>::bf16_pair_exact: never fp32 subnormals, a NaN only the canonical one, within range;
// INT2/INT4's fma of an integer code with an fp16 scale and zero point), for bf16 the hardware's
// round-to-nearest-even pair conversion (one instruction a pair) gives exactly from_float's bits.
// No saturation is needed: the encoder keeps scales and zero points finite fp16 (inputs beyond
// the fp16 range are clamped, quant/scalar.hpp), so |code * scale + zero| < 16 * 65504 + 65504.
template <class T, class Q>
KVQ_DEVICE uint4 pack_decoded_chunk(const float (&f)[kDequantChunk]) {
  if constexpr (std::is_same_v<T, bf16> && Codec<Q>::bf16_pair_exact) {
    uint32_t w[kDequantChunk / 2];
    KVQ_UNROLL
    for (int e = 0; e < kDequantChunk; e += 2) {
      const __nv_bfloat162 p = __floats2bfloat162_rn(f[e], f[e + 1]);  // f[e] in the low half
      w[e / 2] = *reinterpret_cast<const uint32_t*>(&p);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    return pack_chunk<T>(f);
  }
}

// Page t0 / P of sequence b, head h (t0 < s.len): its tokens' K and V rows from output row
// *row0 + t0 on (s: the sequence's checked lengths and slot; row0 points at cu_out[b], read at
// each store, not held in a register: the one-page kernel then keeps the registers and instruction
// mix it was benchmarked with).
template <class Cfg, class Policy>
KVQ_DEVICE void dequantize_page(const CacheView<typename Cfg::dtype>& v, const SeqAttention& s, int b, int h, int64_t t0,
                                const int32_t* row0, typename Cfg::dtype* k_out, typename Cfg::dtype* v_out) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  constexpr int chunks = D / kDequantChunk, items = P * chunks, threads = Policy::kThreads;
  auto out_offset = [&](int idx) { return (size_t(*row0 + t0 + idx / chunks) * v.num_kv_heads + h) * D + (idx % chunks) * kDequantChunk; };
  if constexpr (items % threads == 0) {
    if (t0 + P <= s.cold && t0 + P <= s.len && (t0 > 0 || v.sinks == 0)) {  // a full cold page without sinks: one record
      constexpr int per_thread = items / threads;
      constexpr int batch = per_thread < Policy::kBatch ? per_thread : Policy::kBatch;
      static_assert(per_thread % batch == 0, "whole batches of items");
      const uint8_t* record =
          v.cold + record_offset(v.block_table[int64_t(b) * v.max_pages_per_seq + t0 / P], h, v.num_kv_heads, Cfg::record_bytes);
      for (int i0 = 0; i0 < per_thread; i0 += batch) {
        uint4 kq[batch], vq[batch];
        KVQ_UNROLL
        for (int j = 0; j < batch; ++j) {
          const int idx = threadIdx.x + (i0 + j) * threads;
          float kf[kDequantChunk], vf[kDequantChunk];
          decode_record_chunk<Cfg, Role::kKey>(record, idx / chunks, (idx % chunks) * kDequantChunk, kf);
          decode_record_chunk<Cfg, Role::kValue>(record, idx / chunks, (idx % chunks) * kDequantChunk, vf);
          kq[j] = pack_decoded_chunk<T, typename Cfg::k_quant>(kf);
          vq[j] = pack_decoded_chunk<T, typename Cfg::v_quant>(vf);
        }
        KVQ_UNROLL
        for (int j = 0; j < batch; ++j) {
          const size_t o = out_offset(threadIdx.x + (i0 + j) * threads);
          *reinterpret_cast<uint4*>(k_out + o) = kq[j];
          *reinterpret_cast<uint4*>(v_out + o) = vq[j];
        }
      }
      return;
    }
  }
  AttentionBatch<T> none{};  // no new tokens: token_ref never reads them
  for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
    const int64_t t = t0 + idx / chunks;
    const int c0 = (idx % chunks) * kDequantChunk;
    if (t >= s.len) break;
    const TokenRef<T> ref = token_ref(v, none, b, h, s, t, P, D, Cfg::record_bytes, nullptr);
    float kf[kDequantChunk], vf[kDequantChunk];
    if (ref.record) {  // cold: the words and parameters of the 8 channels are read once
      decode_record_chunk<Cfg, Role::kKey>(ref.record, ref.t_in_page, c0, kf);
      decode_record_chunk<Cfg, Role::kValue>(ref.record, ref.t_in_page, c0, vf);
    } else {
      KVQ_UNROLL
      for (int e = 0; e < kDequantChunk; ++e) {
        kf[e] = token_key<Cfg>(ref, c0 + e);
        vf[e] = token_value<Cfg>(ref, c0 + e);
      }
    }
    const size_t o = out_offset(idx);
    *reinterpret_cast<uint4*>(k_out + o) = pack_chunk<T>(kf);
    *reinterpret_cast<uint4*>(v_out + o) = pack_chunk<T>(vf);
  }
}

// The blocks' work: check sequence blockIdx.y (its lengths, slot, rows and every page id), then
// write its pages blockIdx.x (Strided false) or blockIdx.x, blockIdx.x + gridDim.x, ... (true) for
// KV head blockIdx.z.
template <class Cfg, bool Strided, class Policy>
KVQ_DEVICE void dequantize_blocks(const CacheView<typename Cfg::dtype>& v, const SeqLengths& lengths, const int32_t* cu_out,
                                  int64_t max_len, typename Cfg::dtype* k_out, typename Cfg::dtype* v_out, uint32_t* flags) {
  constexpr int P = Cfg::page;
  __shared__ SeqAttention s;
  const int b = blockIdx.y, h = blockIdx.z;
  if (threadIdx.x == 0) {
    s = SeqAttention{};
    const BatchRows rows = batch_rows_of(cu_out, b, int(gridDim.y));
    s.len = lengths.len[b];
    s.cold = lengths.cold[b];
    s.target = s.cold;
    s.slot = v.hot_slot[b];
    s.status = check_lengths(s.len, s.cold, 0, v.residual, P, v.max_pages_per_seq);
    if (s.status == Status::kSuccess && (s.slot < 0 || s.slot >= v.num_slots)) s.status = Status::kInvalidHotSlot;
    if (s.status == Status::kSuccess && (rows.count() < s.len || s.len > max_len || !rows.inside()))
      s.status = Status::kInvalidShape;
  }
  __syncthreads();
  // Page ids of the whole sequence are checked by every block, so that a bad sequence is left
  // entirely unwritten (a block cannot know what the others would find).
  if (!pages_valid(v, b, s, s.status != Status::kSuccess, 0, s.len, P)) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && h == 0) atomicOr(flags, uint32_t(kFlagBadSequence));
    return;
  }
  if constexpr (Strided) {
#pragma unroll 1
    for (int64_t t0 = int64_t(blockIdx.x) * P; t0 < s.len; t0 += int64_t(gridDim.x) * P)
      dequantize_page<Cfg, Policy>(v, s, b, h, t0, cu_out + b, k_out, v_out);
  } else if (int64_t(blockIdx.x) * P < s.len) {
    dequantize_page<Cfg, Policy>(v, s, b, h, int64_t(blockIdx.x) * P, cu_out + b, k_out, v_out);
  }
}

// One block a page (at most kDequantMaxPageCtas pages a sequence). Policy: a DequantizePolicy
// (dequant/policy.hpp).
template <class Cfg, class Policy>
__global__ void __launch_bounds__(Policy::kThreads) KVQ_HIDDEN
    dequantize_kernel(CacheView<typename Cfg::dtype> v, SeqLengths lengths, const int32_t* cu_out, int64_t max_len,
                      typename Cfg::dtype* k_out, typename Cfg::dtype* v_out, uint32_t* flags) {
  dequantize_blocks<Cfg, false, Policy>(v, lengths, cu_out, max_len, k_out, v_out, flags);
}

// kDequantMaxPageCtas blocks a sequence, each writing every kDequantMaxPageCtas-th page.
template <class Cfg, class Policy>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kStridedMinBlocks) KVQ_HIDDEN
    dequantize_strided_kernel(CacheView<typename Cfg::dtype> v, SeqLengths lengths, const int32_t* cu_out, int64_t max_len,
                              typename Cfg::dtype* k_out, typename Cfg::dtype* v_out, uint32_t* flags) {
  dequantize_blocks<Cfg, true, Policy>(v, lengths, cu_out, max_len, k_out, v_out, flags);
}
}  // namespace detail

template <class Cfg, class Policy>
Status dequantize(const CacheView<typename Cfg::dtype>& cache, const SeqLengths& lengths, int batch,
                  const int32_t* cu_out, int64_t max_len, typename Cfg::dtype* k_out, typename Cfg::dtype* v_out,
                  uint32_t* flags, cudaStream_t stream) {
  Status st = check_view(cache, Cfg::page);
  if (st == Status::kSuccess) st = check_sinks<Cfg>(cache);
  if (st != Status::kSuccess) return st;
  if (batch < 0 || max_len < 0 || batch > 65535 || max_len > INT32_MAX) return Status::kInvalidShape;
  if (batch == 0 || max_len == 0) return Status::kSuccess;
  if (!lengths.len || !lengths.cold || !cu_out || !k_out || !v_out || !flags) return Status::kNullPointer;
  if (reinterpret_cast<uintptr_t>(k_out) % 16 || reinterpret_cast<uintptr_t>(v_out) % 16) return Status::kInvalidShape;
  const int64_t pages = (max_len + Cfg::page - 1) / Cfg::page;
  const bool strided = pages > detail::kDequantMaxPageCtas;
  const dim3 grid(unsigned(strided ? detail::kDequantMaxPageCtas : pages), unsigned(batch), unsigned(cache.num_kv_heads));
  auto* kernel = strided ? detail::dequantize_strided_kernel<Cfg, Policy> : detail::dequantize_kernel<Cfg, Policy>;
  return detail::launch(kernel, grid, dim3(Policy::kThreads), 0, stream, cache, lengths, cu_out, max_len, k_out, v_out, flags);
}

// KVQ_INSTANTIATE_DEQUANTIZE(Cfg): the dequantize of DequantizePolicy; ..._WITH_POLICY(Cfg, Policy):
// that of another policy (its own kernels).
#define KVQ_INSTANTIATE_DEQUANTIZE_WITH_POLICY(Cfg, Policy)                                                      \
  template ::kvq::Status kvq::dequantize<Cfg, Policy>(const ::kvq::CacheView<typename Cfg::dtype>&,             \
                                                     const ::kvq::SeqLengths&, int, const int32_t*, int64_t,    \
                                                     typename Cfg::dtype*, typename Cfg::dtype*, uint32_t*,     \
                                                     cudaStream_t)
#define KVQ_INSTANTIATE_DEQUANTIZE(Cfg) KVQ_INSTANTIATE_DEQUANTIZE_WITH_POLICY(Cfg, ::kvq::DequantizePolicy)

KVQ_NAMESPACE_END

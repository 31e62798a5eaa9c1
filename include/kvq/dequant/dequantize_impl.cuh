// kvq/dequant/dequantize_impl.cuh - the dequantize kernel (include from one .cu per configuration).
//
// Grid (page, sequence, KV head); a block writes one page's tokens x head_dim channels of K and V.
// A thread takes (token, 8 consecutive channels): it resolves the token's source once (token_ref),
// decodes the 8 elements of a cold token with decode_record_chunk (each element through the
// reference's scalar decode, so the bytes equal kvq::reference::dequantize_sequence's), copies a
// hot token's, and writes them with one 16-byte store per tensor.
#pragma once

#include <cuda_runtime.h>

#include "kvq/attention/token_source.hpp"
#include "kvq/dequant/dequantize.hpp"
#include "kvq/quant/chunk_decode.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kDequantThreads = 256;
constexpr int kDequantChunk = kDecodeChunk;  // channels per thread item: one 16-byte store

template <class Cfg>
__global__ void __launch_bounds__(kDequantThreads) KVQ_HIDDEN
    dequantize_kernel(CacheView<typename Cfg::dtype> v, SeqLengths lengths, const int32_t* cu_out, int64_t max_len,
                      typename Cfg::dtype* k_out, typename Cfg::dtype* v_out, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  __shared__ SeqAttention s;
  const int b = blockIdx.y, h = blockIdx.z;
  const int64_t t0 = int64_t(blockIdx.x) * P;
  if (threadIdx.x == 0) {
    s = SeqAttention{};
    s.len = lengths.len[b];
    s.cold = lengths.cold[b];
    s.target = s.cold;
    s.slot = v.hot_slot[b];
    s.status = check_lengths(s.len, s.cold, 0, v.residual, P, v.max_pages_per_seq);
    if (s.status == Status::kSuccess && (s.slot < 0 || s.slot >= v.num_slots)) s.status = Status::kInvalidHotSlot;
    if (s.status == Status::kSuccess && (int64_t(cu_out[b + 1]) - cu_out[b] < s.len || s.len > max_len))
      s.status = Status::kInvalidShape;
  }
  __syncthreads();
  // Page ids of the whole sequence are checked by every block, so that a bad sequence is left
  // entirely unwritten (a block cannot know what the others would find).
  bool ok = s.status == Status::kSuccess;
  const int64_t pool_pages = ok ? (s.cold < s.len ? s.cold : s.len) / P : 0;
  for (int64_t p = threadIdx.x; ok && p < pool_pages; p += blockDim.x) {
    const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
    ok = id >= 0 && id < v.num_pages;
  }
  if (!__syncthreads_and(ok)) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && h == 0) atomicOr(flags, uint32_t(kFlagBadSequence));
    return;
  }
  if (t0 >= s.len) return;
  AttentionBatch<T> none{};  // no new tokens: token_ref never reads them
  constexpr int chunks = D / kDequantChunk;
  for (int idx = threadIdx.x; idx < P * chunks; idx += blockDim.x) {
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
    uint32_t kw[kDequantChunk / 2], vw[kDequantChunk / 2];
    KVQ_UNROLL
    for (int e = 0; e < kDequantChunk; e += 2) {
      kw[e / 2] = uint32_t(T::from_float_saturate(kf[e]).bits) | uint32_t(T::from_float_saturate(kf[e + 1]).bits) << 16;
      vw[e / 2] = uint32_t(T::from_float_saturate(vf[e]).bits) | uint32_t(T::from_float_saturate(vf[e + 1]).bits) << 16;
    }
    const size_t o = (size_t(cu_out[b] + t) * v.num_kv_heads + h) * D + c0;
    *reinterpret_cast<uint4*>(k_out + o) = make_uint4(kw[0], kw[1], kw[2], kw[3]);
    *reinterpret_cast<uint4*>(v_out + o) = make_uint4(vw[0], vw[1], vw[2], vw[3]);
  }
}

}  // namespace detail

template <class Cfg>
Status dequantize(const CacheView<typename Cfg::dtype>& cache, const SeqLengths& lengths, int batch,
                  const int32_t* cu_out, int64_t max_len, typename Cfg::dtype* k_out, typename Cfg::dtype* v_out,
                  uint32_t* flags, cudaStream_t stream) {
  Status st = check_view(cache, Cfg::page);
  if (st != Status::kSuccess) return st;
  if (batch < 0 || max_len < 0 || batch > 65535 || max_len > INT32_MAX) return Status::kInvalidShape;
  if (batch == 0 || max_len == 0) return Status::kSuccess;
  if (!lengths.len || !lengths.cold || !cu_out || !k_out || !v_out || !flags) return Status::kNullPointer;
  if (reinterpret_cast<uintptr_t>(k_out) % 16 || reinterpret_cast<uintptr_t>(v_out) % 16) return Status::kInvalidShape;
  const dim3 grid(unsigned((max_len + Cfg::page - 1) / Cfg::page), unsigned(batch),
                  unsigned(cache.num_kv_heads));
  detail::dequantize_kernel<Cfg><<<grid, detail::kDequantThreads, 0, stream>>>(cache, lengths, cu_out, max_len, k_out,
                                                                                          v_out, flags);
  return cudaGetLastError() == cudaSuccess ? Status::kSuccess : Status::kCudaError;
}

#define KVQ_INSTANTIATE_DEQUANTIZE(Cfg)                                                                         \
  template ::kvq::Status kvq::dequantize<Cfg>(const ::kvq::CacheView<typename Cfg::dtype>&,                    \
                                             const ::kvq::SeqLengths&, int, const int32_t*, int64_t,           \
                                             typename Cfg::dtype*, typename Cfg::dtype*, uint32_t*, cudaStream_t)

KVQ_NAMESPACE_END

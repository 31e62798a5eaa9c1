// kvq/decode/decode_impl.cuh - decode attention kernels (include from one .cu per configuration).
//
// Three launches on the caller's stream, no host synchronisation:
//  1. transition: pages of the prefix that turn cold in this step (the append may not have run
//     yet) are quantized into the workspace with the append's own code (page_encoder.cuh);
//  2. split: CTA (split, sequence, KV head x row tile) streams the split's tokens once, for all
//     query rows of the tile (GQA heads x new tokens), with an online softmax per row; warps take
//     tokens round-robin, lanes take channels; writes unnormalised partial outputs + (max, sum);
//  3. merge: combines the splits of every (token, query head) exactly (log-sum-exp) and writes out.
// This version dequantizes element by element through decode_record_element (the same function
// as the host reference): correct for every format; tensor-core and vectorised paths come next.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/append/page_encoder.cuh"
#include "kvq/attention/token_source.hpp"
#include "kvq/decode/decode.hpp"
#include "kvq/quant/element_decode.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

constexpr int kDecodeWarps = 4;

struct DecodeWorkspace {
  uint8_t* transition;  // [batch][transition_pages][num_kv_heads][record_bytes]
  float* partial;       // [splits][total_q][num_q_heads][head_dim]
  float* stats;         // [splits][total_q][num_q_heads][2] (max, sum)
  int32_t* status;      // [batch] non-zero: sequence rejected
};

inline DecodeWorkspace carve(const DecodePlan& p, void* ws) {
  uint8_t* base = static_cast<uint8_t*>(ws);
  return DecodeWorkspace{base + p.transition_offset, reinterpret_cast<float*>(base + p.partial_offset),
                         reinterpret_cast<float*>(base + p.stats_offset), reinterpret_cast<int32_t*>(base + p.status_offset)};
}

template <class Cfg>
__global__ void __launch_bounds__(256) KVQ_HIDDEN
    decode_transition_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                             DecodeWorkspace ws) {
  constexpr int P = Cfg::page;
  __shared__ PageEncoderSmem<Cfg> sm;
  __shared__ SeqAttention s;
  const int j = blockIdx.x, b = blockIdx.y, h = blockIdx.z;
  if (threadIdx.x == 0) s = resolve_attention(v, a, b, P);
  __syncthreads();
  if (s.status != Status::kSuccess) return;  // reported by the split kernel
  const int64_t p = s.cold / P + j;
  if (p >= transition_pages_end(s, P) || j >= plan.transition_pages) return;
  uint8_t* record = ws.transition + record_offset(int64_t(b) * plan.transition_pages + j, h, v.num_kv_heads, Cfg::record_bytes);
  uint32_t ignored = 0;  // sanitisation is reported by the append that stores the page
  encode_page_block<Cfg>(v, a.new_k, a.new_v, as_append(s), p, h, record, sm, ignored);
}

KVQ_DEVICE float warp_sum(float x) {
  KVQ_UNROLL
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <class Cfg>
__global__ void __launch_bounds__(kDecodeWarps * 32) KVQ_HIDDEN
    decode_split_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                        DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, RT = kDecodeRowsPerCta, J = D / 32;
  __shared__ SeqAttention s;
  __shared__ int bad;
  __shared__ float qs[RT][D];
  __shared__ float red_m[kDecodeWarps][RT], red_l[kDecodeWarps][RT];
  __shared__ float red_acc[kDecodeWarps][RT][D];
  const int split = blockIdx.x, b = blockIdx.y;
  const int group = a.num_q_heads / v.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + RT - 1) / RT;
  const int h = blockIdx.z / row_tiles, tile = blockIdx.z % row_tiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    s = resolve_attention(v, a, b, P);
    bad = s.status != Status::kSuccess || s.q_len > plan.shape.max_q_len || s.q0 + s.q_len > plan.shape.total_q ||
          s.len + s.q_len > int64_t(plan.max_splits) * plan.split_tokens;
  }
  __syncthreads();
  const int64_t start = int64_t(split) * plan.split_tokens;
  const int64_t end = bad ? start : (s.len + s.q_len < start + plan.split_tokens ? s.len + s.q_len : start + plan.split_tokens);
  // Page ids this CTA will read from the pool.
  const int64_t pool_end = s.cold < s.len ? s.cold : s.len;
  bool ok = !bad;
  for (int64_t pg = start / P + threadIdx.x; ok && pg * P < (end < pool_end ? end : pool_end); pg += blockDim.x) {
    const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + pg];
    ok = id >= 0 && id < v.num_pages;
  }
  if (!__syncthreads_and(ok)) {
    if (threadIdx.x == 0) {
      ws.status[b] = 1;
      atomicOr(flags, uint32_t(kFlagBadSequence));
    }
    return;
  }
  const int rows = group * s.q_len;
  const int row0 = tile * RT;
  if (row0 >= rows) return;
  for (int idx = threadIdx.x; idx < RT * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D, rg = row0 + r;
    qs[r][c] = rg < rows ? a.q[(size_t(s.q0 + rg / group) * a.num_q_heads + h * group + rg % group) * D + c].to_float() : 0.0f;
  }
  __syncthreads();

  float m[RT], l[RT], acc[RT][J];
  KVQ_UNROLL
  for (int r = 0; r < RT; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    KVQ_UNROLL
    for (int j = 0; j < J; ++j) acc[r][j] = 0.0f;
  }
  const uint8_t* transition = ws.transition + record_offset(int64_t(b) * plan.transition_pages, 0, v.num_kv_heads, Cfg::record_bytes);
  for (int64_t t = start + warp; t < end; t += kDecodeWarps) {
    const TokenRef<T> ref = token_ref(v, a, b, h, s, t, P, D, Cfg::record_bytes, transition);
    float k[J], val[J];
    KVQ_UNROLL
    for (int j = 0; j < J; ++j) {
      const int c = lane + 32 * j;
      k[j] = token_key<Cfg>(ref, c);
      val[j] = token_value<Cfg>(ref, c);
    }
    KVQ_UNROLL
    for (int r = 0; r < RT; ++r) {
      float dot = 0.0f;
      KVQ_UNROLL
      for (int j = 0; j < J; ++j) dot += qs[r][lane + 32 * j] * k[j];
      dot = warp_sum(dot);
      const int rg = row0 + r;
      if (rg >= rows || t > s.len + rg / group) continue;  // padding row, or a future token (causal)
      float logit = dot * a.softmax_scale;
      if (a.softcap > 0.0f) logit = a.softcap * tanhf(logit / a.softcap);
      const float m_new = fmaxf(m[r], logit);
      const float corr = __expf(m[r] - m_new), p = __expf(logit - m_new);
      l[r] = l[r] * corr + p;
      KVQ_UNROLL
      for (int j = 0; j < J; ++j) acc[r][j] = acc[r][j] * corr + p * val[j];
      m[r] = m_new;
    }
  }
  KVQ_UNROLL
  for (int r = 0; r < RT; ++r) {
    if (lane == 0) {
      red_m[warp][r] = m[r];
      red_l[warp][r] = l[r];
    }
    KVQ_UNROLL
    for (int j = 0; j < J; ++j) red_acc[warp][r][lane + 32 * j] = acc[r][j];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < RT * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D, rg = row0 + r;
    if (rg >= rows) continue;
    float mx = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, red_m[w][r]);
    float o = 0.0f, sum = 0.0f;
    if (mx != -INFINITY)
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float e = __expf(red_m[w][r] - mx);
        o += red_acc[w][r][c] * e;
        sum += red_l[w][r] * e;
      }
    const size_t row = (size_t(s.q0 + rg / group) * a.num_q_heads + h * group + rg % group);
    const size_t slot = size_t(split) * plan.shape.total_q * a.num_q_heads + row;
    ws.partial[slot * D + c] = o;
    if (c == 0) {
      ws.stats[2 * slot] = mx;
      ws.stats[2 * slot + 1] = sum;
    }
  }
}

template <class Cfg>
__global__ void KVQ_HIDDEN decode_merge_kernel(AttentionBatch<typename Cfg::dtype> a, DecodePlan plan, DecodeWorkspace ws,
                                               typename Cfg::dtype* out) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  const int i = blockIdx.x, b = blockIdx.y, hq = blockIdx.z, c = threadIdx.x;
  if (ws.status[b]) return;
  const int64_t q0 = a.cu_q[b], q_len = a.cu_q[b + 1] - q0, len = a.lengths.len[b];
  if (i >= q_len) return;
  const int splits = int((len + q_len + plan.split_tokens - 1) / plan.split_tokens);
  const size_t row = size_t(q0 + i) * a.num_q_heads + hq, stride = size_t(plan.shape.total_q) * a.num_q_heads;
  float mx = -INFINITY;
  for (int sp = 0; sp < splits; ++sp) mx = fmaxf(mx, ws.stats[2 * (sp * stride + row)]);
  float o = 0.0f, sum = 0.0f;
  for (int sp = 0; sp < splits; ++sp) {
    const float ms = ws.stats[2 * (sp * stride + row)];
    if (ms == -INFINITY) continue;
    const float e = __expf(ms - mx);
    o += ws.partial[(sp * stride + row) * D + c] * e;
    sum += ws.stats[2 * (sp * stride + row) + 1] * e;
  }
  out[row * D + c] = T::from_float(o / sum);
}

}  // namespace detail

template <class Cfg>
Status decode(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
              const DecodePlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
              uint32_t* flags, cudaStream_t stream) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  Status st = check_view(cache, P);
  if (st == Status::kSuccess) st = check_attention_args(batch, cache.num_kv_heads);
  if (st != Status::kSuccess) return st;
  if (plan.head_dim != D || plan.page != P || plan.record_bytes != Cfg::record_bytes ||
      plan.shape.num_q_heads != batch.num_q_heads || plan.shape.num_kv_heads != cache.num_kv_heads ||
      plan.shape.residual != cache.residual)
    return Status::kConfigMismatch;
  if (batch.batch > plan.shape.batch || batch.batch > 65535) return Status::kInvalidShape;
  if (!workspace || !out || !flags) return Status::kNullPointer;
  if (workspace_bytes < plan.workspace_bytes) return Status::kWorkspaceTooSmall;
  if (reinterpret_cast<uintptr_t>(workspace) % 256 || reinterpret_cast<uintptr_t>(cache.cold) % 16) return Status::kInvalidShape;
  if (batch.batch == 0) return Status::kSuccess;
  const detail::DecodeWorkspace ws = detail::carve(plan, workspace);
  if (cudaMemsetAsync(ws.status, 0, size_t(batch.batch) * 4, stream) != cudaSuccess) return Status::kCudaError;
  const int group = batch.num_q_heads / cache.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + kDecodeRowsPerCta - 1) / kDecodeRowsPerCta;
  const unsigned nb = unsigned(batch.batch);
  detail::decode_transition_kernel<Cfg>
      <<<dim3(unsigned(plan.transition_pages), nb, unsigned(cache.num_kv_heads)), 256, 0, stream>>>(cache, batch, plan, ws);
  detail::decode_split_kernel<Cfg><<<dim3(unsigned(plan.max_splits), nb, unsigned(cache.num_kv_heads * row_tiles)),
                                     detail::kDecodeWarps * 32, 0, stream>>>(cache, batch, plan, ws, flags);
  detail::decode_merge_kernel<Cfg>
      <<<dim3(unsigned(plan.shape.max_q_len), nb, unsigned(batch.num_q_heads)), D, 0, stream>>>(batch, plan, ws, out);
  return cudaGetLastError() == cudaSuccess ? Status::kSuccess : Status::kCudaError;
}

#define KVQ_INSTANTIATE_DECODE(Cfg)                                                                           \
  template ::kvq::Status kvq::decode<Cfg>(const ::kvq::CacheView<typename Cfg::dtype>&,                      \
                                         const ::kvq::AttentionBatch<typename Cfg::dtype>&,                  \
                                         const ::kvq::DecodePlan&, void*, size_t, typename Cfg::dtype*, uint32_t*, \
                                         cudaStream_t)

KVQ_NAMESPACE_END

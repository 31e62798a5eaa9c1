// kvq/decode/decode_impl.cuh - decode attention kernels (include from one .cu per configuration).
//
// Four launches on the caller's stream, no host synchronisation, chained as dependent launches
// where the device takes them (core/dependent_launch.cuh: each waits for the one before it before
// reading its output, so a launch's latency and prologue overlap the end of the previous one):
//  1. transition: pages of the prefix that turn cold in this step (the append may not have run
//     yet) are quantized into the workspace with the append's own code (page_encoder.cuh); it
//     also clears the sequences' status words, which a later kernel sets (after waiting for it)
//     when it rejects a sequence;
//  2. records (records_kernel.cuh): tensor-core split-KV over the tokens served by records (cold
//     pool + transition pages), every K/V byte read once per KV head for the whole GQA group; with
//     more than 16 query rows a KV head (GQA group x q_len) and both roles in the model dtype
//     ("none"), the many-row kernel (rows_kernel.cuh) instead, 64 rows a CTA over tiles in shared
//     memory;
//  3. tail (tail_kernel.cuh): the hot ring rows and the new tokens (fewer than R + P + 16 tokens
//     per sequence), read in the model dtype, causal over the new tokens; one slot per item of
//     plan.tail_span 16-token chunks, on the tensor cores.
//     With attention sinks (CacheView::sinks) the records kernel masks tokens [0, sinks) and the
//     tail attends them (the sink rows, or ring rows while page 0 turns cold) in one more chunk
//     of its slot 0 (the kernel instantiated for sinks; views without them take the other).
//     Where the plan says so (plan.tail_ctas, compute capability 9.0+) it is the records kernel's
//     dependent launch: a few CTAs in the room the records grid leaves, running beside it;
//  4. merge (merge_kernel.cuh): combines the slots of every (token, query head) exactly
//     (log-sum-exp) and writes out.
// A configuration the records kernel does not serve (RecordTile::supported: key groups that are
// not a multiple of 16 tokens, value groups smaller than a packed word) runs the element-wise
// kernel below over all its tokens instead of 2 and 3; every compiled configuration of this
// repository takes the records path.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kvq/attention/run_checks.hpp"
#include "kvq/attention/token_source.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/kernels/transition.cuh"
#include "kvq/decode/decode.hpp"
#include "kvq/decode/merge_kernel.cuh"
#include "kvq/decode/records_kernel.cuh"
#include "kvq/decode/rows_kernel.cuh"
#include "kvq/decode/tail_kernel.cuh"
#include "kvq/decode/workspace.cuh"
#include "kvq/cache/element_decode.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

KVQ_DEVICE float warp_sum(float x) {
  KVQ_UNROLL
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Element-wise kernel, for the configurations the records kernel does not serve: split
// `blockIdx.x` of all tokens (records, hot rows and new tokens through token_ref, the host
// reference's functions). Warps take tokens round-robin, lanes take channels.
template <class Cfg>
__global__ void __launch_bounds__(kDecodeWarps * 32) KVQ_HIDDEN
    decode_elementwise_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                              DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, RT = kDecodeRowsPerCta, J = D / 32;
  __shared__ SeqAttention s;
  __shared__ int bad;
  __shared__ float qs[RT][D];
  __shared__ WarpStates<RT, D> red;
  const int split = blockIdx.x, b = blockIdx.y;
  const int group = a.num_q_heads / v.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + RT - 1) / RT;
  const int h = blockIdx.z / row_tiles, tile = blockIdx.z % row_tiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  resolve_sequence_for_cta(v, a, plan, b, P, s, bad);
  const int64_t all_end = s.len + s.q_len;
  const int64_t start = bad ? 0 : int64_t(split) * plan.split_tokens;
  const int64_t end = bad ? 0 : (all_end < start + plan.split_tokens ? all_end : start + plan.split_tokens);
  if (!pages_valid(v, b, s, bad, start, end, P)) {
    if (threadIdx.x == 0) reject_sequence(ws, b, flags);
    return;
  }
  const int rows = group * s.q_len;
  const int row0 = tile * RT;
  if (row0 >= rows) return;
  stage_query_rows<T, RT, D>(qs, a, s, h, group, row0, rows);

  float m[RT], l[RT], acc[RT][J];
  reset_row_states(m, l, acc);
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
      const float logit = attention_logit(dot, a.softmax_scale, a.softcap);
      const float m_new = fmaxf(m[r], logit);
      const float corr = __expf(m[r] - m_new), p = __expf(logit - m_new);
      l[r] = l[r] * corr + p;
      KVQ_UNROLL
      for (int j = 0; j < J; ++j) acc[r][j] = acc[r][j] * corr + p * val[j];
      m[r] = m_new;
    }
  }
  combine_and_store_rows<RT, D>(red, m, l, acc, rows - row0 < RT ? rows - row0 : RT, ws, plan, split, a, s, h, group, row0);
}

// The split kernel that carries `rows_per_cta` query rows a CTA (decode_rows_per_cta): f(kernel, its
// dynamic shared memory) for the one kvq::decode<Cfg, Policy> launches and plan_decode<Cfg, Policy>
// sizes splits by.
// kDecodeManyRows: the many-row kernel (only where has_many_rows_kernel; kvq::decode refuses other
// plans first); 16 at head dims up to 128: the two-row-tile records kernel; else the single-row-tile one.
template <class Cfg, class Policy, class F>
Status with_split_kernel(int rows_per_cta, F&& f) {
  if constexpr (has_many_rows_kernel<Cfg>())
    if (rows_per_cta == kDecodeManyRows) return f(decode_rows_kernel<Cfg>, DecodeRowsSmem<Cfg>::bytes);
  if constexpr (Cfg::head_dim <= 128)
    if (rows_per_cta == 16) return f(decode_records_kernel<Cfg, 2, Policy>, RecordsSmem<Cfg, 2>::bytes);
  return f(decode_records_kernel<Cfg, 1, Policy>, RecordsSmem<Cfg, 1>::bytes);
}

}  // namespace detail

template <class Cfg, class Policy>
Status decode(const CacheView<typename Cfg::dtype>& cache, const AttentionBatch<typename Cfg::dtype>& batch,
              const DecodePlan& plan, void* workspace, size_t workspace_bytes, typename Cfg::dtype* out,
              uint32_t* flags, cudaStream_t stream) {
  const PlannedAttention planned{plan.head_dim, plan.page, plan.record_bytes, plan.shape.num_q_heads,
                                 plan.shape.num_kv_heads, plan.shape.residual, plan.shape.batch, plan.workspace_bytes};
  const Status st = check_attention_run<Cfg>(cache, batch, planned, workspace, workspace_bytes, out, flags);
  if (st != Status::kSuccess) return st;
  if (batch.batch == 0) return Status::kSuccess;
  const detail::DecodeWorkspace ws = detail::carve(plan, workspace);
  const int group = batch.num_q_heads / cache.num_kv_heads;
  // The plan's rows a CTA are what plan_decode<Cfg> gives for its shape (a plan made for another
  // configuration, or altered, is refused before any launch).
  if (plan.rows_per_cta != detail::planned_rows_per_cta<Cfg>(plan.shape)) return Status::kConfigMismatch;
  const int row_tiles8 = (group * plan.shape.max_q_len + kDecodeRowsPerCta - 1) / kDecodeRowsPerCta;
  const unsigned nb = unsigned(batch.batch);
  const Status transition = detail::launch_transition<Cfg>(cache, batch, plan.transition_pages, ws.transition, stream,
                                                           ws.status);  // clears ws.status
  if (transition != Status::kSuccess) return transition;
  constexpr bool records_path = detail::RecordTile<Cfg>::supported;
  if constexpr (records_path) {
    const int row_tiles = (group * plan.shape.max_q_len + plan.rows_per_cta - 1) / plan.rows_per_cta;
    const dim3 grid(unsigned(plan.max_splits), nb, unsigned(cache.num_kv_heads * row_tiles));
    const Status launched = detail::with_split_kernel<Cfg, Policy>(plan.rows_per_cta, [&](auto kernel, size_t bytes) {
      return detail::launch_split_kernel(kernel, bytes, grid, stream, cache, batch, plan, ws, flags);
    });
    if (launched != Status::kSuccess) return launched;
    // A view with attention sinks takes the tail kernel that also attends them (tail_kernel.cuh);
    // the other is the one without that code ("none" configurations refuse sinks: run_checks.hpp).
    constexpr bool sinks_possible = Codec<typename Cfg::k_quant>::quantized || Codec<typename Cfg::v_quant>::quantized;
    const auto tail_kernel = sinks_possible && cache.sinks > 0 ? detail::decode_tail_kernel<Cfg, sinks_possible>
                                                               : detail::decode_tail_kernel<Cfg, false>;
    if (plan.tail_ctas > 0) {  // beside the records kernel: its dependent launch (plan.hpp, tail_kernel.cuh)
      if (!detail::cuda_ok(detail::launch_dependent(tail_kernel, plan.dependent_launches != 0,
                                                    dim3(unsigned(plan.tail_ctas)), dim3(detail::kDecodeWarps * 32), 0, stream, cache,
                                                    batch, plan, ws, flags)))
        return Status::kCudaError;
    } else {
      const Status tail = detail::launch(tail_kernel,
                                         dim3(unsigned(plan.tail_slots), nb, unsigned(cache.num_kv_heads * row_tiles8)),
                                         dim3(detail::kDecodeWarps * 32), 0, stream, cache, batch, plan, ws, flags);
      if (tail != Status::kSuccess) return tail;
    }
  } else {
    const Status split = detail::launch(detail::decode_elementwise_kernel<Cfg>,
                                        dim3(unsigned(plan.max_splits), nb, unsigned(cache.num_kv_heads * row_tiles8)),
                                        dim3(detail::kDecodeWarps * 32), 0, stream, cache, batch, plan, ws, flags);
    if (split != Status::kSuccess) return split;
  }
  return detail::cuda_status(detail::launch_dependent(detail::decode_merge_kernel<Cfg>, plan.dependent_launches != 0,
                                                      dim3(unsigned(plan.shape.max_q_len), nb, unsigned(batch.num_q_heads)),
                                                      dim3(detail::kMergeThreads), 0, stream, batch, plan, ws, out, records_path));
}

template <class Cfg, class Policy>
Status plan_decode(const DecodeShape& shape, DecodePlan* plan) {
  // Every kernel of the configuration is compiled for the same architectures: the merge kernel's
  // attributes decide for the chain (core/dependent_launch.cuh).
  cudaFuncAttributes merge{};
  if (!detail::cuda_ok(cudaFuncGetAttributes(&merge, detail::decode_merge_kernel<Cfg>))) return Status::kCudaError;
  const bool chained = detail::dependent_launch_supported(merge);
  int ctas_per_sm = 4, tails_per_slot = 0;
  constexpr bool many_rows = detail::has_many_rows_kernel<Cfg>();
  if constexpr (detail::RecordTile<Cfg>::supported) {
    if (shape.num_kv_heads > 0 && shape.num_q_heads % shape.num_kv_heads == 0 && shape.max_q_len > 0) {
      const int rows = detail::planned_rows_per_cta<Cfg>(shape);
      int regs = 0;
      size_t smem = 0;
      const Status st = detail::with_split_kernel<Cfg, Policy>(rows, [&](auto kernel, size_t bytes) {
        return detail::split_kernel_occupancy(kernel, bytes, &ctas_per_sm, &regs, &smem);
      });
      if (st != Status::kSuccess) return st;
      // Tail CTAs that fit on a multiprocessor that holds one records CTA fewer than it can (both
      // kernels have kDecodeWarps warps; registers are allocated per warp, the driver reserves some
      // shared memory per CTA), where the launches are chained: the tail may then run beside the
      // records kernel in the room its one-wave grid leaves.
      if (chained) {
        cudaFuncAttributes tail{};
        int dev = 0, reserved = 0, sm_smem = 0, sm_regs = 0;
        if (!detail::cuda_ok(cudaFuncGetAttributes(&tail, detail::decode_tail_kernel<Cfg>)) || !detail::cuda_ok(cudaGetDevice(&dev)) ||
            !detail::cuda_ok(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev)) ||
            !detail::cuda_ok(cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev)) ||
            !detail::cuda_ok(cudaDeviceGetAttribute(&sm_regs, cudaDevAttrMaxRegistersPerMultiprocessor, dev)))
          return Status::kCudaError;
        const auto warp_regs = [](int per_thread) { return (per_thread * 32 + 255) / 256 * 256; };
        const int held = ctas_per_sm > 1 ? ctas_per_sm - 1 : 0;
        const long free_regs = long(sm_regs) - long(held) * long(detail::kDecodeWarps) * warp_regs(regs);
        const long free_smem = long(sm_smem) - long(held) * long(smem + size_t(reserved));
        const long by_regs = tail.numRegs > 0 ? free_regs / (long(detail::kDecodeWarps) * warp_regs(tail.numRegs)) : 0;
        const long by_smem = free_smem / long(tail.sharedSizeBytes + size_t(reserved));
        const long fit = by_regs < by_smem ? by_regs : by_smem;
        tails_per_slot = fit > 0 ? int(fit) : 0;
      }
    }
  }
  return plan_decode(shape, Cfg::head_dim, Cfg::page, Cfg::record_bytes, plan, ctas_per_sm > 0 ? ctas_per_sm : 1,
                     tails_per_slot, chained, many_rows);
}

// One line per configuration, in one .cu file: KVQ_INSTANTIATE_DECODE(Cfg) compiles the decode of
// DecodePolicy; KVQ_INSTANTIATE_DECODE_WITH_POLICY(Cfg, Policy) that of another policy (its own
// kernels, beside the default's where both are instantiated).
#define KVQ_INSTANTIATE_DECODE_WITH_POLICY(Cfg, Policy)                                                       \
  template ::kvq::Status kvq::decode<Cfg, Policy>(const ::kvq::CacheView<typename Cfg::dtype>&,              \
                                                 const ::kvq::AttentionBatch<typename Cfg::dtype>&,          \
                                                 const ::kvq::DecodePlan&, void*, size_t, typename Cfg::dtype*, \
                                                 uint32_t*, cudaStream_t);                                   \
  template ::kvq::Status kvq::plan_decode<Cfg, Policy>(const ::kvq::DecodeShape&, ::kvq::DecodePlan*)
#define KVQ_INSTANTIATE_DECODE(Cfg) KVQ_INSTANTIATE_DECODE_WITH_POLICY(Cfg, ::kvq::DecodePolicy)

KVQ_NAMESPACE_END

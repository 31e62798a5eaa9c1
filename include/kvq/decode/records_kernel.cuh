// kvq/decode/records_kernel.cuh - the tensor-core split kernel of decode attention over the
// tokens the cache serves from records (the cold pool and the pages turning cold in this step).
//
// CTA = (split, sequence, KV head x row tile). Its rows are up to 8 * NT query rows of one KV
// head (GQA heads x new tokens), so every K/V byte of the split is read once for all of them.
// Each of the 4 warps streams whole pages of the split (warp w takes pages w, w+4, ...), 16
// tokens at a time, through its own ring of shared-memory stages filled by cp.async:
//   S^T (16 tokens x 8 rows)  = K_tile . Q^T     mma.m16n8k16, keys as A, fp32 accumulators
//   online softmax per row (max over the 16 tokens by shuffles), P^T transposed by movmatrix
//   O^T (D channels x 8 rows) += V_tile^T . P^T  values as A
// Keys: INT2/INT4 codes enter an fp16 mma as exact (offset + code) pairs (a rotation shared by
// two pairs and one LOP3, quant/offset_code.hpp); the per-channel scale is folded into the query
// (Q'' = (q 2^-e) * scale, once per key group, fp16 whatever the model dtype) and the zero points
// and offsets into a per-row bias computed by two more mmas (zero . q 2^-e - offset . Q''), so
// S = 2^e ((offset + code) . Q'' + bias). INT8 keys enter as exact codes and the token scale
// multiplies S.
// Values, INT2/INT4 with groups of a multiple of 32 channels ("blocked", record_tile.cuh): the
// codes enter an fp16 mma as exact (offset + code) pairs, the token's group scale is in the
// probabilities (P'_B = P s_B per 32-channel block B), and per block and row two running sums,
// SS_B = sum P'_B (an mma of ones) and ZZ_B = sum P z_B (an mma of the zero points), restore
// O = A - offset SS_B + ZZ_B once per split. Other values are dequantized in registers (INT2/INT4
// with smaller groups: shift, OR, exact subtract, one fma with the token's scale and zero). The
// split's partial output and (max, sum) per row go to the workspace; the merge kernel of
// decode_impl.cuh combines splits and the tail (hot rows + new tokens).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kvq/attention/token_source.hpp"
#include "kvq/decode/plan.hpp"
#include "kvq/decode/record_tile.cuh"
#include "kvq/decode/workspace.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Shared memory of the records kernel (dynamic): staged queries, then either the warps' stage
// rings (main loop) or the cross-warp reduction (epilogue).
template <class Cfg, int NT>
struct RecordsSmem {
  using Tile = RecordTile<Cfg>;
  static constexpr int rows = 8 * NT;
  static constexpr int D = Cfg::head_dim;
  // ~8 KB of stages per warp (at least 2): 4 x 1.75 KB for INT2 at D 128, 2 x 8 KB for "none".
  static constexpr int stages = 8192 / Tile::bytes < 2 ? 2 : 8192 / Tile::bytes > 6 ? 6 : 8192 / Tile::bytes;
  static constexpr int qh_stride = D / 2 + 1;  // words per row of qh (+1: fewer bank conflicts)
  // qs: [rows][D] fp32 queries; qh: [rows][qh_stride] fp16 pairs of q * 2^-e (row max in
  // [0.5, 1)), row_down: [rows] 2^e (qh and row_down for INT2 / INT4 keys only).
  static constexpr size_t qs_bytes = size_t(rows) * D * 4;
  static constexpr size_t qh_bytes = size_t(rows) * qh_stride * 4;
  static constexpr size_t q_bytes = align16(qs_bytes + qh_bytes + size_t(rows) * 4);
  static constexpr size_t ring_bytes = size_t(kDecodeWarps) * stages * Tile::bytes;
  static constexpr size_t red_bytes = size_t(kDecodeWarps) * rows * (D + 2) * 4;
  static constexpr size_t bytes = q_bytes + (ring_bytes > red_bytes ? ring_bytes : red_bytes);
};

// CTAs per multiprocessor the single-row-tile kernel is compiled for (registers per thread at most
// 65536 / (128 x this)); a tuning knob, measured in bench/NOTES.md.
#ifndef KVQ_DECODE_RECORDS_MIN_CTAS
#define KVQ_DECODE_RECORDS_MIN_CTAS 4
#endif

template <class Cfg, int NT>
__global__ void __launch_bounds__(kDecodeWarps * 32, NT == 1 ? KVQ_DECODE_RECORDS_MIN_CTAS : 1) KVQ_HIDDEN
    decode_records_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                          DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  using Tile = RecordTile<Cfg>;
  using L = RecordsSmem<Cfg, NT>;
  constexpr int D = Cfg::head_dim, P = Cfg::page, ROWS = 8 * NT, KS = D / 16, MT = D / 16, S = L::stages;
  constexpr int TPP = P / 16;  // tiles per page
  extern __shared__ __align__(16) uint8_t smem[];
  float* qs = reinterpret_cast<float*>(smem);                       // [ROWS][D]
  uint32_t* qh = reinterpret_cast<uint32_t*>(smem + L::qs_bytes);    // [ROWS][qh_stride]
  float* row_down = reinterpret_cast<float*>(smem + L::qs_bytes + L::qh_bytes);
  __shared__ SeqAttention s;
  __shared__ int bad;

  const int split = blockIdx.x, b = blockIdx.y;
  const int group = a.num_q_heads / v.num_kv_heads;
  const int row_tiles = (group * plan.shape.max_q_len + ROWS - 1) / ROWS;
  const int h = blockIdx.z / row_tiles, row0 = (blockIdx.z % row_tiles) * ROWS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  if (threadIdx.x == 0) {
    s = resolve_attention(v, a, b, P);
    bad = sequence_exceeds_plan(s, plan);
  }
  __syncthreads();
  const int64_t rec_end = bad ? 0 : records_end(s);
  const int64_t start = int64_t(split) * plan.split_tokens;
  const int64_t end = rec_end < start + plan.split_tokens ? rec_end : start + plan.split_tokens;
  if (!pages_valid(v, b, s, bad, start, end, P)) {
    if (threadIdx.x == 0) reject_sequence(ws, b, flags);
    return;
  }
  const int rows = group * s.q_len;
  if (start >= end || row0 >= rows) return;  // the merge reads only the splits that hold tokens

  for (int idx = threadIdx.x; idx < ROWS * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D, rg = row0 + r;
    qs[idx] = rg < rows ? a.q[(size_t(s.q0 + rg / group) * a.num_q_heads + h * group + rg % group) * D + c].to_float() : 0.0f;
  }
  __syncthreads();
  const int active_nt = (rows - row0 + 7) / 8 < NT ? (rows - row0 + 7) / 8 : NT;

  // Query operand: raw (INT8 / "none" keys) or, for INT2 / INT4 keys, q * scale in fp16 per key
  // group: Q'' = (q * 2^-e) * scale with the row's max |q| * 2^-e in [0.5, 1), so Q'' never
  // exceeds the largest fp16 scale; then S = 2^e ((offset + code) . Q'' + zero . (q 2^-e) - offset . Q'').
  using KMma = typename Tile::KMma;
  constexpr int QH = L::qh_stride;
  // fp16 models, INT2/INT4 keys: Q'' = hi + lo (two fp16 parts; the key mma runs on both), so the
  // query operand carries no rounding beyond fp16's q (a single fp16 Q'' moves every logit of a key
  // group by the same per-channel relative error, which the naive fp16 attention does not have).
  constexpr bool KSPLIT = Tile::k_asym && std::is_same_v<T, fp16>;
  uint32_t qb[NT][KS][2], qlo[NT][KSPLIT ? KS : 1][2];
  float bias[NT][2], unscale[NT][2];
  if constexpr (Tile::k_asym) {
    for (int r = warp; r < ROWS; r += kDecodeWarps) {
      float mx = 0.0f;
      for (int c = lane; c < D; c += 32) mx = fmaxf(mx, fabsf(qs[r * D + c]));
      KVQ_UNROLL
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      int ex = 0;
      frexpf(mx, &ex);
      if (!(mx > 0.0f && mx < INFINITY)) ex = 0;
      const float up = ldexpf(1.0f, -ex);
      for (int c = 2 * lane; c < D; c += 64) qh[r * QH + c / 2] = pack2<fp16>(qs[r * D + c] * up, qs[r * D + c + 1] * up);
      if (lane == 0) row_down[r] = ldexpf(1.0f, ex);
    }
    __syncthreads();
  }
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    bias[nt][0] = bias[nt][1] = 0.0f;
    unscale[nt][0] = Tile::k_asym ? row_down[nt * 8 + 2 * i] : 1.0f;
    unscale[nt][1] = Tile::k_asym ? row_down[nt * 8 + 2 * i + 1] : 1.0f;
    KVQ_UNROLL
    for (int kk = 0; kk < KS; ++kk)
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        const int c = Tile::k_channel(i, 2 * kk + hh);
        const float2 q2 = *reinterpret_cast<const float2*>(&qs[(nt * 8 + g) * D + c]);
        qb[nt][kk][hh] = pack2<KMma>(q2.x, q2.y);
      }
  }

  // Blocked values: ss[nt][B / 2] holds SS_B in rows 0-7 (B even) or 8-15 (B odd) of an mma
  // accumulator, zz[nt] ZZ_B in row B; vrot: this lane's rotations of the value words.
  constexpr bool VB = Tile::v_blocked;
  constexpr int NB = Tile::v_blocks, NB2 = VB ? (NB + 1) / 2 : 1;
  float m[NT][2], l[NT][2], o[NT][MT][4], ss[NT][NB2][4], zz[NT][4];
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    m[nt][0] = m[nt][1] = -INFINITY;
    l[nt][0] = l[nt][1] = 0.0f;
    KVQ_UNROLL
    for (int mt = 0; mt < MT; ++mt) o[nt][mt][0] = o[nt][mt][1] = o[nt][mt][2] = o[nt][mt][3] = 0.0f;
    KVQ_UNROLL
    for (int b = 0; b < NB2; ++b) ss[nt][b][0] = ss[nt][b][1] = ss[nt][b][2] = ss[nt][b][3] = 0.0f;
    zz[nt][0] = zz[nt][1] = zz[nt][2] = zz[nt][3] = 0.0f;
  }
  int vrot[Tile::v_rots];
  if constexpr (VB) Tile::v_rotations(g, vrot);
  constexpr uint32_t one = Half2Consts<fp16>::one;
  const uint32_t ones_lo[4] = {one, 0u, one, 0u}, ones_hi[4] = {0u, one, 0u, one};  // A of SS (rows 0-7, 8-15)
  // Logits in log2 units: x = S pre (pre = 2^e softmax_scale log2(e)), or with a softcap
  // x = softcap log2(e) tanh(S pre) (pre = 2^e softmax_scale / softcap).
  const bool capped = a.softcap > 0.0f;
  const float cap_log2 = a.softcap * 1.4426950408889634f;
  float pre[NT][2];
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt)
    KVQ_UNROLL
    for (int hh = 0; hh < 2; ++hh)
      pre[nt][hh] = unscale[nt][hh] * (capped ? a.softmax_scale / a.softcap : a.softmax_scale * 1.4426950408889634f);
  const uint8_t* transition = ws.transition + record_offset(int64_t(b) * plan.transition_pages, 0, v.num_kv_heads, Cfg::record_bytes);
  uint8_t* ring = smem + L::q_bytes + size_t(warp) * S * Tile::bytes;
  // The warp's pages are pages 0, 4, 8, ... of the split counted from `base` (its first token);
  // tile n is tile n % TPP of page n / TPP. Offsets from base fit 32 bits (a split is below 2^31
  // tokens), so the loop does no 64-bit arithmetic except once per page.
  const int64_t base = (start / P + warp) * P;
  const int rel_end = end > base ? int(end - base) : 0;
  int ntiles = 0;
  if (rel_end > 0) {
    const int kmax = (rel_end - 1) / P / 4;  // the warp's last page
    const int left = rel_end - 4 * kmax * P;
    ntiles = kmax * TPP + ((left < P ? left : P) + 15) / 16;
  }
  auto tile_offset = [&](int n) { return 4 * P * (n / TPP) + 16 * (n % TPP); };
  const uint8_t* issue_record = nullptr;  // the record of the page being issued
  auto issue = [&](int n) {
    if (n < ntiles) {
      if (n % TPP == 0) {
        const int64_t page = base / P + 4 * (n / TPP);
        issue_record =
            page * P < s.cold
                ? v.cold + record_offset(v.block_table[int64_t(b) * v.max_pages_per_seq + page], h, v.num_kv_heads, Cfg::record_bytes)
                : transition + record_offset(page - s.cold / P, h, v.num_kv_heads, Cfg::record_bytes);
      }
      Tile::copy(ring + (n % S) * Tile::bytes, issue_record, 16 * (n % TPP), lane);
    }
    cp_async_commit();
  };

  KVQ_UNROLL
  for (int n = 0; n < S - 1; ++n) issue(n);
  for (int n = 0; n < ntiles; ++n) {
    issue(n + S - 1);
    cp_async_wait<S - 1>();
    __syncwarp();
    const uint8_t* tile = ring + (n % S) * Tile::bytes;
    const int rel0 = tile_offset(n);  // the tile's first token - base

    // ---- keys: S^T = K_tile . Q^T ----
    if constexpr (Tile::k_asym) {
      if (16 * (n % TPP) % Tile::KQ::group == 0) {  // new key group: Q'' = qh * scale, bias = z . qh - offset . Q
        const uint32_t* ksc = reinterpret_cast<const uint32_t*>(tile + Tile::kp);  // fp16 pairs
        const uint32_t* kze = ksc + D / 2;
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) {
          if (NT > 1 && nt >= active_nt) break;
          // bias = z . qh - offset . Q'': two mmas of stored fp16 values and exact fp16 operands
          // (offsets are powers of two), so the bias is rounded only by the fp32 sums. Four
          // accumulators (zero points / offsets x even / odd k-steps): chains of KS/2 mmas.
          float zacc[4][4] = {};
          KVQ_UNROLL
          for (int kk = 0; kk < KS; ++kk) {
            uint32_t qn[2], z[2];
            KVQ_UNROLL
            for (int hh = 0; hh < 2; ++hh) {
              const int c2 = Tile::k_channel(i, 2 * kk + hh) / 2;
              qn[hh] = qh[(nt * 8 + g) * QH + c2];
              z[hh] = kze[c2];
              qb[nt][kk][hh] = hmul2<fp16>(qn[hh], ksc[c2]);
              if constexpr (KSPLIT) qlo[nt][kk][hh] = fp16_pair_product_residual(qn[hh], ksc[c2], qb[nt][kk][hh]);
            }
            const uint32_t za[4] = {z[0], z[0], z[1], z[1]};  // every row the zero points
            const uint32_t oa[4] = {Tile::k_neg_offset(2 * kk), Tile::k_neg_offset(2 * kk), Tile::k_neg_offset(2 * kk + 1),
                                    Tile::k_neg_offset(2 * kk + 1)};
            mma16816<fp16>(zacc[kk % 2], za, qn[0], qn[1]);
            mma16816<fp16>(zacc[2 + kk % 2], oa, qb[nt][kk][0], qb[nt][kk][1]);
            if constexpr (KSPLIT) mma16816<fp16>(zacc[2 + kk % 2], oa, qlo[nt][kk][0], qlo[nt][kk][1]);
          }
          bias[nt][0] = (zacc[0][0] + zacc[1][0]) + (zacc[2][0] + zacc[3][0]);
          bias[nt][1] = (zacc[0][1] + zacc[1][1]) + (zacc[2][1] + zacc[3][1]);
        }
      }
    }
    float sacc[NT][4], sacc2[NT][4];  // even / odd k-steps: two chains of KS/2 mmas
    {
      uint32_t k0[Tile::k_words], k1[Tile::k_words];
      Tile::load_k(tile, g, i, k0);
      Tile::load_k(tile, g + 8, i, k1);
      KVQ_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        sacc[nt][0] = sacc[nt][2] = bias[nt][0];
        sacc[nt][1] = sacc[nt][3] = bias[nt][1];
        sacc2[nt][0] = sacc2[nt][1] = sacc2[nt][2] = sacc2[nt][3] = 0.0f;
      }
      KVQ_UNROLL
      for (int kk = 0; kk < KS; ++kk) {
        const uint32_t ka[4] = {Tile::k_pair(k0, 2 * kk), Tile::k_pair(k1, 2 * kk), Tile::k_pair(k0, 2 * kk + 1),
                                Tile::k_pair(k1, 2 * kk + 1)};
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt)
          if (NT == 1 || nt < active_nt) {
            mma16816<KMma>(kk % 2 ? sacc2[nt] : sacc[nt], ka, qb[nt][kk][0], qb[nt][kk][1]);
            if constexpr (KSPLIT) mma16816<fp16>(kk % 2 ? sacc2[nt] : sacc[nt], ka, qlo[nt][kk][0], qlo[nt][kk][1]);
          }
      }
      KVQ_UNROLL
      for (int nt = 0; nt < NT; ++nt)
        KVQ_UNROLL
        for (int c = 0; c < 4; ++c) sacc[nt][c] += sacc2[nt][c];
      if constexpr (Tile::k_int8) {
        const float* ks = reinterpret_cast<const float*>(tile + Tile::kp);
        const float s0 = ks[g], s1 = ks[g + 8];
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) sacc[nt][0] *= s0, sacc[nt][1] *= s0, sacc[nt][2] *= s1, sacc[nt][3] *= s1;
      }
    }

    // ---- online softmax; P^T as the B operand of the value mma (fp16 for blocked values) ----
    using PT = std::conditional_t<VB, fp16, T>;
    const bool ok0 = rel0 + g < rel_end, ok1 = rel0 + g + 8 < rel_end;
    uint32_t pb[NT][2];
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      float p0[2], p1[2], cr[2];
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        float x0 = sacc[nt][hh] * pre[nt][hh], x1 = sacc[nt][2 + hh] * pre[nt][hh];  // 2^e and the scale in one
        if (capped) {
          x0 = cap_log2 * tanhf(x0);
          x1 = cap_log2 * tanhf(x1);
        }
        x0 = ok0 ? x0 : -INFINITY;
        x1 = ok1 ? x1 : -INFINITY;
        float mx = fmaxf(x0, x1);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(m[nt][hh], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = exp2_approx(m[nt][hh] - m_use);
        p0[hh] = exp2_approx(x0 - m_use);
        p1[hh] = exp2_approx(x1 - m_use);
        l[nt][hh] = l[nt][hh] * corr + p0[hh] + p1[hh];
        m[nt][hh] = m_new;
        cr[hh] = corr;
      }
      if (__any_sync(0xffffffffu, cr[0] != 1.0f || cr[1] != 1.0f)) {  // the running max moved: rescale
        KVQ_UNROLL
        for (int mt = 0; mt < MT; ++mt) {
          o[nt][mt][0] *= cr[0], o[nt][mt][2] *= cr[0];
          o[nt][mt][1] *= cr[1], o[nt][mt][3] *= cr[1];
        }
        if constexpr (VB) {
          KVQ_UNROLL
          for (int b = 0; b < NB2; ++b) ss[nt][b][0] *= cr[0], ss[nt][b][2] *= cr[0], ss[nt][b][1] *= cr[1], ss[nt][b][3] *= cr[1];
          zz[nt][0] *= cr[0], zz[nt][1] *= cr[1];
        }
      }
      pb[nt][0] = movmatrix_trans(pack2<PT>(p0[0], p0[1]));  // tokens 0-7:  (row g, tokens 2i, 2i+1)
      pb[nt][1] = movmatrix_trans(pack2<PT>(p1[0], p1[1]));  // tokens 8-15
    }

    // ---- values: O^T += V_tile^T . P^T ----
    if constexpr (VB) {
      typename Tile::VBlockPair v0, v1;
      Tile::load_v_blocked(tile, i, g, v0);
      Tile::load_v_blocked(tile, i + 4, g, v1);
      uint32_t pp[NT][NB][2];  // P'_B = P s_B: (row g, tokens 2i, 2i+1) and (tokens 2i+8, 2i+9)
      KVQ_UNROLL
      for (int B = 0; B < NB; ++B) {
        const uint32_t s0 = Tile::v_block_params(tile, i, B, 0), s1 = Tile::v_block_params(tile, i + 4, B, 0);
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) pp[nt][B][0] = hmul2<fp16>(pb[nt][0], s0), pp[nt][B][1] = hmul2<fp16>(pb[nt][1], s1);
      }
      KVQ_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t va[4] = {Tile::v_pair_blocked(v0, 2 * mt, vrot), Tile::v_pair_blocked(v0, 2 * mt + 1, vrot),
                                Tile::v_pair_blocked(v1, 2 * mt, vrot), Tile::v_pair_blocked(v1, 2 * mt + 1, vrot)};
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt)
          if (NT == 1 || nt < active_nt) mma16816<fp16>(o[nt][mt], va, pp[nt][mt / 2][0], pp[nt][mt / 2][1]);
      }
      // Running sums: ZZ_B (row B = lane g's block, its zero points) and SS_B (ones).
      const uint32_t z0 = g < NB ? Tile::v_block_params(tile, i, g, 1) : 0u;
      const uint32_t z1 = g < NB ? Tile::v_block_params(tile, i + 4, g, 1) : 0u;
      const uint32_t za[4] = {z0, 0u, z1, 0u};
      KVQ_UNROLL
      for (int nt = 0; nt < NT; ++nt) {
        if (NT > 1 && nt >= active_nt) break;
        mma16816<fp16>(zz[nt], za, pb[nt][0], pb[nt][1]);
        KVQ_UNROLL
        for (int B = 0; B < NB; ++B) mma16816<fp16>(ss[nt][B / 2], B % 2 ? ones_hi : ones_lo, pp[nt][B][0], pp[nt][B][1]);
      }
    } else {
      typename Tile::VPair v0, v1;
      Tile::load_v(tile, i, g, v0);
      Tile::load_v(tile, i + 4, g, v1);
      KVQ_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t va[4] = {Tile::v_pair(v0, 2 * mt), Tile::v_pair(v0, 2 * mt + 1), Tile::v_pair(v1, 2 * mt),
                                Tile::v_pair(v1, 2 * mt + 1)};
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt)
          if (NT == 1 || nt < active_nt) mma16816<T>(o[nt][mt], va, pb[nt][0], pb[nt][1]);
      }
    }
    __syncwarp();
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the epilogue reuses the space

  if constexpr (VB) {  // O = A - offset SS_B + ZZ_B (ZZ_B from lane (B, i))
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh)
        KVQ_UNROLL
        for (int B = 0; B < NB; ++B) {
          const float zb = __shfl_sync(0xffffffffu, zz[nt][hh], 4 * B + i), sb = ss[nt][B / 2][2 * (B % 2) + hh];
          KVQ_UNROLL
          for (int mt = 2 * B; mt < 2 * B + 2; ++mt) {
            o[nt][mt][hh] += zb - Tile::v_offset(2 * mt) * sb;
            o[nt][mt][2 + hh] += zb - Tile::v_offset(2 * mt + 1) * sb;
          }
        }
  }

  // ---- combine the warps, write the split's partial state ----
  float* red_o = reinterpret_cast<float*>(smem + L::q_bytes);  // [warp][ROWS][D]
  float* red_m = red_o + kDecodeWarps * ROWS * D;              // [warp][ROWS]
  float* red_l = red_m + kDecodeWarps * ROWS;
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt)
    KVQ_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      float lt = l[nt][hh];
      lt += __shfl_xor_sync(0xffffffffu, lt, 4);
      lt += __shfl_xor_sync(0xffffffffu, lt, 8);
      lt += __shfl_xor_sync(0xffffffffu, lt, 16);
      const int r = nt * 8 + 2 * i + hh;
      if (g == 0) {
        red_m[warp * ROWS + r] = m[nt][hh] * 0.6931471805599453f;  // natural-log units, as the merge expects
        red_l[warp * ROWS + r] = lt;
      }
      KVQ_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        red_o[(warp * ROWS + r) * D + Tile::v_channel(g, 2 * mt)] = o[nt][mt][hh];
        red_o[(warp * ROWS + r) * D + Tile::v_channel(g, 2 * mt + 1)] = o[nt][mt][2 + hh];
      }
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ROWS * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D, rg = row0 + r;
    if (rg >= rows) continue;
    combine_warps_and_store(red_o, red_m, red_l, ROWS, D, r, c, ws, plan, split,
                            size_t(s.q0 + rg / group) * a.num_q_heads + h * group + rg % group);
  }
}

template <class Cfg, int NT>
Status launch_records(dim3 grid, cudaStream_t stream, const CacheView<typename Cfg::dtype>& v,
                      const AttentionBatch<typename Cfg::dtype>& a, const DecodePlan& plan, const DecodeWorkspace& ws,
                      uint32_t* flags) {
  constexpr size_t bytes = RecordsSmem<Cfg, NT>::bytes;
  if (cudaFuncSetAttribute(decode_records_kernel<Cfg, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)) !=
      cudaSuccess)
    return Status::kCudaError;
  decode_records_kernel<Cfg, NT><<<grid, kDecodeWarps * 32, bytes, stream>>>(v, a, plan, ws, flags);
  return Status::kSuccess;
}

// CTAs of the records kernel one multiprocessor holds (what the planner sizes splits by).
template <class Cfg, int NT>
Status records_occupancy(int* ctas_per_sm) {
  constexpr size_t bytes = RecordsSmem<Cfg, NT>::bytes;
  if (cudaFuncSetAttribute(decode_records_kernel<Cfg, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, decode_records_kernel<Cfg, NT>, kDecodeWarps * 32, bytes) !=
          cudaSuccess)
    return Status::kCudaError;
  return Status::kSuccess;
}

}  // namespace detail
KVQ_NAMESPACE_END

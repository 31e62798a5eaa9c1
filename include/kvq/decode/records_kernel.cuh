// kvq/decode/records_kernel.cuh - the tensor-core split kernel of decode attention over the
// tokens the cache serves from records (the cold pool and the pages turning cold in this step).
//
// CTA = (split, sequence, KV head x row tile). Its rows are up to 8 * NT query rows of one KV
// head (GQA heads x new tokens), so every K/V byte of the split is read once for all of them.
// Each of the 4 warps streams whole pages of the split (warp w takes pages w, w+4, ...) in
// 16-token tiles through its own ring of 2 or 4 shared-memory stages filled by cp.async, in
// unrolled macro-iterations (constant slots and copy offsets) and steps of 2 tiles when the ring
// has 4 stages:
//   S^T (16 tokens x 8 rows)  = K_tile . Q^T     mma.m16n8k16, keys as A, fp32 accumulators
//   online softmax per row over the step's tokens (max by shuffles), P^T transposed by movmatrix
//   O^T (D channels x 8 rows) += V_tile^T . P^T  values as A
// With two row tiles (NT = 2) the loop is software-pipelined by one step: a step's values are
// computed together with the next step's logits (one basic block), and a stage's key and value
// parts are refilled separately. With one row tile the steps run one after the other and a tile is
// refilled whole (the form that measured fastest for each on an H100, docs/PERF_NOTES.md).
// Keys: INT2/INT4 codes enter an fp16 mma as exact (offset + code) pairs (a shift shared by
// two pairs and one LOP3, quant/offset_code.hpp); the per-channel scale is folded into the query
// (Q'' = (q 2^-e) * scale, once per key group, fp16 whatever the model dtype) and the zero points
// and offsets into a per-row bias computed by two more mmas (zero . q 2^-e - offset . Q''), so
// S = 2^e ((offset + code) . Q'' + bias). INT8 keys enter an fp16 mma as exact subnormals
// (x + 128) 2^-24 against q 2^-e (quant/int8_subnormal.hpp: one XOR a word, one byte permute a
// pair), a per-row bias (-128 2^-24) . q 2^-e, computed once, removes the offset, the token scale
// multiplies S and 2^(24 + e) joins the logits' scale factor.
// Values, INT2/INT4 with groups of a multiple of 32 channels ("blocked", record_tile.cuh): the
// codes enter an fp16 mma as exact subnormals code * 2^(q - 24), the token's group scale is in the
// probabilities (P'_B = P s_B per 32-channel block B), and per block and row one running sum,
// ZZ_B = sum P z_B (an mma of the zero points), restores O = 2^(24 - q) A + ZZ_B once per split. Other values are dequantized in registers (INT2/INT4
// with smaller groups: shift, OR, exact subtract, one fma with the token's scale and zero). The
// split's partial output and (max, sum) per row go to the workspace; the merge kernel of
// decode_impl.cuh combines splits and the tail (hot rows + new tokens).
// Attention sinks (tokens [0, min(sinks, records_end)), never read from a record): masked here in
// the first step of the one warp whose tiles start at token 0 (the pipelined loop's first step runs
// before it; the other loop tests for its first step once a macro-iteration, a uniform branch);
// the tail kernel attends them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kvq/attention/token_source.hpp"
#include "kvq/core/dependent_launch.cuh"
#include "kvq/decode/plan.hpp"
#include "kvq/decode/policy.hpp"
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
  // Ring stages per warp: 4 when they fit in 16 KB (INT2/INT4 up to D 128, INT2 at D 256), else 2.
  // A power of two, so that the kernel's unrolled loop can give each tile a constant slot.
  static constexpr int stages = 4 * Tile::bytes <= 16384 ? 4 : 2;
  // qs: [rows][D] fp32 queries. INT2 / INT4 / INT8 keys: row_down, [rows] 2^e (row max |q| 2^-e in
  // [0.5, 1)). INT2 / INT4 keys also: qz, the fp16 pairs of q * 2^-e in the A-fragment order of the
  // key-bias mma, [rows / 8][32 lanes][qz_stride] words (lane (g, i): row 8 nt + g, its D/8 channel
  // pairs as D/32 quads, 4 words of padding so a quarter-warp's 16-byte loads hit distinct banks).
  static constexpr int qz_stride = D / 8 + 4;
  static constexpr size_t qs_bytes = size_t(rows) * D * 4;
  static constexpr size_t qz_bytes = size_t(rows / 8) * 32 * qz_stride * 4;
  // consts: the two quads of key offsets (mma A operands the loop reuses), read back from shared
  // memory: ptxas then copies them from uniform registers instead of rebuilding the immediates
  // before every mma (~20 fewer instructions per INT2 macro-iteration with three quads).
  static constexpr size_t consts_offset = align16(qs_bytes + qz_bytes + size_t(rows) * 4);
  static constexpr size_t q_bytes = (consts_offset + 32 + 127) / 128 * 128;  // the rings start 128-byte aligned
  static constexpr size_t ring_bytes = size_t(kDecodeWarps) * stages * Tile::bytes;
  static constexpr size_t red_bytes = size_t(kDecodeWarps) * rows * (D + 2) * 4;
  static constexpr size_t bytes = q_bytes + (ring_bytes > red_bytes ? ring_bytes : red_bytes);
};

// Policy: a DecodePolicy (decode/policy.hpp): the CTAs per multiprocessor each form is compiled
// for, the tiles of a softmax step.
template <class Cfg, int NT, class Policy>
__global__ void __launch_bounds__(kDecodeWarps * 32, NT == 1 ? Policy::kMinCtas : Policy::kMinCtasWide) KVQ_HIDDEN
    decode_records_kernel(CacheView<typename Cfg::dtype> v, AttentionBatch<typename Cfg::dtype> a, DecodePlan plan,
                          DecodeWorkspace ws, uint32_t* flags) {
  using T = typename Cfg::dtype;
  using Tile = RecordTile<Cfg>;
  using L = RecordsSmem<Cfg, NT>;
  constexpr int D = Cfg::head_dim, P = Cfg::page, ROWS = 8 * NT, KS = D / 16, MT = D / 16, S = L::stages;
  constexpr int TPP = P / 16;  // tiles per page
  static_assert(Policy::kStep == 1 || Policy::kStep == 2, "a step of 1 or 2 tiles");
  // Its own name: an extern __shared__ array is one symbol per translation unit, and the prefill
  // kernel's is 16-byte aligned. 128: q_bytes is a multiple of 128, so the rings start on a
  // 128-byte line, and so does every stage where Tile::bytes is a multiple of 128 (all formats at
  // D 128): a 512-byte cp.async row then fills 4 lines, not 5 (rings off a 128-byte line made
  // "none" ~17 % slower, measured on an H200).
  extern __shared__ __align__(128) uint8_t records_smem[];
  uint8_t* const smem = records_smem;
  float* qs = reinterpret_cast<float*>(smem);                       // [ROWS][D]
  uint32_t* qz = reinterpret_cast<uint32_t*>(smem + L::qs_bytes);    // [NT][32][qz_stride]
  float* row_down = reinterpret_cast<float*>(smem + L::qs_bytes + L::qz_bytes);
  __shared__ SeqAttention s;
  __shared__ int bad, bad_page;
  __shared__ int first_step_sinks[kDecodeWarps];  // sink_rel of each warp, for the single-row-tile loop

  // The tail kernel (independent of this one) may take the room this grid leaves. This grid is
  // itself the transition kernel's dependent: every path waits for it (wait_prior_grids) before
  // reading a transition record or exiting.
  launch_dependents();
  const SplitCta cta = split_cta(v, a, plan, ROWS);
  const int split = cta.split, b = cta.b, group = cta.group, h = cta.h, row0 = cta.row0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, i = lane & 3;
  if (threadIdx.x == 0) bad_page = 0;
  resolve_sequence_for_cta(v, a, plan, b, P, s, bad);
  const int64_t rec_end = bad ? 0 : records_end(s);
  const int64_t start = int64_t(split) * plan.split_tokens;
  const int64_t end = rec_end < start + plan.split_tokens ? rec_end : start + plan.split_tokens;
  if (bad) {
    wait_prior_grids();  // the transition grid has cleared the status word
    if (threadIdx.x == 0) reject_sequence(ws, b, flags);
    return;
  }
  const int rows = group * s.q_len;
  if (start >= end || row0 >= rows) {  // the merge reads only the splits that hold tokens
    wait_prior_grids();
    return;
  }

  const uint8_t* transition = ws.transition + record_offset(int64_t(b) * plan.transition_pages, 0, v.num_kv_heads, Cfg::record_bytes);

  // The query rows' loads go first, so that their round trip overlaps the block-table read's and
  // the first copies' (the queries are an input: no wait for the transition grid); they are
  // stored to shared memory once the copies are issued.
  QueryRowRegs<T, ROWS, D> qv;
  load_query_rows(qv, a, s.q0, h, group, row0, rows);

  // ---- the warp's tiles ----
  // The warp's pages are pages 0, 4, 8, ... of the split counted from `base` (its first token);
  // tile n is tile n % TPP of the warp's page n / TPP. Offsets from base fit 32 bits (a split is
  // below 2^31 tokens), so the loop does no 64-bit arithmetic except once per page.
  // The loop runs in macro-iterations of U = S tiles, fully unrolled, so a tile's ring slot and,
  // when a macro-iteration covers whole pages (U >= TPP), its place in the page are compile-time
  // constants: every copy address is a register plus an immediate. Within a macro-iteration the
  // tiles go in steps of W (2 when the ring has 4 stages): one online-softmax update per step.
  constexpr int U = S, W = (S == 4 && TPP >= 2) ? Policy::kStep : 1;
  constexpr int SPM = U / W;                    // steps per macro-iteration (2 or 4)
  // The loop's form: software-pipelined by one step in the two-row-tile kernel (2 CTAs, 8 warps a
  // multiprocessor: a warp's own independent work is what hides its latencies), one step after the
  // other in the single-row-tile kernel (16 warps a multiprocessor hide them; the pipelined form
  // costs ~6 % more instructions there and measured slower on an H100: docs/PERF_NOTES.md).
  constexpr bool kPipelined = NT > 1;
  constexpr int NPM = U >= TPP ? U / TPP : 1;  // pages per macro-iteration
  constexpr int MPP = U >= TPP ? 1 : TPP / U;  // macro-iterations per page
  const int64_t base = (start / P + warp) * P;
  const int rel_end = end > base ? int(end - base) : 0;
  // Attention sinks (token_source.hpp): tokens [0, min(sinks, records_end)) are never read from a
  // record; the tail kernel serves them (sink buffer or ring rows). They lie in the first tile of
  // the warp whose tiles start at token 0 (warp 0 of split 0; sinks < page and <= 16), which masks
  // them in its first step only (step_scores' sink_lim): 0 for every other warp and every view
  // without sinks.
  const int sink_rel = base == 0 ? int(v.sinks < end ? v.sinks : end) : 0;
  // The single-row-tile loop reads it at its first step from shared memory: held in a register
  // across that loop, it made ptxas spill more there (fp16 INT2 at D 128).
  if (!kPipelined && lane == 0) first_step_sinks[warp] = sink_rel;
  int ntiles = 0, npages = 0;
  if (rel_end > 0) {
    const int kmax = (rel_end - 1) / P / 4;  // the warp's last page
    const int left = rel_end - 4 * kmax * P;
    ntiles = kmax * TPP + ((left < P ? left : P) + 15) / 16;
    npages = kmax + 1;
  }
  // Record (+ 16 * lane) of the warp's page kp (page base / P + 4 kp of the sequence): record
  // (page, h) of a pool lies at pool + h * record_bytes + page * stride. The warp computes these
  // addresses 32 pages at a time, lane k the record of page 32 c + k (one coalesced block-table
  // read, the 64-bit arithmetic once per 32 pages), and a page turn takes its address from lane
  // kp % 32 by a shuffle. Past the warp's last page: its last page again (copied into a stage the
  // loop never reads, so the copy path has no branch; the bytes come from L2). The block-table
  // entries are checked here, where they are read (no check of the whole split in front of the
  // first copies, one round trip fewer): a page id outside the pool is replaced by page 0, so
  // nothing is read out of bounds, and marks the CTA, which then rejects its sequence instead of
  // writing its partial state.
  const int64_t stride = int64_t(v.num_kv_heads) * int64_t(Cfg::record_bytes);
  const int64_t page0 = base / P, cold_pages = s.cold / P;
  const int32_t* bt_row = v.block_table + int64_t(b) * v.max_pages_per_seq + page0;
  const int cold_rel = cold_pages - page0 < int64_t(4) * npages ? int(cold_pages - page0) : 4 * npages;  // may be < 0
  const uint8_t* const cold_h = v.cold + int64_t(h) * int64_t(Cfg::record_bytes);
  const uint8_t* const trans_h = transition + int64_t(h) * int64_t(Cfg::record_bytes);
  unsigned long long lane_record = 0;  // record of page 32 * record_chunk + lane (clamped to the last)
  int record_chunk = -1;
  auto page_record = [&](int kp) -> const uint8_t* {
    kp = kp < npages ? kp : npages - 1;
    if (kp / 32 != record_chunk) {  // warp-uniform: once per 32 pages
      record_chunk = kp / 32;
      const int kl = 32 * record_chunk + lane, rel = 4 * (kl < npages ? kl : npages - 1);
      const int32_t id = rel < cold_rel ? bt_row[rel] : 0;
      const bool in_pool = page_in_pool(v, id);
      const uint8_t* r = rel < cold_rel ? cold_h + int64_t(in_pool ? id : 0) * stride : trans_h + (rel + page0 - cold_pages) * stride;
      lane_record = reinterpret_cast<unsigned long long>(r);
      if (__any_sync(0xffffffffu, !in_pool) && lane == 0) bad_page = 1;
    }
    return reinterpret_cast<const uint8_t*>(__shfl_sync(0xffffffffu, lane_record, kp % 32)) + 16 * lane;
  };
  // Records of macro-iteration mm's pages.
  auto macro_records = [&](int mm, const uint8_t* (&r)[NPM]) {
    KVQ_UNROLL
    for (int q = 0; q < NPM; ++q) r[q] = page_record(U >= TPP ? mm * NPM + q : mm / MPP);
  };
  // Tile-in-page of tile t of macro-iteration mm (a constant when U >= TPP).
  auto tile_in_page = [&](int mm, int t) { return U >= TPP ? t % TPP : (mm % MPP) * U + t; };
  uint8_t* ring = smem + L::q_bytes + size_t(warp) * S * Tile::bytes;
  const uint32_t ring_lane = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + 16 * lane;
  // Copies of the W tiles at positions t .. t + W - 1 of macro-iteration mm. The pipelined loop
  // refills a step's key part and its value part as two cp.async groups (kKeys, kValues); the
  // other loop refills whole tiles, one group a tile (kTiles).
  enum { kKeys, kValues, kTiles };
  auto issue = [&](int part, const uint8_t* const (&r)[NPM], int mm, int t) {
    KVQ_UNROLL
    for (int w = 0; w < W; ++w) {
      const uint32_t dst = ring_lane + (t + w) * Tile::bytes;
      const uint8_t* rec = r[U >= TPP ? (t + w) / TPP : 0];
      const int t0 = 16 * tile_in_page(mm, t + w);
      if (part != kValues) Tile::copy_keys(dst, rec, t0, lane);
      if (part != kKeys) Tile::copy_values(dst, rec, t0, lane);
      if (part == kTiles) cp_async_commit();
    }
    if (part != kTiles) cp_async_commit();
  };

  // The ring's first steps are in flight while the queries are stored (the ring does not overlap
  // the query area). A split that reaches the pages turning cold waits for the transition grid
  // first; the others wait before the loop (every path waits before exiting).
  const uint8_t* rec_cur[NPM];
  const uint8_t* rec_next[NPM];
  // The step S - W tiles after the one at position t of macro-iteration mm (SPM - 1 steps ahead):
  // position t - W of the next macro-iteration, or U - W of this one.
  auto issue_ahead = [&](int part, int mm, int t) {
    if (t >= W)
      issue(part, rec_next, mm + 1, t - W);
    else
      issue(part, rec_cur, mm, U - W + t);
  };
  if (end > s.cold) wait_prior_grids();  // the transition records are written
  if (npages > 0) {  // else the warp has no tiles (no copies, no loop)
    macro_records(0, rec_cur);
    KVQ_UNROLL
    for (int t = 0; t < U - W; t += W) {
      if constexpr (kPipelined)
        issue(kKeys, rec_cur, 0, t), issue(kValues, rec_cur, 0, t);
      else
        issue(kTiles, rec_cur, 0, t);
    }
  }

  store_query_rows(qs, qv);
  __syncthreads();

  // Query operand: raw ("none" keys), q 2^-e in fp16 (INT8 keys) or, for INT2 / INT4 keys, q * scale
  // in fp16 per key group: Q'' = (q * 2^-e) * scale, with the row's max |q| * 2^-e in [0.5, 1), so
  // Q'' never exceeds the largest fp16 scale; then S = 2^e ((offset + code) . Q'' + zero . (q 2^-e) - offset . Q'').
  using KMma = typename Tile::KMma;
  constexpr int QZ = L::qz_stride;
  // fp16 models, INT2/INT4 keys: Q'' = hi + lo (two fp16 parts; the key mma runs on both), so the
  // query operand carries no rounding beyond fp16's q (a single fp16 Q'' moves every logit of a key
  // group by the same per-channel relative error, which the naive fp16 attention does not have).
  constexpr bool KSPLIT = Tile::K::group_scales && std::is_same_v<T, fp16>;
  uint32_t qb[NT][KS][2], qlo[NT][KSPLIT ? KS : 1][2];
  float bias[NT][2];
  if constexpr (Tile::k_scaled_query) {
    for (int r = warp; r < ROWS; r += kDecodeWarps) {
      float mx = 0.0f;
      for (int c = lane; c < D; c += 32) mx = fmaxf(mx, fabsf(qs[r * D + c]));
      KVQ_UNROLL
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      int ex = 0;
      frexpf(mx, &ex);
      if (!(mx > 0.0f && mx < INFINITY)) ex = 0;
      const float up = ldexpf(1.0f, -ex);
      // qz in fragment order (L::qz_bytes): lane (r % 8, ii)'s quad kp = its pairs 4kp, 4kp+2, 4kp+1, 4kp+3.
      if constexpr (Tile::K::group_scales)
        for (int x = lane; x < 4 * 2 * KS; x += 32) {
          const int ii = x / (2 * KS), j = x % (2 * KS), c = Tile::k_channel(ii, j), e = j % 4;
          qz[((r / 8) * 32 + (r % 8) * 4 + ii) * QZ + 4 * (j / 4) + 2 * (e & 1) + (e >> 1)] =
              pack2<fp16>(qs[r * D + c] * up, qs[r * D + c + 1] * up);
        }
      if (lane == 0) row_down[r] = ldexpf(1.0f, ex);
    }
    __syncthreads();
  }
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    bias[nt][0] = bias[nt][1] = 0.0f;
    // Row nt * 8 + g's 2^-e, exact, where the query enters scaled but not per group (INT8 keys).
    const float up = Tile::K::scaled_query && !Tile::K::group_scales ? 1.0f / row_down[nt * 8 + g] : 1.0f;
    KVQ_UNROLL
    for (int kk = 0; kk < KS; ++kk)
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        const int c = Tile::k_channel(i, 2 * kk + hh);
        const float2 q2 = *reinterpret_cast<const float2*>(&qs[(nt * 8 + g) * D + c]);
        qb[nt][kk][hh] = pack2<KMma>(q2.x * up, q2.y * up);
      }
    if constexpr (Tile::K::constant_offset) {  // bias = offset_pair . q 2^-e (INT8: -128 2^-24): every token row the same
      constexpr uint32_t c = Tile::K::offset_pair;
      const uint32_t ka[4] = {c, c, c, c};
      float acc[4] = {};
      KVQ_UNROLL
      for (int kk = 0; kk < KS; ++kk) mma16816<fp16>(acc, ka, qb[nt][kk][0], qb[nt][kk][1]);
      bias[nt][0] = acc[0], bias[nt][1] = acc[1];
    }
  }

  // Blocked values: zz[nt] holds ZZ_B in row B of an mma accumulator; vbit: the bit of this lane's
  // first channel in a value word.
  constexpr bool VB = Tile::v_blocked;
  constexpr int NB = Tile::v_blocks;
  // m: the running max in y's units (below).
  float m[NT][2], l[NT][2], o[NT][MT][4], zz[NT][4];
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt) {
    m[nt][0] = m[nt][1] = -INFINITY;
    l[nt][0] = l[nt][1] = 0.0f;
    KVQ_UNROLL
    for (int mt = 0; mt < MT; ++mt) o[nt][mt][0] = o[nt][mt][1] = o[nt][mt][2] = o[nt][mt][3] = 0.0f;
    zz[nt][0] = zz[nt][1] = zz[nt][2] = zz[nt][3] = 0.0f;
  }
  const int vbit = VB ? Tile::v_lane_bit(g) : 0;
  uint32_t koff[2][4];  // the two quads of -offsets of the key pairs (A of the key bias)
  {
    uint32_t* cw = reinterpret_cast<uint32_t*>(smem + L::consts_offset);
    __syncthreads();  // every warp has read qs (the writes below do not overlap it, the reads after do not race)
    if (threadIdx.x < 8) cw[threadIdx.x] = Tile::k_offset_quad_word(threadIdx.x / 4, threadIdx.x % 4);
    __syncthreads();
    KVQ_UNROLL
    for (int e = 0; e < 8; ++e) koff[e / 4][e % 4] = cw[e];
  }
  // Logits in log2 units: x = S pre (pre = 2^e u softmax_scale log2(e)), or with a softcap
  // x = softcap log2(e) tanh(S pre) (pre = 2^e u softmax_scale / softcap), where S is the tile's
  // sum as computed, 2^e the row's query scale (row_down; 1 for "none" keys) and u the unit of the
  // key codes (2^24 for INT8 keys' subnormals, else 1; it joins the scalar factors first, so the
  // product overflows only where the true factor does). The online softmax runs on y = S (no
  // softcap) or y = x (softcap) and its running max m in y's units: p = exp2(y ps - m ps) with
  // ps = pre or 1, one fma a logit (ps > 0, so the max of y is the max of x). The softcap path reads
  // 2^e from shared memory where it needs it, so the loop holds one factor a row.
  const float unit = Tile::K::unit;
  const bool capped = a.softcap > 0.0f;
  const float cap_log2 = a.softcap * 1.4426950408889634f, cap_pre = capped ? unit * a.softmax_scale / a.softcap : 0.0f;
  auto row_unscale = [&](int nt, int hh) { return Tile::k_scaled_query ? row_down[nt * 8 + 2 * i + hh] : 1.0f; };
  float ps[NT][2];
  KVQ_UNROLL
  for (int nt = 0; nt < NT; ++nt)
    KVQ_UNROLL
    for (int hh = 0; hh < 2; ++hh) ps[nt][hh] = capped ? 1.0f : row_unscale(nt, hh) * (unit * a.softmax_scale * 1.4426950408889634f);
  // Key bias of a new key group (INT2/INT4 keys) and Q'' = (q 2^-e) * scale for its tiles:
  //   bias = zero . (q 2^-e) - offset . Q''
  // zero . (q 2^-e): one mma per k-step with the queries as A (rows = heads, qz quads straight from
  //   shared memory) and the zero points as B (every column the same); even k-steps accumulate in
  //   rows g, odd ones in rows g + 8 (the quad's other pairs), then a shuffle brings head 2i + hh's
  //   sum to the S^T layout. -offset . Q'': one mma per k-step with the constant offsets as A
  //   (every row the same) against Q'' as B, already in the S^T layout.
  // Both mmas take exact fp16 operands, so the bias is rounded only by the fp32 sums.
  auto group_bias = [&](const uint8_t* tile) {
    uint32_t sp[D / 8], zp[D / 8];
    Tile::load_k_param_pairs(tile + Tile::kp, i, sp);
    Tile::load_k_param_pairs(tile + Tile::kp + 2 * D, i, zp);
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      const uint4* qzl = reinterpret_cast<const uint4*>(qz + (nt * 32 + lane) * QZ);
      float ze[4] = {}, zo[4] = {}, oe[4] = {}, oo[4] = {};
      KVQ_UNROLL
      for (int kp = 0; kp < KS / 2; ++kp) {
        const uint4 x = qzl[kp];
        const uint32_t qa[4] = {x.x, x.y, x.z, x.w};  // pairs 4kp, 4kp+2 | 4kp+1, 4kp+3
        mma16816<fp16>(ze, qa, zp[4 * kp], zp[4 * kp + 1]);      // k-step 2kp: rows g
        mma16816<fp16>(zo, qa, zp[4 * kp + 2], zp[4 * kp + 3]);  // k-step 2kp+1: rows g + 8
        const uint32_t qn[4] = {qa[0], qa[2], qa[1], qa[3]};     // pairs 4kp .. 4kp+3
        KVQ_UNROLL
        for (int e = 0; e < 4; ++e) {
          uint32_t& hi = qb[nt][2 * kp + e / 2][e % 2];
          hi = hmul2<fp16>(qn[e], sp[4 * kp + e]);
          if constexpr (KSPLIT) qlo[nt][2 * kp + e / 2][e % 2] = fp16_pair_product_residual(qn[e], sp[4 * kp + e], hi);
        }
        KVQ_UNROLL
        for (int h2 = 0; h2 < 2; ++h2) {
          const int kk = 2 * kp + h2;
          const uint32_t(&ko)[4] = koff[Tile::k_offset_quad(kk)];
          mma16816<fp16>(h2 ? oo : oe, ko, qb[nt][kk][0], qb[nt][kk][1]);
          if constexpr (KSPLIT) mma16816<fp16>(h2 ? oo : oe, ko, qlo[nt][kk][0], qlo[nt][kk][1]);
        }
      }
      const float zq = ze[0] + zo[2];  // head nt * 8 + g
      bias[nt][0] = __shfl_sync(0xffffffffu, zq, 8 * i) + (oe[0] + oo[0]);
      bias[nt][1] = __shfl_sync(0xffffffffu, zq, 8 * i + 4) + (oe[1] + oo[1]);
    }
  };

  // S^T of one tile: sacc = bias + K_tile . Q''^T (INT2/INT4), (bias + K' . (q 2^-e)^T) * token scale
  // (INT8, K' the subnormal codes) or K . Q^T.
  auto tile_logits = [&](const uint8_t* tile, float (&sacc)[NT][4]) {
    float sacc2[NT][4];  // odd k-steps: two chains of KS/2 mmas
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
      for (int nt = 0; nt < NT; ++nt) {
        mma16816<KMma>(kk % 2 ? sacc2[nt] : sacc[nt], ka, qb[nt][kk][0], qb[nt][kk][1]);
        if constexpr (KSPLIT) mma16816<fp16>(kk % 2 ? sacc2[nt] : sacc[nt], ka, qlo[nt][kk][0], qlo[nt][kk][1]);
      }
    }
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      KVQ_UNROLL
      for (int c = 0; c < 4; ++c) sacc[nt][c] += sacc2[nt][c];
    if constexpr (Tile::K::token_scales) Tile::K::scale_logits(tile + Tile::kp, g, sacc);
  };

  // O^T += V_tile^T . P^T for one tile (pb: P^T as B, fp16 for blocked values).
  auto tile_values = [&](const uint8_t* tile, const uint32_t (&pb)[NT][2]) {
    if constexpr (VB) {
      typename Tile::VBlockPair v0, v1;
      Tile::load_v_blocked(tile, i, g, v0);
      Tile::load_v_blocked(tile, i + 4, g, v1);
      uint32_t pp[NT][NB][2];  // P'_B = P s_B: (row g, tokens 2i, 2i+1) and (tokens 2i+8, 2i+9)
      uint32_t s0[NB], s1[NB];
      Tile::v_block_scales(tile, i, s0);
      Tile::v_block_scales(tile, i + 4, s1);
      KVQ_UNROLL
      for (int B = 0; B < NB; ++B)
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt) pp[nt][B][0] = hmul2<fp16>(pb[nt][0], s0[B]), pp[nt][B][1] = hmul2<fp16>(pb[nt][1], s1[B]);
      KVQ_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        const uint32_t va[4] = {Tile::v_pair_blocked(v0, 2 * mt, vbit), Tile::v_pair_blocked(v0, 2 * mt + 1, vbit),
                                Tile::v_pair_blocked(v1, 2 * mt, vbit), Tile::v_pair_blocked(v1, 2 * mt + 1, vbit)};
        KVQ_UNROLL
        for (int nt = 0; nt < NT; ++nt)
          mma16816<fp16>(o[nt][mt], va, pp[nt][mt / 2][0], pp[nt][mt / 2][1]);
      }
      // Running sums ZZ_B (row B = lane g's block, its zero points).
      const uint32_t z0 = g < NB ? Tile::v_block_params(tile, i, g, 1) : 0u;
      const uint32_t z1 = g < NB ? Tile::v_block_params(tile, i + 4, g, 1) : 0u;
      const uint32_t za[4] = {z0, 0u, z1, 0u};
      KVQ_UNROLL
      for (int nt = 0; nt < NT; ++nt) mma16816<fp16>(zz[nt], za, pb[nt][0], pb[nt][1]);
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
          mma16816<T>(o[nt][mt], va, pb[nt][0], pb[nt][1]);
      }
    }
  };

  // Pipelined form (kPipelined): iteration k computes the values of step k - 1
  // and the logits of step k in one basic block (no branch between them), so the two independent
  // streams (step k's key unpacking and mma chains, step k - 1's exponentials, value unpacking and
  // mma chains) fill each other's latencies; only the rare rescale branch and the masking of a
  // ragged last tile sit between iterations. The step's state between the two halves: y (its
  // logits in y units, below) and lmx (the lane's max per row).
  float y[NT][W][2][2], lmx[NT][2];  // y: [row tile][tile][token g / g+8][row 2i + hh]

  // Logits of the step at position t of macro-iteration mm (slots t .. t + W - 1), as y before
  // the softcap; step_scores finishes them (kept apart so that the softcap's branch does not split
  // the pipelined block).
  int rel0[W];  // the step's tiles' first tokens - base
  auto step_logits = [&](int mm, int t) {
    float sacc[W][NT][4];
    KVQ_UNROLL
    for (int w = 0; w < W; ++w) {
      const uint8_t* tile = ring + (t + w) * Tile::bytes;
      const int tip = tile_in_page(mm, t + w);
      rel0[w] = 4 * P * ((mm * U + t + w) / TPP) + 16 * tip;
      if constexpr (Tile::K::group_scales)
        if (16 * tip % Tile::KQ::group == 0) group_bias(tile);
      tile_logits(tile, sacc[w]);
    }
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      KVQ_UNROLL
      for (int w = 0; w < W; ++w)
        KVQ_UNROLL
        for (int u = 0; u < 2; ++u)
          KVQ_UNROLL
          for (int hh = 0; hh < 2; ++hh) y[nt][w][u][hh] = sacc[w][nt][2 * u + hh];
  };
  // The softcap, the mask of a ragged last tile, the mask of the sink tokens (sink_lim: tokens
  // base + [0, sink_lim) of the step; a constant 0 at every call but the warp's first step) and the
  // lane's max per row of the step just computed.
  auto step_scores = [&](int sink_lim) {
    if (capped) {
      KVQ_UNROLL
      for (int nt = 0; nt < NT; ++nt)
        KVQ_UNROLL
        for (int hh = 0; hh < 2; ++hh)
          KVQ_UNROLL
          for (int w = 0; w < W; ++w)
            KVQ_UNROLL
            for (int u = 0; u < 2; ++u) y[nt][w][u][hh] = cap_log2 * tanhf(y[nt][w][u][hh] * (row_unscale(nt, hh) * cap_pre));
    }
    // Masks the logits of the step's tokens rel0[w] + g + 8u for which masked(token) holds.
    const auto mask_tokens = [&](auto masked) {
      KVQ_UNROLL
      for (int nt = 0; nt < NT; ++nt)
        KVQ_UNROLL
        for (int w = 0; w < W; ++w)
          KVQ_UNROLL
          for (int u = 0; u < 2; ++u)
            if (masked(rel0[w] + g + 8 * u)) y[nt][w][u][0] = y[nt][w][u][1] = -INFINITY;
    };
    // Tokens past rel_end (only in the warp's last tile, and only where records_end is not a
    // multiple of 16: R below q_len) and the sink tokens below sink_lim are masked, each in a
    // warp-uniform branch. The two stay two branches: one branch testing both (one masked loop)
    // changed the scheduling of the whole 8-row loop and added 3 instructions to one of its
    // paths (sm_90a SASS), with no GPU run to judge it.
    if (rel0[W - 1] + 16 > rel_end) {
      // Pins this as a branch (ptxas 13.0 keeps it one anyway): if-converted, its selects
      // would run every step.
      asm volatile("");
      mask_tokens([&](int tok) { return tok >= rel_end; });
    }
    if (sink_lim > 0) {
      asm volatile("");
      mask_tokens([&](int tok) { return tok < sink_lim; });
    }
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        lmx[nt][hh] = -INFINITY;
        KVQ_UNROLL
        for (int w = 0; w < W; ++w)
          KVQ_UNROLL
          for (int u = 0; u < 2; ++u) lmx[nt][hh] = fmaxf(lmx[nt][hh], y[nt][w][u][hh]);
      }
  };

  // ---- online softmax over a step's 16 W tokens ----
  // The row max is reduced across the 8 lanes of a row (three dependent shuffles) only when some
  // lane holds a logit above the running max (one vote): otherwise the max does not move and the
  // probabilities are exp2(y ps - m ps) with the running max, as the reduction would have given.
  // The running max moves rarely after a split's first steps, so most steps skip the shuffle chain
  // (run at every step, those shuffles were the loop's most stalled instructions on an H200). The
  // running sum l rounds l * corr and + sum apart at the steps where the max moves. O holds the
  // previous steps' values when this runs.
  auto step_rescale = [&]() {
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      if (__any_sync(0xffffffffu, lmx[nt][0] > m[nt][0] || lmx[nt][1] > m[nt][1])) {  // a running max moves
        float cr[2];
        KVQ_UNROLL
        for (int hh = 0; hh < 2; ++hh) {
          float mx = lmx[nt][hh];
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
          const float m_new = fmaxf(m[nt][hh], mx);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          cr[hh] = exp2_approx((m[nt][hh] - m_use) * ps[nt][hh]);
          l[nt][hh] *= cr[hh];
          m[nt][hh] = m_new;
        }
        KVQ_UNROLL
        for (int mt = 0; mt < MT; ++mt) {
          o[nt][mt][0] *= cr[0], o[nt][mt][2] *= cr[0];
          o[nt][mt][1] *= cr[1], o[nt][mt][3] *= cr[1];
        }
        if constexpr (VB) zz[nt][0] *= cr[0], zz[nt][1] *= cr[1];
      }
    }
  };

  // Probabilities of the step whose tiles are in slots t .. t + W - 1 (P^T as the B operand of the
  // value mma), then O^T += V^T P^T over its tiles.
  using PT = std::conditional_t<VB, fp16, T>;
  auto step_values = [&](int t, const float (&yv)[NT][W][2][2]) {
    uint32_t pb[W][NT][2];
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      float p[W][2][2];
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        const float mneg = -(m[nt][hh] == -INFINITY ? 0.0f : m[nt][hh]) * ps[nt][hh];
        float sum = 0.0f;
        KVQ_UNROLL
        for (int w = 0; w < W; ++w)
          KVQ_UNROLL
          for (int u = 0; u < 2; ++u) p[w][u][hh] = exp2_approx(fmaf(yv[nt][w][u][hh], ps[nt][hh], mneg)), sum += p[w][u][hh];
        l[nt][hh] += sum;
      }
      KVQ_UNROLL
      for (int w = 0; w < W; ++w) {
        pb[w][nt][0] = movmatrix_trans(pack2<PT>(p[w][0][0], p[w][0][1]));  // tokens 0-7:  (row g, tokens 2i, 2i+1)
        pb[w][nt][1] = movmatrix_trans(pack2<PT>(p[w][1][0], p[w][1][1]));  // tokens 8-15
      }
    }
    KVQ_UNROLL
    for (int w = 0; w < W; ++w) tile_values(ring + (t + w) * Tile::bytes, pb[w]);
  };

  wait_prior_grids();  // (every path waits for the transition grid before exiting)
  if constexpr (kPipelined) {
    // Iteration k (position t of macro-iteration mm, k = mm SPM + t / W) of k = 0 .. nsteps: refill
    // the keys of the slots step k - 1 used with those of step k + SPM - 1 (their keys were read in
    // iteration k - 1), wait for step k's keys and step k - 1's values, then step k - 1's values and
    // step k's logits, then refill the values of those slots. cp.async groups go out as K(k + SPM -
    // 1) at the start and V(k + SPM - 1) at the end of iteration k, after the prologue's K(0) V(0) ..
    // K(SPM - 2) V(SPM - 2); so at iteration k's wait the groups issued after K(k) and V(k - 1) are
    // V(k), K(k + 1) .. V(k + SPM - 2), K(k + SPM - 1): 2 (SPM - 1) of them may still be in flight.
    // Steps past the end refill from the warp's last page (page_record), so every iteration issues
    // its two groups and the count holds.
    const int nsteps = (ntiles + W - 1) / W;
    const int niter = nsteps > 0 ? (nsteps + SPM) / SPM : 0;  // macro-iterations covering k = 0 .. nsteps
    if (nsteps > 0) {    // iteration 0: step 0's logits only
      issue_ahead(kKeys, 0, 0);
      cp_async_wait<2 * (SPM - 1)>();
      __syncwarp();
      step_logits(0, 0);
      step_scores(sink_rel);
      __syncwarp();
      issue_ahead(kValues, 0, 0);
    }
    for (int mm = 0; mm < niter; ++mm) {
      macro_records(mm + 1, rec_next);
      KVQ_UNROLL
      for (int t = 0; t < U; t += W) {
        const int k = mm * SPM + t / W;
        if (k >= 1 && k <= nsteps) {
          const int tp = t >= W ? t - W : U - W;  // the slots of step k - 1
          issue_ahead(kKeys, mm, t);
          cp_async_wait<2 * (SPM - 1)>();
          __syncwarp();
          step_rescale();
          if (k < nsteps) {
            float yp[NT][W][2][2];  // step k - 1's logits (step_logits overwrites y)
            KVQ_UNROLL
            for (int e = 0; e < NT * W * 4; ++e) (&yp[0][0][0][0])[e] = (&y[0][0][0][0])[e];
            step_logits(mm, t);
            step_values(tp, yp);
            step_scores(0);
          } else {
            // Keeps the two arms apart: hoisted in front of the branch, their common start (step
            // k - 1's exponentials) would leave the pipelined block.
            asm volatile("");
            step_values(tp, y);
          }
          __syncwarp();
          issue_ahead(kValues, mm, t);
        }
      }
      KVQ_UNROLL
      for (int q = 0; q < NPM; ++q) rec_cur[q] = rec_next[q];
    }
  } else {
    // One step after the other: refill the slots the previous step read with the tiles S - W ahead
    // (issue_ahead: one cp.async group a tile), wait for this step's tiles, then its logits,
    // scores and values.
    const int nmacro = (ntiles + U - 1) / U;
    for (int mm = 0; mm < nmacro; ++mm) {
      macro_records(mm + 1, rec_next);
      KVQ_UNROLL
      for (int t = 0; t < U; t += W) {
        issue_ahead(kTiles, mm, t);
        cp_async_wait<S - W>();
        __syncwarp();
        if (mm * U + t < ntiles) {
          step_logits(mm, t);
          // t == 0: a uniform branch a macro-iteration (the warp's sink_rel published before the loop)
          step_scores(mm == 0 && t == 0 ? reinterpret_cast<volatile int*>(first_step_sinks)[threadIdx.x / 32] : 0);
          step_rescale();
          step_values(t, y);
        }
        __syncwarp();
      }
      KVQ_UNROLL
      for (int q = 0; q < NPM; ++q) rec_cur[q] = rec_next[q];
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring: the epilogue reuses the space
  if (bad_page) {  // a page id outside the pool (the same for the whole CTA after the barrier)
    if (threadIdx.x == 0) reject_sequence(ws, b, flags);
    return;
  }

  if constexpr (VB) {  // O = 2^(24 - q) A + ZZ_B (ZZ_B from lane (B, i))
    KVQ_UNROLL
    for (int nt = 0; nt < NT; ++nt)
      KVQ_UNROLL
      for (int hh = 0; hh < 2; ++hh)
        KVQ_UNROLL
        for (int B = 0; B < NB; ++B) {
          const float zb = __shfl_sync(0xffffffffu, zz[nt][hh], 4 * B + i);
          KVQ_UNROLL
          for (int mt = 2 * B; mt < 2 * B + 2; ++mt) {
            o[nt][mt][hh] = fmaf(o[nt][mt][hh], Tile::v_code_unit(2 * mt), zb);
            o[nt][mt][2 + hh] = fmaf(o[nt][mt][2 + hh], Tile::v_code_unit(2 * mt + 1), zb);
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
        red_m[warp * ROWS + r] = m[nt][hh] * ps[nt][hh] * 0.6931471805599453f;  // natural-log units, as the merge expects
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
                            packed_query_row(s.q0, rg, group, a.num_q_heads, h));
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

// kvq/prefill/wgmma_softmax.cuh - the online softmax of the Hopper prefill kernel
// (prefill_ws_kernel.cuh) on one S tile of a warpgroup's accumulators.
//
// A thread holds two query rows of its warp (g and g + 8, numeric/wgmma.cuh's accumulator layout):
// of an S tile (64 rows x BN keys) s[4 nb + e] is key 8 nb + 2 i + (e & 1) of row g (e < 2) or g + 8;
// of O (64 x D) o[4 nb + e] likewise with channels for keys. The softmax runs in the log2 domain
// with raw logits (the max commutes with the positive scale; a probability is one FFMA and one
// EX2); a softcap maps the logits to log2 units first. Three steps, so that a kernel can put the
// wait for an in-flight O product between them:
//   softmax_probabilities: causal mask, running max, correction factors, probabilities in place;
//   rescale_rows:          O *= the correction of its row (only when some row's max moved);
//   pack_probabilities:    P in the model dtype in the A-operand layout, and the row sums of the
//                          probabilities as rounded (the P . V product uses those; prefill_kernel.cuh).
#pragma once

#include <cmath>
#include <cstdint>

#include "kvq/attention/token_source.hpp"
#include "kvq/numeric/mma.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// What the softmax of one warpgroup needs besides the tile: the scale, the optional softcap, and
// for the causal mask the positions of this thread's two rows and of the warpgroup's first row.
struct WgmmaSoftmaxRows {
  float scale_log2;  // softmax scale x log2(e) (> 0)
  float cap_pre, cap_log2;  // softmax scale / softcap, softcap x log2(e); capped when cap_log2 > 0
  int64_t pos[2];    // positions of rows g and g + 8
  int64_t wg_first;  // position of the warpgroup's first row (the smallest)
  int i;             // lane % 4
};

// The rows of the thread whose warp's first CTA row is wr0 (g and g + 8 of it; the warpgroup's
// first row is wg_row0): row rg is query token rg / group, at position len + rg / group; padding
// rows (rg >= rows) take the last real row's position (finite softmax, never stored).
KVQ_DEVICE WgmmaSoftmaxRows softmax_rows(float softmax_scale, float softcap, int64_t len, int rows, int group, int wg_row0,
                                         int wr0, int g, int i) {
  auto pos_of = [&](int rg) { return len + (rg < rows ? rg : rows - 1) / group; };
  const bool capped = softcap > 0.0f;
  return WgmmaSoftmaxRows{softmax_scale * 1.4426950408889634f,  // > 0 (check_attention_run)
                          capped ? softmax_scale / softcap : 0.0f, capped ? softcap * 1.4426950408889634f : 0.0f,
                          {pos_of(wr0 + g), pos_of(wr0 + g + 8)}, pos_of(wg_row0), i};
}

// softmax_probabilities after the soft cap: mask, row max, correction, exponentials; sc is the
// factor from the logits to log2 units (1 where the cap already applied it).
template <int BN>
KVQ_DEVICE void masked_exponentials(float (&s)[BN / 2], const WgmmaSoftmaxRows& r, int64_t t0, float (&m)[2], float (&l)[2],
                             float (&corr)[2], const float sc) {
  constexpr int NB = BN / 8;
  if (t0 + BN - 1 > r.wg_first) {  // some key of the tile is past some row's position
    // Keys 8 nb + (e & 1) (+ t0 + 2i) past a row's position are masked: 32-bit limits per row.
    int lim[2];
    KVQ_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      const int64_t d = r.pos[hh] - t0 - 2 * r.i;
      lim[hh] = d < -1 ? -1 : d > BN ? BN : int(d);
    }
    KVQ_UNROLL
    for (int nb = 0; nb < NB; ++nb)
      KVQ_UNROLL
      for (int e = 0; e < 4; ++e)
        if (8 * nb + (e & 1) > lim[e >> 1]) s[4 * nb + e] = -INFINITY;
  }
  float mx[2] = {-INFINITY, -INFINITY};
  KVQ_UNROLL
  for (int nb = 0; nb < NB; ++nb)
    KVQ_UNROLL
    for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * nb + e]);
  KVQ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
    mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
    const float m_new = fmaxf(m[hh], mx[hh] * sc);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    corr[hh] = exp2_approx(m[hh] - m_use);
    m[hh] = m_new;
    l[hh] *= corr[hh];
    mx[hh] = m_use;
  }
  KVQ_UNROLL
  for (int x = 0; x < BN / 2; ++x) s[x] = exp2_approx(fmaf(s[x], sc, -mx[(x >> 1) & 1]));
}

// Running max m (log2 units) and sum l of the thread's two rows; corr gets the factor by which
// the rows' earlier O and l shrink (l is already scaled here). s: the tile's logits -> probabilities.
// masked_exponentials is called inside each arm of the soft-cap branch, not after it: when the body
// followed the branch, ptxas hoisted the consumer loop's next wgmma wait (wgmma_wait<0>, for O)
// above the whole softmax, which then ran after P . V instead of under it (every MUFU.EX2 of the
// loop came after its WARPGROUP.DEPBAR; CUDA 13.0, read from the SASS).
template <int BN>
KVQ_DEVICE void softmax_probabilities(float (&s)[BN / 2], const WgmmaSoftmaxRows& r, int64_t t0, float (&m)[2],
                                      float (&l)[2], float (&corr)[2]) {
  if (r.cap_log2 > 0.0f) {
    KVQ_UNROLL
    for (int x = 0; x < BN / 2; ++x) s[x] = r.cap_log2 * tanhf(s[x] * r.cap_pre);
    masked_exponentials<BN>(s, r, t0, m, l, corr, 1.0f);
  } else {
    masked_exponentials<BN>(s, r, t0, m, l, corr, r.scale_log2);
  }
}

// O *= corr per row, skipped (warp-uniformly) when no row of the warp moved its max.
template <int D>
KVQ_DEVICE void rescale_rows(float (&o)[D / 2], const float (&corr)[2]) {
  if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
    KVQ_UNROLL
    for (int nb = 0; nb < D / 8; ++nb) {
      o[4 * nb] *= corr[0], o[4 * nb + 1] *= corr[0];
      o[4 * nb + 2] *= corr[1], o[4 * nb + 3] *= corr[1];
    }
  }
}

// P in the A layout (k-step kt = keys 16 kt .. 16 kt + 15) and l += the rounded probabilities.
template <class T, int BN>
KVQ_DEVICE void pack_probabilities(const float (&p)[BN / 2], uint32_t (&pa)[BN / 16][4], float (&l)[2]) {
  KVQ_UNROLL
  for (int nb = 0; nb < BN / 8; ++nb) {
    pa[nb / 2][2 * (nb & 1)] = pack2<T>(p[4 * nb], p[4 * nb + 1]);          // row g
    pa[nb / 2][2 * (nb & 1) + 1] = pack2<T>(p[4 * nb + 2], p[4 * nb + 3]);  // row g + 8
    l[0] += pair_sum<T>(pa[nb / 2][2 * (nb & 1)]);
    l[1] += pair_sum<T>(pa[nb / 2][2 * (nb & 1) + 1]);
  }
}

// The thread's two rows of O normalised and stored (rows past `rows` are padding): row rg of the
// CTA is query token rg / group of the sequence (first row q0), head h * group + rg % group.
template <class T, int D>
KVQ_DEVICE void store_rows(const float (&o)[D / 2], const float (&l)[2], int rg0, int rows, int group, int64_t q0,
                           int num_q_heads, int h, int i, T* out) {
  KVQ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    float lt = l[hh];
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    const int rg = rg0 + 8 * hh;
    if (rg >= rows) continue;
    const float inv = 1.0f / lt;
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + packed_query_row(q0, rg, group, num_q_heads, h) * D);
    KVQ_UNROLL
    for (int nb = 0; nb < D / 8; ++nb) dst[4 * nb + i] = pack2<T>(o[4 * nb + 2 * hh] * inv, o[4 * nb + 2 * hh + 1] * inv);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

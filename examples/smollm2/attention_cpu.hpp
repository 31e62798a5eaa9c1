// attention_cpu.hpp - the decode path's attention kernel (see kv_cache.hpp): one KV head and its
// group of query heads, fp32, over two copies of the sequence's K/V -- the values the cache
// yields for cold tokens (dequantized pages) and the unquantized ones -- with a cold boundary
// per query.
#pragma once

#include <cstdint>

#include "gemm.hpp"

namespace smollm2 {

constexpr int kHeadDim = 64;

// K in tiles of 16 tokens, each tile transposed ([cap/16][64][16]: one tile is 4 KiB, read
// sequentially), V row-major ([cap][64]); cap is a multiple of 16.
struct HeadMirror {
  float* kq_t = nullptr;  // cold: dequantized from the cache
  float* kr_t = nullptr;  // unquantized (bf16 values)
  float* vq = nullptr;
  float* vr = nullptr;
  int64_t cap = 0;
};
inline size_t k_tile_index(int64_t t, int d) { return size_t(t / 16) * 1024 + size_t(d) * 16 + size_t(t % 16); }

// n queries at positions len .. len+n-1; query i reads keys [0, cold[i]) from kq/vq and
// [cold[i], len+i] from kr/vr. q: [n] rows of `group` heads x 64, row stride q_stride, already
// multiplied by the softmax scale. out: same layout as q (stride out_stride). group 1..4.
void attend_head(const HeadMirror& m, int64_t len, int n, const int64_t* cold, int group, const float* q,
                 int64_t q_stride, float* out, int64_t out_stride);

}  // namespace smollm2

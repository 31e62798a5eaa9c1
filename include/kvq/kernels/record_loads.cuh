// kvq/kernels/record_loads.cuh - the copies and shared-memory loads of a decode record tile
// (decode/record_tile.cuh) that its operand codecs (record_codec.cuh) share: a part's 16-byte
// cp.async chunks spread over a warp's lanes, and a lane's words of a staged row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/core/platform.hpp"
#include "kvq/numeric/mma.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Lane `lane`'s share of a part's 16-byte copies: chunks lane, lane + 32, ... `dst` (a
// shared-memory address) and `src` are already advanced by 16 * lane.
template <int Bytes>
KVQ_DEVICE void copy_part(uint32_t dst, const uint8_t* src, int lane) {
  static_assert(Bytes % 16 == 0, "16-byte chunks");
  constexpr int n = Bytes / 16;
  KVQ_UNROLL
  for (int c = 0; c < n / 32; ++c) cp_async16(dst + 512 * c, src + 512 * c);
  if constexpr (n % 32 != 0)
    if (lane < n % 32) cp_async16(dst + 512 * (n / 32), src + 512 * (n / 32));
}

template <int N>
KVQ_DEVICE void load_words(const uint8_t* p, uint32_t (&w)[N]) {
  if constexpr (N % 4 == 0) {
    KVQ_UNROLL
    for (int m = 0; m < N / 4; ++m) {
      const uint4 x = *reinterpret_cast<const uint4*>(p + 16 * m);
      w[4 * m] = x.x, w[4 * m + 1] = x.y, w[4 * m + 2] = x.z, w[4 * m + 3] = x.w;
    }
  } else if constexpr (N == 2) {
    const uint2 x = *reinterpret_cast<const uint2*>(p);
    w[0] = x.x, w[1] = x.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

// The `Share` bytes of a row that lane index `x` of `Lanes` reads: contiguous when at most 16,
// else 16-byte chunks x, x + Lanes, ... (spreads the lanes of one load over the banks).
template <int Share, int Lanes, int N>
KVQ_DEVICE void load_share(const uint8_t* row, int x, uint32_t (&w)[N]) {
  static_assert(N * 4 == Share, "one word per 4 bytes of the share");
  if constexpr (Share > 16) {
    KVQ_UNROLL
    for (int m = 0; m < N / 4; ++m) {
      uint32_t c[4];
      load_words(row + (x + Lanes * m) * 16, c);
      KVQ_UNROLL
      for (int e = 0; e < 4; ++e) w[4 * m + e] = c[e];
    }
  } else {
    load_words(row + x * Share, w);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

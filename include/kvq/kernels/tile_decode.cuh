// kvq/kernels/tile_decode.cuh - the second step of filling a prefill K/V tile (kv_tile.cuh): the
// record tokens of quantized roles, landed in the tile's raw slot as staged pages
// (staged_page.hpp), dequantized into the tile's k / v buffers in the model dtype (panel layout,
// kv_tile.cuh) by each role's tile codec (tile_codec.cuh): a full tile by the codec's fast path
// where it fits, any other by its general path; both give the host reference's values bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kvq/cache/config.hpp"
#include "kvq/kernels/kv_tile.cuh"
#include "kvq/kernels/tile_chunks.cuh"
#include "kvq/kernels/tile_codec.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Role R's fast path for full tiles of format Q (TileCodec<Q>::Full).
template <class Tile, class Q, Role R, int NT>
using FullTile = typename TileCodec<Q>::template Full<Tile, R, NT>;

// Dequantizes the record tokens of tile [t0, t0 + BN) of the quantized roles from raw into k / v,
// with NT threads (this one is `tid` of them): a full tile by the fast path where the role fits it,
// else by the general path.
template <class Cfg, int BN_, int NT>
KVQ_DEVICE void decode_tile(const TileSource<typename Cfg::dtype>& src, int64_t t0, uint8_t* k, uint8_t* v, const uint8_t* raw,
                            unsigned tid) {
  using Tile = KvTile<Cfg, BN_>;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  constexpr int BN = Tile::BN;
  static_assert(Tile::SP % 2 == 0, "staged pages hold whole token pairs");
  if constexpr (Tile::k_staged || Tile::v_staged) {
    const int64_t rows64 = src.rec_end - t0;
    const int rows = rows64 <= 0 ? 0 : rows64 >= BN ? BN : int(rows64);
    using KC = TileCodec<KQ>;
    using VC = TileCodec<VQ>;
    using FK = FullTile<Tile, KQ, Role::kKey, NT>;
    using FV = FullTile<Tile, VQ, Role::kValue, NT>;
    if constexpr (FK::fits || FV::fits) {
      if (rows == BN) {
        FK fk;
        FV fv;
        if constexpr (FK::fits) fk.load(raw, tid);
        if constexpr (FV::fits) fv.load(raw, tid);
        if constexpr (FK::fits) fk.store(k, tid);
        else if constexpr (Tile::k_staged) KC::template decode_rows<Tile, Role::kKey, NT>(raw, rows, k, tid);
        if constexpr (FV::fits) fv.store(v, tid);
        else if constexpr (Tile::v_staged) VC::template decode_rows<Tile, Role::kValue, NT>(raw, rows, v, tid);
        return;
      }
    }
    if constexpr (Tile::k_staged) KC::template decode_rows<Tile, Role::kKey, NT>(raw, rows, k, tid);
    if constexpr (Tile::v_staged) VC::template decode_rows<Tile, Role::kValue, NT>(raw, rows, v, tid);
  }
}

// Whether paired CTAs (prefill_ws_kernel.cuh) can split tile j's decode by role: both roles are
// staged and both have the fast path, so each full record tile is one role's FullTile per CTA.
template <class Cfg, int BN_, int NT>
KVQ_HD_CONSTEXPR bool full_tiles_split_by_role() {
  using Tile = KvTile<Cfg, BN_>;
  return Tile::k_staged && Tile::v_staged && FullTile<Tile, typename Cfg::k_quant, Role::kKey, NT>::fits &&
         FullTile<Tile, typename Cfg::v_quant, Role::kValue, NT>::fits;
}

// One role of a full record tile (every one of its BN tokens a record token) from raw into dst
// (that role's buffer) and, through `out`, the partner CTA's same buffer, with NT threads: the
// other role is the partner's.
template <class Cfg, int BN_, int NT>
KVQ_DEVICE void decode_full_tile_role(Role role, uint8_t* dst, const uint8_t* raw, unsigned tid, const PairChunks& out) {
  using Tile = KvTile<Cfg, BN_>;
  static_assert(full_tiles_split_by_role<Cfg, BN_, NT>(), "both roles have the fast path");
  if (role == Role::kKey) {
    FullTile<Tile, typename Cfg::k_quant, Role::kKey, NT> f;
    f.load(raw, tid);
    f.store(dst, tid, out);
  } else {
    FullTile<Tile, typename Cfg::v_quant, Role::kValue, NT> f;
    f.load(raw, tid);
    f.store(dst, tid, out);
  }
}

}  // namespace detail
KVQ_NAMESPACE_END

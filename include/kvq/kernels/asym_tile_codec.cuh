// kvq/kernels/asym_tile_codec.cuh - TileCodec<IntAsym<Bits, G>> (tile_codec.cuh): INT2 / INT4 roles of
// a prefill tile into model-dtype rows. Fast path (a full tile): keys a thread's rows of one chunk
// with its group's parameters converted once, values a token pair's chunk from its words loaded
// once, the codes read as fp16 subnormals (subnormal_code.hpp: one AND for the codes of two
// elements, one conversion each, no I2F). General path: keys convert a chunk's parameters once per
// key group, values decode both tokens of a pair from words loaded once (codec/asym_chunk.hpp).
// Both give Codec<IntAsym>::decode_chunk's values bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kvq/codec/asym_chunk.hpp"
#include "kvq/kernels/tile_chunks.cuh"
#include "kvq/kernels/tile_codec_fwd.cuh"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Fast path of the keys: ThreadRows (a thread's rows in one key group: Q::group a multiple of
// `rows`).
template <class Tile, class Q, int NT>
struct FullTileKeys : ThreadRows<Tile, NT> {
  using Rows = ThreadRows<Tile, NT>;
  using Rows::n, Rows::rows;
  static constexpr bool fits = Rows::fits && Q::group % n == 0;
  uint32_t w[n];  // the chunk's code word of rows r0 .. r0 + rows - 1 (key_chunk_word)
  KeyChunkParams par;
  int c, r0;

  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    c = Rows::chunk(tid);
    r0 = Rows::first_row(tid);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) w[i] = key_chunk_word<Q, Tile::D>(raw + Tile::kc, r0 + i, 8 * c);
    par = key_chunk_params<Q, Tile::D>(raw + Tile::kp, r0, 8 * c);
  }
  template <class Out = LocalChunks>
  KVQ_DEVICE void store(uint8_t* k, unsigned, const Out& out = Out{}) const {
    const TileRun run = TileRun::of<Tile>(k, r0, c);  // r0 a multiple of rows, a power of two
    const KeyChunkParams sp = subnormal_key_params<Q>(par);
    KVQ_UNROLL
    for (int i = 0; i < rows; ++i) {
      float x[kDecodeChunk];
      decode_key_word_subnormal<Q>(w[i], sp, x);
      store_chunk<typename Tile::T>(run.at(i), x, out);
    }
  }
};

// Fast path of the values: item tid + i NT (i < items) is channel chunk idx % (D/8) of token pair
// idx / (D/8), its chunk inside one value group (Q::group a multiple of 8).
template <class Tile, class Q, int NT>
struct FullTileValues {
  static constexpr int CH = Tile::chunks, items = Tile::BN / 2 * CH / NT, n = items >= 1 ? items : 1;
  static constexpr int words = 2 * kDecodeChunk * Q::bits / 32;  // a chunk's words of a pair
  static constexpr bool fits = Tile::SP == Tile::BN && Tile::BN / 2 * CH % NT == 0 &&
                               items >= 1 && NT % CH == 0 && 2 * NT / CH % 8 == 0 && Q::group % kDecodeChunk == 0;
  uint32_t w[n][words];
  AsymParams par[n][2];  // of the pair's two tokens

  KVQ_DEVICE static int token(unsigned tid, int i) { return 2 * int((tid + unsigned(i * NT)) / CH); }
  KVQ_DEVICE static int chunk(unsigned tid, int i) { return int((tid + unsigned(i * NT)) % CH); }
  KVQ_DEVICE void load(const uint8_t* raw, unsigned tid) {
    constexpr int D = Tile::D;
    KVQ_UNROLL
    for (int i = 0; i < items; ++i) {
      const int t = token(tid, i), c0 = 8 * chunk(tid, i);
      const uint32_t* pw = reinterpret_cast<const uint32_t*>(raw + Tile::vc) + code_slot<Q::bits, D>(Role::kValue, t, c0).word;
      KVQ_UNROLL
      for (int j = 0; j < words; ++j) w[i][j] = pw[j];
      par[i][0] = asym_params_at<Q, Role::kValue, D, Tile::SP>(raw + Tile::vp, t, c0);
      par[i][1] = asym_params_at<Q, Role::kValue, D, Tile::SP>(raw + Tile::vp, t + 1, c0);
    }
  }
  template <class Out = LocalChunks>
  KVQ_DEVICE void store(uint8_t* v, unsigned tid, const Out& out = Out{}) const {
    // Item i's pair is 2 i NT / (D/8) rows (a multiple of 8) below item 0's, in the same chunk.
    const TileRun run = TileRun::of<Tile>(v, token(tid, 0), chunk(tid, 0));
    KVQ_UNROLL
    for (int i = 0; i < items; ++i) {
      float x[2][kDecodeChunk];
      decode_value_pair_subnormal<Q>(w[i], par[i][0], par[i][1], x);
      KVQ_UNROLL
      for (int parity = 0; parity < 2; ++parity) store_chunk<typename Tile::T>(run.at(2 * i * NT / CH + parity), x[parity], out);
    }
  }
};

template <int Bits, int G>
struct TileCodec<IntAsym<Bits, G>> {
  using Q = IntAsym<Bits, G>;
  template <class Tile, Role R, int NT>
  using Full = std::conditional_t<R == Role::kKey, FullTileKeys<Tile, Q, NT>, FullTileValues<Tile, Q, NT>>;

  // General path: staged rows [0, rows) of role R into dst (k or v).
  template <class Tile, Role R, int NT>
  KVQ_DEVICE static void decode_rows(const uint8_t* raw, int rows, uint8_t* dst, unsigned tid) {
    if constexpr (R == Role::kKey)
      decode_key_rows<Tile, NT>(raw, rows, dst, tid);
    else
      decode_value_rows<Tile, NT>(raw, rows, dst, tid);
  }

  template <class Tile, int NT>
  KVQ_DEVICE static void decode_key_rows(const uint8_t* raw, int rows, uint8_t* k, unsigned tid) {
    constexpr int D = Tile::D, SP = Tile::SP, CH = Tile::chunks;
      // A thread keeps one channel chunk (NT is a multiple of D / 8) and walks rows NT / (D / 8)
      // apart, converting its chunk's parameters once per key group instead of once per row.
      static_assert(NT % CH == 0, "a thread keeps one channel chunk of the keys");
      const int c = int(tid % unsigned(CH));
      KeyChunkParams par;
      int par_id = -1;  // staged page x SP + first token of the key group whose parameters par holds
      for (int r = int(tid / unsigned(CH)); r < rows; r += NT / CH) {  // r >= 0: its divisions are shifts
        const uint8_t* page = raw + size_t(unsigned(r) / SP) * Tile::page_bytes;
        const int t = int(unsigned(r) % SP), id = (r - t) + int(unsigned(t) / Q::group) * Q::group;
        if (id != par_id) {
          par = key_chunk_params<Q, D>(page + Tile::kp, t, 8 * c);
          par_id = id;
        }
        float x[kDecodeChunk];
        decode_key_chunk<Q, D>(page + Tile::kc, t, 8 * c, par, x);
        store_tile_chunk<Tile>(k, r, c, x);
      }
  }

  template <class Tile, int NT>
  KVQ_DEVICE static void decode_value_rows(const uint8_t* raw, int rows, uint8_t* v, unsigned tid) {
    constexpr int D = Tile::D, SP = Tile::SP, CH = Tile::chunks;
      // A thread decodes one channel chunk of a token pair: both tokens' codes are in the same
      // words (packing.hpp), loaded once. Rows are even from every staged page's start (SP even).
      for (unsigned idx = tid; idx < unsigned((rows + 1) / 2 * CH); idx += NT) {
        const int r = 2 * int(idx / CH), c = int(idx % CH), t = int(unsigned(r) % SP);
        const uint8_t* page = raw + size_t(unsigned(r) / SP) * Tile::page_bytes;
        const uint32_t* words =
            reinterpret_cast<const uint32_t*>(page + Tile::vc) + code_slot<Q::bits, D>(Role::kValue, t, 8 * c).word;
        float x[kDecodeChunk];
        decode_value_chunk<Q, D, SP>(words, page + Tile::vp, t, 0, 8 * c, x);
        store_tile_chunk<Tile>(v, r, c, x);
        if (r + 1 < rows) {
          decode_value_chunk<Q, D, SP>(words, page + Tile::vp, t + 1, 1, 8 * c, x);
          store_tile_chunk<Tile>(v, r + 1, c, x);
        }
      }
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

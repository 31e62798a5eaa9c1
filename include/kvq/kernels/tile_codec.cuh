// kvq/kernels/tile_codec.cuh - the device half of a format's codec for prefill tiles: how the staged
// record rows of one role (staged_page.hpp) become model-dtype rows of a tile buffer in shared memory
// (kv_tile.cuh's panel layout), from which the prefill kernels multiply. The format-level codec
// (codec/codec.hpp) gives the values; a TileCodec only arranges the loads and stores.
//
// TileCodec<Q> (asym_tile_codec.cuh, int8_tile_codec.cuh, none_tile_codec.cuh) provides
//   Full<Tile, R, NT>   the fast path of role R for a full tile (every row a record row of one
//                       staged page: P >= BN) by NT threads: fits (whether it serves this tile
//                       shape), load(raw, tid), store(dst, tid[, out]) (out: LocalChunks or the
//                       paired CTA's PairChunks, tile_chunks.cuh); NoFullTile where there is none
//   decode_rows<Tile, R, NT>(raw, rows, dst, tid)
//                       the general path: staged rows [0, rows) of role R into dst
// A fast path issues all of a thread's shared loads of both roles before its first store (a
// st.shared between items keeps the compiler from hoisting the next item's ld.shared, as it cannot
// tell the raw slot from the stage), has fixed trip counts, and converts key parameters once per
// thread. Its values are the general path's bit for bit (the pieces it uses are host-tested against
// the element decode: tests/host/test_chunk_decode.cpp).
#pragma once

#include "kvq/kernels/asym_tile_codec.cuh"
#include "kvq/kernels/int8_tile_codec.cuh"
#include "kvq/kernels/none_tile_codec.cuh"
#include "kvq/kernels/tile_codec_fwd.cuh"

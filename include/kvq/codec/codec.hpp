// kvq/codec/codec.hpp - one codec per element format: everything that knows how a format's record
// section (docs/FORMAT.md 4) turns into values and back. Every kernel and the host reference read
// and write records through it, so a kernel body holds no format branch and a new format plugs in
// by adding a codec (docs/DESIGN.md section 10).
//
// Codec<Q> (Q a format of quant/formats.hpp; none_codec.hpp, int8_codec.hpp, asym_codec.hpp) is
// pure math, host and device (__host__ __device__), shared with the host reference:
//   quantized        bool: whether the section holds codes (false: the model dtype as is)
//   bf16_pair_exact  bool: decoded values convert to bf16 exactly by the hardware's
//                    round-to-nearest-even pair conversion (never fp32 subnormals, canonical NaN,
//                    within bf16 range), so the dequantize kernel may skip from_float_saturate
//   decode_element<R, D, P, T>(codes, params, t, c) -> float
//                    one element (token t, channel c) of the R (key / value) section of a record
//                    of head dim D and page P, model dtype T
//   decode_chunk<R, D, P, T>(codes, params, t, c0, out[8])
//                    channels c0 .. c0 + 7 of token t (kDecodeChunk, chunk.hpp): each element's
//                    value bit for bit equal to decode_element's, loads shared by the chunk
//   param_run<R, D, P>(i, off, n) -> ParamRun
//                    run i (0 or 1) of the parameters of tokens [off, off + n) of a section: where
//                    it starts in the parameter part and its bytes (what a staged page copies)
//   encode_section<R, D, P, T>(row, codes, params, scratch, tid, nthreads, sync, flags, key_clip)
//                    the section of one page from row(t) (the page's tokens in T), by nthreads
//                    threads (this one tid), `sync` a barrier among them (section_codec.hpp)
// The device-side halves, which turn a staged tile of a section into what a kernel multiplies,
// are codecs of the same formats at the kernel level:
//   kernels/tile_codec.cuh    TileCodec<Q>: a prefill K/V tile into model-dtype rows in shared memory
//   kernels/record_codec.cuh  KeyOperand / ValueOperand: a 16-token decode tile into mma.sync operands
//                             with the scales and zero points folded into the query, a bias or the
//                             probabilities
#pragma once

#include "kvq/codec/asym_codec.hpp"
#include "kvq/codec/codec_fwd.hpp"
#include "kvq/codec/int8_codec.hpp"
#include "kvq/codec/none_codec.hpp"

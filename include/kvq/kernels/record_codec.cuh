// kvq/kernels/record_codec.cuh - the device half of a format's codec for the decode records kernel:
// how a 16-token tile of one record section, staged in shared memory (decode/record_tile.cuh), becomes
// mma.sync A operands in registers, and where its scales and zero points fold in. The values are
// those of the format-level codec (codec/codec.hpp); the records kernel is written against the
// capabilities below, not against formats.
//
// KeyOperand<Q, Cfg> (keys as A of S^T = K Q^T; lane i holds D/8 channel pairs of two tokens):
//   param_bytes         the staged key parameters of a tile
//   supported           whether a 16-token tile fits the format (INT2/INT4: in one key group)
//   copy_params(dst, rec, params, t0, lane)  a lane's cp.async of tile t0's parameters (section
//                       offset `params` of record `rec`)
//   pos(q)              the position in its word of a lane's q-th pair of a word (INT2 reorders)
//   pair(word, pos)     the pair at `pos` as an exact fp16 (or model-dtype) operand
//   neg_offset(pos)     minus the offset pair(...) adds to the codes (0: none)
//   scaled_query        the query enters the mma in fp16, scaled per row into fp16 range (2^-e)
//   group_scales        the channel scales fold into the query and the zero points into a
//                       per-row bias once per key group (the kernel's group_bias)
//   token_scales        a per-token scale multiplies the logits (scale_logits) and a constant
//                       offset pair (offset_pair) leaves through a per-row bias computed once
//   unit                the codes' unit, a factor of the logits (2^24 for INT8 subnormals)
// ValueOperand<Q, Cfg> (values as A of O^T = V^T P^T):
//   param_part, param_bytes, groups, supported, copy_params(dst, rec, params, t0, lane)
//   packed              a token pair's channel is one packed word's two halves
//   blocked             scales in the probabilities, codes as fp16 subnormals, zero points
//                       through a running sum a 32-channel block (load_blocked, pair_blocked,
//                       block_scales, block_params, code_unit); else load / pair dequantize in T
#pragma once

#include "kvq/kernels/asym_record_codec.cuh"
#include "kvq/kernels/int8_record_codec.cuh"
#include "kvq/kernels/none_record_codec.cuh"
#include "kvq/kernels/record_codec_fwd.cuh"

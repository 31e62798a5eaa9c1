// kvq/kernels/staged_page.hpp - the staged page of a prefill K/V tile: the quantized bytes of SP
// consecutive tokens of one record, copied into shared memory before they are dequantized
// (kv_tile.cuh). SP = min(P, BN) for tiles of BN tokens: a staged page is a whole record (P <= BN)
// or a BN-token slice of one (P > BN), laid out like a record of page SP (record_layout.hpp):
//   kc  K codes   [SP tokens] (token-major words, packing.hpp)
//   kp  K params  int8: scale[SP]; INT2/4: scale[D], zero[D] per key group covering the SP tokens
//                 (a single group when the group is longer than SP)
//   vc  V codes   [SP / 2 token pairs]
//   vp  V params  int8: scale[SP]; INT2/4: scale[SP][D/Gv], then zero[SP][D/Gv]
// Each section is a contiguous run of the record (two for INT2/4 value parameters), so a staged
// page is at most five copies: staged_run(i, off) names them, staged_source the source of any byte.
// Host and device code: tests/host/test_staged_page.cpp decodes staged pages against the record and
// checks the tile classes against their per-tile definitions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/cache/config.hpp"
#include "kvq/codec/codec.hpp"
#include "kvq/core/platform.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/record_layout.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Cfg, int BN_>
struct StagedPage {
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  using KC = Codec<KQ>;  // the formats' codecs (codec/codec.hpp): which parameters a staged page holds
  using VC = Codec<VQ>;
  static constexpr int D = Cfg::head_dim, P = Cfg::page;
  static constexpr int BN = BN_;                 // tokens per tile
  static constexpr int SP = P < BN ? P : BN;     // tokens per staged page
  static constexpr int staged_pages = BN / SP;   // staged pages per tile
  static constexpr bool k_staged = KC::quantized;
  static constexpr bool v_staged = VC::quantized;

  // Section sizes of a record of page SP (record_layout.hpp), except that keys keep one whole
  // group's parameters when the key group is longer than SP. "none" roles are not staged.
  static constexpr size_t kc_bytes = k_staged ? section_codes_bytes(KQ::desc, D, SP) : 0;
  // Parameter runs of the first staged page (the codec's param_run of tokens [0, SP)).
  static constexpr ParamRun kp_run = KC::template param_run<Role::kKey, D, P>(0, 0, SP);
  static constexpr ParamRun vp_run0 = VC::template param_run<Role::kValue, D, P>(0, 0, SP);
  static constexpr ParamRun vp_run1 = VC::template param_run<Role::kValue, D, P>(1, 0, SP);
  static constexpr size_t kp_bytes = kp_run.bytes;
  static constexpr size_t vc_bytes = v_staged ? section_codes_bytes(VQ::desc, D, SP) : 0;
  static constexpr size_t vp_bytes = vp_run0.bytes + vp_run1.bytes;
  static constexpr size_t kc = 0, kp = kc_bytes, vc = kp + kp_bytes, vp = vc + vc_bytes, page_bytes = vp + vp_bytes;
  static_assert(kc_bytes % 16 == 0 && kp_bytes % 16 == 0 && vc_bytes % 16 == 0 && vp_bytes % 16 == 0,
                "staged sections are whole 16-byte chunks");
  static constexpr size_t raw_bytes = page_bytes * staged_pages;  // a tile's staged pages

  // Three kinds of tile, each a prefix of the tile indices (tile j = tokens [j BN, (j + 1) BN)):
  // a tile passes a test iff its index is below the test's count, so that a kernel compares two
  // ints a tile instead of 64-bit token positions.
  // All tiles of keys [0, kv_end).
  KVQ_HD static int tiles(int64_t kv_end) { return kv_end > 0 ? int((kv_end - 1) / BN) + 1 : 0; }
  // Raw only: issue_tile (kv_tile.cuh) writes only the tile's raw slot (every token a record token
  // of two quantized roles): its copies need not wait for the k / v buffers to be free; only
  // decode_tile, which writes them, does.
  KVQ_HD static int raw_only_tiles(int64_t rec_end) {
    return k_staged && v_staged && rec_end >= BN ? int(rec_end / BN) : 0;
  }
  // Decoding: decode_tile has rows to dequantize (record tokens of a quantized role).
  KVQ_HD static int decoding_tiles(int64_t rec_end) {
    return (k_staged || v_staged) && rec_end > 0 ? int((rec_end + BN - 1) / BN) : 0;
  }
  // Bulk-copyable: one staged page of a single record of two quantized roles (pages of at least BN
  // tokens, every token a record token below kv_end): issue_tile_bulk's tile.
  KVQ_HD static int bulk_tiles(int64_t rec_end, int64_t kv_end) {
    return P >= BN ? raw_only_tiles(rec_end < kv_end ? rec_end : kv_end) : 0;
  }

  // The contiguous runs of the staged page whose first token is `off` tokens into a record: run i
  // (i < kRuns) is `bytes` bytes from record offset `src` to page offset `dst` (codes of K, params of
  // K, codes of V, then V's params: one run for INT8, scales and zeros for INT2 / INT4). Runs of a
  // role that is not staged are empty.
  struct StagedRun {
    size_t src, dst, bytes;
  };
  static constexpr int kRuns = 5;
  KVQ_HD static StagedRun staged_run(int i, int off) {
    constexpr RecordOffsets o = Cfg::record;
    if (i == 0) return StagedRun{o.k_codes + size_t(off) * D * KQ::bits / 8, kc, kc_bytes};
    if (i == 1) return StagedRun{o.k_params + KC::template param_run<Role::kKey, D, P>(0, off, SP).src, kp, kp_bytes};
    if (i == 2) return StagedRun{o.v_codes + size_t(off) * D * VQ::bits / 8, vc, vc_bytes};
    if (i == 3) return StagedRun{o.v_params + VC::template param_run<Role::kValue, D, P>(0, off, SP).src, vp, vp_run0.bytes};
    if constexpr (vp_run1.bytes > 0)
      return StagedRun{o.v_params + VC::template param_run<Role::kValue, D, P>(1, off, SP).src, vp + vp_run0.bytes, vp_run1.bytes};
    else
      return StagedRun{0, page_bytes, 0};
  }
  // Source of byte `at` of the staged page whose first token is `off` tokens into `record`.
  KVQ_HD static const uint8_t* staged_source(const uint8_t* record, int off, size_t at) {
    KVQ_UNROLL
    for (int i = 0; i < kRuns - 1; ++i) {
      const StagedRun r = staged_run(i, off);
      if (at < r.dst + r.bytes) return record + r.src + (at - r.dst);
    }
    const StagedRun r = staged_run(kRuns - 1, off);
    return record + r.src + (at - r.dst);
  }
};

}  // namespace detail
KVQ_NAMESPACE_END

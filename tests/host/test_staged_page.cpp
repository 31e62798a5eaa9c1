// The prefill tile's staged page (kvq/kernels/staged_page.hpp): copied from a record 16 bytes at a
// time through staged_source, it decodes (as a record of page SP) to the record's own values bit
// for bit, for every staged page of the record; its runs (the bulk copies) tile it exactly.
#include <doctest/doctest.h>

#include <kvq/kernels/staged_page.hpp>
#include <kvq/cache/chunk_decode.hpp>
#include <kvq/reference/append.hpp>

#include <cstring>
#include <vector>

#include "test_util.hpp"

namespace {

template <class Cfg, int BN>
void check_staged_pages(uint64_t seed) {
  using T = typename Cfg::dtype;
  using Page = kvq::detail::StagedPage<Cfg, BN>;
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  constexpr int D = Cfg::head_dim, P = Cfg::page, SP = Page::SP;
  std::vector<T> rows = kvq_test::make_rows<T>(seed, 2 * P, 1, D, 3.0f);  // K rows then V rows
  const std::vector<uint8_t> record = kvq_test::encode_record<Cfg>(rows);

  // The runs: contiguous from 0, whole 16-byte chunks, the page's size in all.
  size_t end = 0;
  for (int i = 0; i < Page::kRuns; ++i) {
    const typename Page::StagedRun r = Page::staged_run(i, 0);
    CHECK(r.bytes % 16 == 0);
    CHECK(r.src % 16 == 0);
    if (r.bytes > 0) CHECK(r.dst == end);
    if (r.bytes > 0) end = r.dst + r.bytes;
  }
  CHECK(end == Page::page_bytes);

  size_t mismatches = 0, checked = 0;
  std::vector<uint8_t> page(Page::page_bytes);
  for (int off = 0; off < P; off += SP) {
    for (size_t at = 0; at < Page::page_bytes; at += 16) {
      const uint8_t* from = Page::staged_source(record.data(), off, at);
      REQUIRE(from >= record.data());
      REQUIRE(from + 16 <= record.data() + record.size());
      std::memcpy(page.data() + at, from, 16);
    }
    for (int t = 0; t < SP; ++t)
      for (int c0 = 0; c0 < D; c0 += kvq::kDecodeChunk) {
        float staged[kvq::kDecodeChunk], direct[kvq::kDecodeChunk];
        if constexpr (Page::k_staged) {
          kvq::decode_chunk<KQ, kvq::Role::kKey, D, SP, T>(page.data() + Page::kc, page.data() + Page::kp, t, c0, staged);
          kvq::decode_record_chunk<Cfg, kvq::Role::kKey>(record.data(), off + t, c0, direct);
          for (int e = 0; e < kvq::kDecodeChunk; ++e, ++checked) mismatches += std::memcmp(&staged[e], &direct[e], 4) != 0;
        }
        if constexpr (Page::v_staged) {
          kvq::decode_chunk<VQ, kvq::Role::kValue, D, SP, T>(page.data() + Page::vc, page.data() + Page::vp, t, c0, staged);
          kvq::decode_record_chunk<Cfg, kvq::Role::kValue>(record.data(), off + t, c0, direct);
          for (int e = 0; e < kvq::kDecodeChunk; ++e, ++checked) mismatches += std::memcmp(&staged[e], &direct[e], 4) != 0;
        }
      }
  }
  CHECK(checked == size_t(P) * D * 2);
  CHECK(mismatches == 0);
}

template <class Cfg>
void check_both_tiles(uint64_t seed) {
  check_staged_pages<Cfg, 32>(seed);
  check_staged_pages<Cfg, 64>(seed + 1);
}

}  // namespace

TEST_CASE("staged page: copied through staged_source, it decodes like the record, for every format and page") {
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>(1);
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int4<32>, kvq::Int2<32>>>(3);
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int8, kvq::Int8>>(5);
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<8>, kvq::Int2<32>>>(7);      // key groups < SP
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 128, 128, kvq::Int2<64>, kvq::Int2<64>>>(9);    // P > BN, key group > SP at 32
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 256, 128, kvq::Int4<32>, kvq::Int2<32>>>(11);
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int4<16>, kvq::Int2<32>>>(13);     // P < BN
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int8, kvq::Int8>>(15);
  check_both_tiles<kvq::CacheConfig<kvq::fp16, 64, 32, kvq::Int4<8>, kvq::Int2<4>>>(17);       // value groups < 8
  check_both_tiles<kvq::CacheConfig<kvq::bf16, 64, 32, kvq::Int2<16>, kvq::Int2<16>>>(19);
  check_both_tiles<kvq::CacheConfig<kvq::fp16, 256, 16, kvq::Int8, kvq::Int8>>(21);
}

namespace {

// The tile classes (StagedPage::tiles / raw_only_tiles / decoding_tiles / bulk_tiles) against their
// per-tile definitions (tile j = tokens [j BN, (j + 1) BN) of keys [0, kv_end), the record tokens
// [0, rec_end) of them), for every split of rec_end <= kv_end up to five tiles and a bit.
template <class Cfg, int BN>
void check_tile_classes() {
  using SP = kvq::detail::StagedPage<Cfg, BN>;
  size_t checked = 0, wrong = 0;
  for (int64_t kv_end = 0; kv_end <= 5 * BN + 3; ++kv_end)
    for (int64_t rec_end = 0; rec_end <= kv_end; ++rec_end) {
      const int n = SP::tiles(kv_end), n_raw = SP::raw_only_tiles(rec_end), n_dec = SP::decoding_tiles(rec_end);
      const int n_bulk = SP::bulk_tiles(rec_end, kv_end);
      wrong += int64_t(n) * BN < kv_end || (n > 0 && int64_t(n - 1) * BN >= kv_end);  // ceil(kv_end / BN)
      for (int j = 0; j <= n; ++j) {
        const int64_t t0 = int64_t(j) * BN;
        const bool raw_only = SP::k_staged && SP::v_staged && t0 + BN <= rec_end;
        const bool decodes = (SP::k_staged || SP::v_staged) && t0 < rec_end;
        const bool bulk = Cfg::page >= BN && raw_only && t0 + BN <= kv_end;
        wrong += (j < n_raw) != raw_only;
        wrong += (j < n_dec) != decodes;
        wrong += (j < n_bulk) != bulk;
        ++checked;
      }
    }
  CHECK(checked > 0);
  CHECK(wrong == 0);
}

template <class Cfg>
void check_tile_classes_all() {
  check_tile_classes<Cfg, 32>();
  check_tile_classes<Cfg, 64>();
  check_tile_classes<Cfg, 128>();
}

}  // namespace

TEST_CASE("staged page: the tile classes are the prefixes of tile indices their per-tile definitions give") {
  check_tile_classes_all<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>();  // P = 64: bulk at BN <= 64
  check_tile_classes_all<kvq::CacheConfig<kvq::bf16, 128, 16, kvq::Int4<16>, kvq::Int2<32>>>();  // P < BN: never bulk
  check_tile_classes_all<kvq::CacheConfig<kvq::bf16, 128, 128, kvq::Int8, kvq::Int8>>();
  check_tile_classes_all<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int4<32>, kvq::NoQuant>>();      // one role staged
  check_tile_classes_all<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::NoQuant, kvq::NoQuant>>();          // nothing staged
}

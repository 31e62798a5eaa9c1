// kvq::plan_decode (host): split sizes cover the longest sequence, the workspace layout is aligned
// and large enough for what the kernels index, and bad shapes are rejected.
#include <doctest/doctest.h>

#include <kvq/decode/plan.hpp>

#include <algorithm>
#include <climits>

namespace {

kvq::DecodeShape shape(int batch, int64_t max_tokens, int max_q = 1) {
  return kvq::DecodeShape{batch, 32, 8, 128, max_tokens, max_q, int64_t(batch) * max_q, 132};
}

}  // namespace

TEST_CASE("decode plan: splits are page multiples that cover the longest sequence") {
  for (int batch : {1, 3, 8, 64})
    for (int64_t tokens : {int64_t(0), int64_t(1), int64_t(63), int64_t(64), int64_t(4097), int64_t(131072),
                           int64_t(1) << 20}) {
      kvq::DecodePlan p;
      REQUIRE(kvq::plan_decode(shape(batch, tokens), 128, 64, 6144, &p) == kvq::Status::kSuccess);
      CHECK(p.split_tokens % 64 == 0);
      CHECK(p.split_tokens >= 64);
      CHECK(int64_t(p.max_splits) * p.split_tokens >= tokens);
      CHECK(int64_t(p.max_splits - 1) * p.split_tokens < std::max<int64_t>(tokens, 1));
      CHECK(p.transition_pages == 128 / 64 + 1);
    }
  // Few sequences get more splits than many (the planner fills the GPU with split-KV work).
  kvq::DecodePlan one, many;
  REQUIRE(kvq::plan_decode(shape(1, 131072), 128, 64, 6144, &one) == kvq::Status::kSuccess);
  REQUIRE(kvq::plan_decode(shape(64, 131072), 128, 64, 6144, &many) == kvq::Status::kSuccess);
  CHECK(one.max_splits > many.max_splits);
  CHECK(int64_t(one.max_splits) * 8 >= 132);  // batch 1 x 8 KV heads still spreads over the SMs
}

TEST_CASE("decode plan: a split holds at least one page per warp when the sequence has that many") {
  for (int64_t tokens : {int64_t(256), int64_t(1000), int64_t(4096), int64_t(32768), int64_t(131072)}) {
    kvq::DecodePlan p;
    REQUIRE(kvq::plan_decode(shape(1, tokens), 128, 64, 6144, &p) == kvq::Status::kSuccess);
    CHECK(p.split_tokens >= kvq::kDecodeSplitMinPages * 64);
  }
  kvq::DecodePlan p;
  REQUIRE(kvq::plan_decode(shape(1, 4096), 128, 64, 6144, &p) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 4096 / 64 / kvq::kDecodeSplitMinPages);  // 64 pages: 16 splits, not 64 of one page
  REQUIRE(kvq::plan_decode(shape(1, 100), 128, 64, 6144, &p) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 1);  // fewer pages than warps: one split
}

TEST_CASE("decode plan: the split CTAs fit in one wave of the residency the caller reports") {
  for (int ctas_per_sm : {1, 2, 3, 4, 5})
    for (int batch : {1, 2, 8, 17, 64})
      for (int max_q : {1, 4, 16}) {
        kvq::DecodePlan p;
        REQUIRE(kvq::plan_decode(shape(batch, 131072, max_q), 128, 64, 6144, &p, ctas_per_sm) == kvq::Status::kSuccess);
        const int64_t rows = 4 * max_q, tiles = (rows + p.rows_per_cta - 1) / p.rows_per_cta;
        CHECK(p.rows_per_cta == (rows > 8 ? 16 : 8));
        const int64_t ctas = int64_t(batch) * 8 * tiles * p.max_splits;
        if (p.max_splits > 1) CHECK(ctas <= int64_t(132) * ctas_per_sm);
      }
}

TEST_CASE("decode plan: over 16 query rows a KV head and enough tokens, the many-row kernel's splits are whole tiles") {
  for (bool many_rows_kernel : {false, true})
    for (int head_dim : {64, 128, 256})
      for (int page : {16, 32, 64, 128})
        for (int max_q : {4, 5, 16})
          for (int64_t tokens : {int64_t(100), int64_t(4096), int64_t(131072 + 517)}) {
            CAPTURE(many_rows_kernel);
            CAPTURE(head_dim);
            CAPTURE(page);
            CAPTURE(max_q);
            CAPTURE(tokens);
            kvq::DecodePlan p;
            REQUIRE(kvq::plan_decode(shape(8, tokens, max_q), head_dim, page, 6144, &p, 4, 0, false, many_rows_kernel) ==
                    kvq::Status::kSuccess);
            const bool many = many_rows_kernel && 4 * max_q > 16 && 8 * tokens >= kvq::kDecodeManyRowsMinTokens;
            CHECK(p.rows_per_cta == (many ? kvq::kDecodeManyRows : 4 * max_q > 8 && head_dim <= 128 ? 16 : 8));
            CHECK(p.split_tokens % page == 0);
            if (many) CHECK(p.split_tokens % kvq::decode_rows_tile_tokens(head_dim) == 0);
            CHECK(int64_t(p.max_splits) * p.split_tokens >= tokens);
            CHECK(int64_t(p.max_splits - 1) * p.split_tokens < tokens);
          }
  // The batch's tokens decide: 32 rows of "none" over 1 x 131,072 tokens take the many-row
  // kernel, over 1 x 32,768 (or 3 x 32,768) the records kernel.
  for (int batch : {1, 3, 4, 8}) {
    kvq::DecodePlan p;
    REQUIRE(kvq::plan_decode(shape(batch, 32768, 8), 128, 64, 6144, &p, 4, 0, false, true) == kvq::Status::kSuccess);
    CHECK(p.rows_per_cta == (batch >= 4 ? kvq::kDecodeManyRows : 16));
  }
  // The tiles' rounding keeps a split within 2^31 - 1 tokens, or the plan is refused.
  kvq::DecodePlan p;
  CHECK(kvq::plan_decode(shape(1, INT32_MAX - 20, 16), 128, 16, 6144, &p, 4, 0, false, true) == kvq::Status::kInvalidShape);
  CHECK(kvq::plan_decode(shape(1, INT32_MAX - 20, 1), 128, 16, 6144, &p, 4, 0, false, true) == kvq::Status::kSuccess);
  CHECK(kvq::plan_decode(shape(1, INT32_MAX - 20, 16), 128, 16, 6144, &p) == kvq::Status::kSuccess);
}

TEST_CASE("decode plan: workspace parts are 256-byte aligned, disjoint and large enough") {
  kvq::DecodePlan p;
  const kvq::DecodeShape s{5, 12, 3, 64, 5000, 4, 17, 132};
  REQUIRE(kvq::plan_decode(s, 64, 32, 4096, &p) == kvq::Status::kSuccess);
  CHECK(p.transition_offset == 0);
  for (size_t off : {p.partial_offset, p.stats_offset, p.status_offset, p.workspace_bytes}) CHECK(off % 256 == 0);
  const size_t rows = size_t(s.total_q) * size_t(s.num_q_heads);
  CHECK(p.partial_offset >= size_t(s.batch) * size_t(p.transition_pages) * size_t(s.num_kv_heads) * 4096);
  // one slot per split plus the tail slots (hot rows + new tokens: < R + P + max_q_len)
  CHECK(int64_t(p.tail_chunks) * kvq::kDecodeTailChunk >= s.residual + 32 + s.max_q_len);
  CHECK(int64_t(p.tail_slots) * p.tail_span >= p.tail_chunks);
  CHECK(p.stats_offset - p.partial_offset >= size_t(p.max_splits + p.tail_slots) * rows * 64 * 4);
  CHECK(p.status_offset - p.stats_offset >= size_t(p.max_splits + p.tail_slots) * rows * 2 * 4);
  CHECK(p.workspace_bytes - p.status_offset >= size_t(s.batch) * 4);
}

TEST_CASE("decode plan: bad shapes are rejected") {
  kvq::DecodePlan p;
  CHECK(kvq::plan_decode(shape(1, 100), 128, 64, 6144, nullptr) == kvq::Status::kNullPointer);
  kvq::DecodeShape s = shape(2, 100);
  s.max_q_len = 0;
  CHECK(kvq::plan_decode(s, 128, 64, 6144, &p) == kvq::Status::kInvalidShape);
  s.max_q_len = kvq::kDecodeMaxQLen + 1;
  CHECK(kvq::plan_decode(s, 128, 64, 6144, &p) == kvq::Status::kInvalidShape);
  s = shape(2, 100);
  s.num_q_heads = 30;  // not a multiple of 8 KV heads
  CHECK(kvq::plan_decode(s, 128, 64, 6144, &p) == kvq::Status::kInvalidShape);
  s = shape(2, 100);
  s.total_q = 3;  // more query rows than batch x max_q_len
  CHECK(kvq::plan_decode(s, 128, 64, 6144, &p) == kvq::Status::kInvalidShape);
  s = shape(2, 100);
  s.residual = 100;  // not a multiple of the page
  CHECK(kvq::plan_decode(s, 128, 64, 6144, &p) == kvq::Status::kConfigMismatch);
  s = shape(2, 100);
  s.num_sms = 0;
  CHECK(kvq::plan_decode(s, 128, 64, 6144, &p) == kvq::Status::kInvalidShape);
}

TEST_CASE("decode plan: the longest sequence a plan serves is the last whole page below 2^31 tokens") {
  // 64 sequences x 8 KV heads fill the GPU without splitting, so the one split is max_tokens rounded
  // up to pages, which must stay an int32 (the kernels count a split's tokens in int).
  for (int page : {16, 32, 64, 128}) {
    kvq::DecodePlan p;
    const int64_t last = int64_t(INT32_MAX) / page * page;
    REQUIRE(kvq::plan_decode(shape(64, last), 128, page, 6144, &p) == kvq::Status::kSuccess);
    CHECK(p.split_tokens > 0);
    CHECK(int64_t(p.max_splits) * p.split_tokens >= last);
    CHECK(kvq::plan_decode(shape(64, last + 1), 128, page, 6144, &p) == kvq::Status::kInvalidShape);
    CHECK(kvq::plan_decode(shape(64, INT32_MAX), 128, page, 6144, &p) == kvq::Status::kInvalidShape);
  }
  kvq::DecodePlan p;
  CHECK(kvq::plan_decode(shape(1, int64_t(INT32_MAX) + 1), 128, 64, 6144, &p) == kvq::Status::kInvalidShape);
}

TEST_CASE("decode plan: the tail runs beside the records kernel only in the room its wave leaves, with a short share") {
  // No dependent launch (tails_per_slot 0): always after the records kernel, one round of chunks
  // (one a warp) per CTA.
  kvq::DecodePlan p;
  REQUIRE(kvq::plan_decode(shape(8, 131072), 128, 64, 6144, &p, 4, 0) == kvq::Status::kSuccess);
  CHECK(p.tail_ctas == 0);
  CHECK(p.tail_span == kvq::kDecodeTailChunksInFlight);
  CHECK(p.tail_slots == (p.tail_chunks + 3) / 4);
  for (int batch : {1, 2, 8, 17, 32, 64})
    for (int64_t tokens : {int64_t(4096), int64_t(32768), int64_t(131072), int64_t(1 << 20)})
      for (int max_q : {1, 4, 16})
        for (int tails_per_slot : {1, 2}) {
          CAPTURE(batch);
          CAPTURE(tokens);
          CAPTURE(max_q);
          REQUIRE(kvq::plan_decode(shape(batch, tokens, max_q), 128, 64, 6144, &p, 4, tails_per_slot) == kvq::Status::kSuccess);
          // The slots cover the longest tail, no slot is empty for it.
          CHECK(p.tail_chunks == (128 + 64 + max_q + 15) / 16);
          CHECK(int64_t(p.tail_slots) * p.tail_span >= p.tail_chunks);
          CHECK(int64_t(p.tail_slots - 1) * p.tail_span < p.tail_chunks);
          if (p.tail_ctas == 0) {
            CHECK(p.tail_span == std::min(p.tail_chunks, kvq::kDecodeTailChunksInFlight));
            continue;
          }
          const int64_t tiles = (4 * max_q + p.rows_per_cta - 1) / p.rows_per_cta;
          const int64_t records = int64_t(batch) * 8 * tiles * p.max_splits, room = 132 * 4 - records;
          const int64_t items = int64_t(batch) * 8 * ((4 * max_q + 7) / 8) * p.tail_slots;
          CHECK(p.tail_ctas <= room * tails_per_slot);  // only in the room the records wave leaves
          CHECK(p.tail_ctas <= items);
          // a CTA's share of items fits in a records CTA's life
          CHECK((items + p.tail_ctas - 1) / p.tail_ctas * kvq::decode_tail_item_us(p.tail_span) <=
                kvq::decode_records_cta_us(p.split_tokens / 64));
        }
  // The shapes (R 128, P 64, q_len 1: 13 chunks a tail). Batch 8 x 128K: beside, the 64
  // items of whole tails on the 16 free slots (4 items a CTA next to 256-page splits); batch 1 x
  // 128K: two slots of 7 chunks a sequence and KV head, one item a CTA; batch 1 x 4K: slots of
  // 4 chunks (one round), 32 CTAs beside 128 records CTAs; batch 8 x 4K: the one-wave plan (8
  // splits of 8 pages, 512 CTAs) leaves no room, so 4 splits of 16 pages (96 KB of INT2 records)
  // and the tail beside them in the 272 free slots.
  REQUIRE(kvq::plan_decode(shape(8, 131072), 128, 64, 6144, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.tail_ctas == 16);
  CHECK(p.tail_span == 13);
  CHECK(p.tail_slots == 1);
  REQUIRE(kvq::plan_decode(shape(1, 131072), 128, 64, 6144, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.tail_ctas == 16);
  CHECK(p.tail_span == 7);
  CHECK(p.tail_slots == 2);
  REQUIRE(kvq::plan_decode(shape(1, 4096), 128, 64, 6144, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.tail_ctas == 8 * 4);
  CHECK(p.tail_span == 4);
  REQUIRE(kvq::plan_decode(shape(8, 4096), 128, 64, 6144, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 4);
  CHECK(p.split_tokens == 16 * 64);
  CHECK(p.tail_ctas > 0);
  CHECK(p.tail_ctas <= 132 * 4 - 4 * 64);
  // Batch 32 x 4K: one split of 64 pages makes room; INT2 (6 KB a page: 384 KB) takes it, a
  // format of 16.5 KB a page (INT8: 1 MB) keeps 2 splits and the tail after; batch 64 x 4K is one
  // split already (no room to make).
  REQUIRE(kvq::plan_decode(shape(32, 4096), 128, 64, 6144, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 1);
  CHECK(p.tail_ctas > 0);
  REQUIRE(kvq::plan_decode(shape(32, 4096), 128, 64, 16896, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 2);
  CHECK(p.tail_ctas == 0);
  REQUIRE(kvq::plan_decode(shape(64, 4096), 128, 64, 6144, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 1);
  CHECK(p.tail_ctas == 0);
  // Up to 768 KB in up to 64 pages: "none" (32 KB a page, 3 records CTAs a multiprocessor) at
  // batch 8 x 4K halves 6 splits of 11 pages to 3 of 22 (704 KB); INT4 (10 KB) at batch 32 x 4K
  // takes one split of 64 pages (640 KB). INT2 at batch 1 x 128K with q_len 4 (two row tiles' CTAs,
  // 2 a multiprocessor: 33 splits of 63 pages fill the wave) would need 128 pages: it keeps them.
  REQUIRE(kvq::plan_decode(shape(8, 4096), 128, 64, 32768, &p, 3, 1) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 3);
  CHECK(p.split_tokens == 22 * 64);
  CHECK(p.tail_ctas > 0);
  REQUIRE(kvq::plan_decode(shape(32, 4096), 128, 64, 10240, &p, 4, 1) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 1);
  CHECK(p.tail_ctas > 0);
  REQUIRE(kvq::plan_decode(shape(1, 131072, 4), 128, 64, 6144, &p, 2, 2) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 33);
  CHECK(p.tail_ctas == 0);
  CHECK(kvq::decode_tail_room_split_pages(6144) == 64);
  CHECK(kvq::decode_tail_room_split_pages(32768) == 24);
  // Without room for a dependent launch (tails_per_slot 0) the splits stay one wave.
  REQUIRE(kvq::plan_decode(shape(8, 4096), 128, 64, 6144, &p, 4, 0) == kvq::Status::kSuccess);
  CHECK(p.max_splits == 8);
  CHECK(p.tail_ctas == 0);
  // The launches are chained only where the caller says the device and kernels take it.
  CHECK(p.dependent_launches == 0);
  REQUIRE(kvq::plan_decode(shape(8, 4096), 128, 64, 6144, &p, 4, 1, true) == kvq::Status::kSuccess);
  CHECK(p.dependent_launches == 1);
}

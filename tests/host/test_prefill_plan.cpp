// kvq::plan_prefill (host): the grid covers every query row of the longest chunk, the workspace
// holds the transition records of every sequence, and bad shapes are refused with a Status; the
// paired CTAs' grid and pairing rule (prefill_ws_kernel.cuh).
#include <doctest/doctest.h>

#include <kvq/prefill/plan.hpp>

#include <cstdlib>
#include <initializer_list>

namespace {

kvq::PrefillShape shape(int batch, int q_heads, int kv_heads, int64_t max_tokens, int max_q, int64_t total_q) {
  return kvq::PrefillShape{batch, q_heads, kv_heads, 128, max_tokens, max_q, total_q};
}

}  // namespace

TEST_CASE("prefill plan: row tiles cover group x longest chunk, workspace holds the transition pages") {
  for (int rows : {kvq::kPrefillRowsSmall, kvq::kPrefillRowsLarge})
    for (int group : {1, 3, 4, 16})
      for (int max_q : {1, 63, 64, 65, 8192}) {
        kvq::PrefillPlan p;
        REQUIRE(kvq::plan_prefill(shape(3, 8 * group, 8, 200000, max_q, 3 * max_q), 128, 64, 6144, rows, &p) ==
                kvq::Status::kSuccess);
        CHECK(p.rows_per_cta == rows);
        CHECK(int64_t(p.row_tiles) * rows >= int64_t(group) * max_q);         // every row has a CTA
        CHECK(int64_t(p.row_tiles - 1) * rows < int64_t(group) * max_q);      // and no CTA is empty
        CHECK(p.transition_pages == 128 / 64 + 1);
        CHECK(p.workspace_bytes >= size_t(3) * p.transition_pages * 8 * 6144);
        CHECK(p.workspace_bytes % 256 == 0);
      }
  // The default height: 128 rows up to head dim 128, 64 at 256.
  CHECK(kvq::prefill_rows_per_cta(128, true) == kvq::kPrefillRowsLarge);
  CHECK(kvq::prefill_rows_per_cta(64, false) == kvq::kPrefillRowsLarge);
  CHECK(kvq::prefill_rows_per_cta(256, true) == kvq::kPrefillRowsSmall);
}

TEST_CASE("prefill plan: bad shapes are refused with the Status that names the problem") {
  kvq::PrefillPlan p;
  CHECK(kvq::plan_prefill(shape(2, 8, 2, 1000, 10, 20), 128, 64, 6144, 64, nullptr) == kvq::Status::kNullPointer);
  CHECK(kvq::plan_prefill(shape(2, 8, 2, 1000, 0, 0), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);      // no chunk
  CHECK(kvq::plan_prefill(shape(2, 8, 2, 1000, 10, 21), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);    // rows > batch x chunk
  CHECK(kvq::plan_prefill(shape(2, 8, 3, 1000, 10, 20), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);    // heads not a multiple
  CHECK(kvq::plan_prefill(shape(-1, 8, 2, 1000, 10, 0), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);
  CHECK(kvq::plan_prefill(shape(70000, 8, 2, 1000, 10, 20), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);  // grid y
  CHECK(kvq::plan_prefill(shape(2, 8, 2, int64_t(1) << 32, 10, 20), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);
  CHECK(kvq::plan_prefill(shape(2, 8, 2, 1000, 10, 20), 128, 64, 6144, 96, &p) == kvq::Status::kInvalidShape);    // CTA height
  // group x chunk rows must fit an int (2^27 tokens x 16 heads = 2^31 rows; one row fewer plans)
  CHECK(kvq::plan_prefill(shape(1, 16, 1, 1000, 1 << 27, 1 << 27), 128, 64, 6144, 64, &p) == kvq::Status::kInvalidShape);
  CHECK(kvq::plan_prefill(shape(1, 16, 1, 1000, (1 << 27) - 1, (1 << 27) - 1), 128, 64, 6144, 64, &p) ==
        kvq::Status::kSuccess);
  kvq::PrefillShape odd_r = shape(2, 8, 2, 1000, 10, 20);
  odd_r.residual = 100;  // not a multiple of the page
  CHECK(kvq::plan_prefill(odd_r, 128, 64, 6144, 64, &p) == kvq::Status::kConfigMismatch);
}

TEST_CASE("prefill plan: paired CTAs: the grid rounds the row tiles up to even, pairs are adjacent tiles, both CTAs decide alike") {
  using kvq::prefill_cta_tile;
  using kvq::prefill_paired_grid_tiles;
  CHECK(prefill_paired_grid_tiles(1) == 2);
  CHECK(prefill_paired_grid_tiles(4) == 4);
  CHECK(prefill_paired_grid_tiles(7) == 8);
  CHECK(prefill_paired_grid_tiles(INT32_MAX) == int64_t(INT32_MAX) + 1);  // beyond the grid: the launch refuses it
  // 3 row tiles (grid 4): CTA x holds tile 2 - x, the padding CTA 3 none; CTAs 0 / 1 and 2 / 3 pair.
  CHECK(prefill_cta_tile(3, 0) == 2);
  CHECK(prefill_cta_tile(3, 2) == 0);
  CHECK(prefill_cta_tile(3, 3) == -1);
  CHECK(prefill_cta_tile(3, 0 ^ 1u) == 1);
  // The kernel's rule (prefill_ws_kernel.cuh): a CTA with rows pairs when its partner's tile holds
  // rows too. For every grid and sequence length, a CTA that pairs has a partner that pairs back,
  // and the padding CTA never holds rows.
  const int bm = 128;
  auto has_rows = [&](int tile, int rows) { return tile >= 0 && tile * bm < rows; };
  for (int32_t n : {1, 2, 3, 4, 5})
    for (int rows = 0; rows <= n * bm; ++rows)
      for (unsigned x = 0; x < unsigned(prefill_paired_grid_tiles(n)); ++x) {
        const int tile = prefill_cta_tile(n, x), peer = prefill_cta_tile(n, x ^ 1u);
        CHECK(tile >= -1);
        CHECK(tile < n);
        CHECK(prefill_cta_tile(n, x ^ 1u ^ 1u) == tile);
        if (tile < 0) CHECK_FALSE(has_rows(tile, rows));
        if (has_rows(tile, rows) && has_rows(peer, rows)) CHECK(std::abs(tile - peer) == 1);
      }
}

// kvq::plan_prefill (host): the grid covers every query row of the longest chunk, the workspace
// holds the transition records of every sequence, and bad shapes are refused with a Status.
#include <doctest/doctest.h>

#include <kvq/prefill/plan.hpp>

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
  kvq::PrefillShape odd_r = shape(2, 8, 2, 1000, 10, 20);
  odd_r.residual = 100;  // not a multiple of the page
  CHECK(kvq::plan_prefill(odd_r, 128, 64, 6144, 64, &p) == kvq::Status::kConfigMismatch);
}

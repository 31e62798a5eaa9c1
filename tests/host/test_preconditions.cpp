// Preconditions that used to crash or throw return a Status (or a documented 0) instead:
// reference::dequantize_sequence with a sequence outside the batch (test_bad_input.cpp), the
// planner's counts for shapes and formats validate() rejects (division by zero), and
// reference::HostCache built from impossible sizes (std::vector length errors, modulo by zero).
#include <climits>

#include "test_util.hpp"

namespace {

using namespace kvq_test;
using kvq::CacheFormat;
using kvq::ModelShape;

constexpr ModelShape kLlama3_8B{32, 8, 128};
const CacheFormat kI2{kvq::desc_int2(), kvq::desc_int2(), 64, 128};

// ---- planner ----------------------------------------------------------------------------------
TEST_CASE("preconditions: the planner's counts are 0, never a division by zero, where validate() fails") {
  const uint64_t budget = 100ull << 30;
  SUBCASE("tokens_that_fit with no KV heads (page_bytes 0)") {
    const ModelShape no_heads{32, 0, 128};
    REQUIRE(kvq::validate(no_heads, kI2) == Status::kInvalidShape);
    CHECK(kvq::page_bytes(no_heads, kI2) == 0u);
    CHECK(kvq::tokens_that_fit(budget, 64, no_heads, kI2) == 0);
    CHECK(kvq::sequences_that_fit(budget, 4096, no_heads, kI2) == 0);
    CHECK(kvq::tokens_that_fit(budget, 64, ModelShape{0, 8, 128}, kI2) == 0);   // no layers
    CHECK(kvq::tokens_that_fit(budget, 64, ModelShape{32, 8, 0}, kI2) == 0);    // head dim 0
    CHECK(kvq::tokens_that_fit(budget, 64, ModelShape{32, -8, 128}, kI2) == 0); // negative heads
  }
  SUBCASE("sequences_that_fit with page 0 (cold pages divide by the page)") {
    const CacheFormat page0{kvq::desc_int2(), kvq::desc_int2(), 0, 128};
    REQUIRE(kvq::validate(kLlama3_8B, page0) == Status::kConfigMismatch);
    CHECK(kvq::sequences_that_fit(budget, 4096, kLlama3_8B, page0) == 0);
    CHECK(kvq::tokens_that_fit(budget, 64, kLlama3_8B, page0) == 0);
    CHECK(kvq::cold_pages_for(4096, page0) == 0);
    CHECK(kvq::bytes_per_token(kLlama3_8B, page0) == 0.0);
    const CacheFormat negative_page{kvq::desc_int2(), kvq::desc_int2(), -64, 128};
    CHECK(kvq::sequences_that_fit(budget, 4096, kLlama3_8B, negative_page) == 0);
    CHECK(kvq::tokens_that_fit(budget, 64, kLlama3_8B, negative_page) == 0);
    CHECK(kvq::cold_pages_for(4096, negative_page) == 0);
  }
  SUBCASE("other formats validate() rejects, and a model dtype of no bytes") {
    const CacheFormat odd_residual{kvq::desc_int2(), kvq::desc_int2(), 64, 100};
    CHECK(kvq::sequences_that_fit(budget, 4096, kLlama3_8B, odd_residual) == 0);
    CHECK(kvq::tokens_that_fit(budget, 64, kLlama3_8B, odd_residual) == 0);
    CHECK(kvq::sequences_that_fit(budget, 4096, kLlama3_8B, kI2, 0) == 0);  // hot ring of 0 bytes
    CHECK(kvq::tokens_that_fit(budget, 64, kLlama3_8B, kI2, 0) == 0);
    CHECK(kvq::sequences_that_fit(budget, 4096, kLlama3_8B, kI2, -2) == 0);
  }
  SUBCASE("valid input is unchanged (the capacity test's hand case)") {
    CHECK(kvq::tokens_that_fit(budget, 64, kLlama3_8B, kI2) == 1050 * 64 + 191);
    CHECK(kvq::sequences_that_fit(budget, 131072, kLlama3_8B, kI2) == 33);
  }
  static_assert(kvq::tokens_that_fit(1ull << 40, 8, ModelShape{32, 0, 128}, CacheFormat{kvq::desc_int2(), kvq::desc_int2(), 64, 128}) == 0,
                "usable at compile time, and 0 rather than a division by zero");
  static_assert(kvq::sequences_that_fit(1ull << 40, 8, kLlama3_8B, CacheFormat{kvq::desc_int2(), kvq::desc_int2(), 0, 128}) == 0,
                "page 0 at compile time");
}

// ---- HostCache --------------------------------------------------------------------------------
using Cfg = CfgInt2;  // D 128, P 64

void expect_refused(int heads, int64_t pages, int slots, int residual, int max_pages, int batch, Status want,
                    const char* what) {
  const std::string label = what;
  CAPTURE(label);
  CHECK(HostCache<Cfg>::check(heads, pages, slots, residual, max_pages, batch) == want);
  HostCache<Cfg> c(heads, pages, slots, residual, max_pages, batch);  // must not throw or divide by zero
  CHECK(c.status() == want);
  CHECK(c.cold.empty());
  CHECK(c.hot_k.empty());
  CHECK(c.block_table.empty());
  CHECK(c.batch() == 0);
  CHECK(c.free_pages() == 0);
  const kvq::CacheView<kvq::bf16> v = c.view();
  CHECK(v.cold == nullptr);
  CHECK(v.hot_k == nullptr);
  CHECK(v.block_table == nullptr);
  CHECK(v.hot_slot == nullptr);
  CHECK_FALSE(c.reserve(0, 10));
  CHECK_FALSE(c.commit(0, 10));
  CHECK_FALSE(c.rollback(0, 0));
  CHECK_FALSE(c.release(0));
  // an entry point given the refused cache's view rejects it instead of touching memory
  std::vector<kvq::bf16> ko(8), vo(8);
  CHECK(kvq::reference::dequantize_sequence<Cfg>(v, 1, 0, 0, 0, ko.data(), vo.data()) == Status::kNullPointer);
}

TEST_CASE("preconditions: HostCache built from impossible sizes reports a Status instead of throwing") {
  expect_refused(2, -1, 1, 64, 4, 1, Status::kInvalidShape, "negative page count");
  expect_refused(2, int64_t(1) << 40, 1, 64, 4, 1, Status::kInvalidShape, "page ids past int32");
  expect_refused(0, 16, 1, 64, 4, 1, Status::kInvalidShape, "no KV heads");
  expect_refused(-2, 16, 1, 64, 4, 1, Status::kInvalidShape, "negative KV heads");
  expect_refused(65536, 16, 1, 64, 4, 1, Status::kInvalidShape, "KV heads past a grid dimension");
  expect_refused(2, 16, 0, 64, 4, 1, Status::kInvalidShape, "no hot slots (slot b % 0)");
  expect_refused(2, 16, -1, 64, 4, 1, Status::kInvalidShape, "negative slots");
  expect_refused(2, 16, 1, 64, -4, 1, Status::kInvalidShape, "negative table width");
  expect_refused(2, 16, 1, 64, 4, -1, Status::kInvalidShape, "negative batch");
  expect_refused(2, 16, 1, -64, 4, 1, Status::kConfigMismatch, "negative residual");
  expect_refused(2, 16, 1, 100, 4, 1, Status::kConfigMismatch, "residual not a multiple of P");
  expect_refused(2, 16, 1, INT_MAX / 64 * 64, 4, 1, Status::kConfigMismatch, "R + P past int32");
  expect_refused(65535, 16, INT_MAX, 1 << 30, 4, 1, Status::kInvalidShape, "hot rings larger than a vector holds");
  expect_refused(2, 16, 1, 64, INT_MAX, INT_MAX, Status::kInvalidShape, "a block table larger than a vector holds");
}

TEST_CASE("preconditions: HostCache with valid sizes works as before; sequences outside the batch are refused") {
  CHECK(HostCache<Cfg>::check(2, 16, 1, 64, 4, 1) == Status::kSuccess);
  CHECK(HostCache<Cfg>::check(2, 0, 1, 0, 0, 0) == Status::kSuccess);  // an empty pool and batch are valid sizes
  HostCache<Cfg> c(2, 16, 2, 64, 8, 2);
  REQUIRE(c.status() == Status::kSuccess);
  CHECK(c.batch() == 2);
  CHECK(c.free_pages() == 16);
  CHECK(c.hot_slot == std::vector<int32_t>{0, 1});
  CHECK(c.view().cold != nullptr);
  // sequence indices outside [0, batch) and negative counts change nothing
  const Snapshot<Cfg> snap(c);
  CHECK_FALSE(c.reserve(2, 10));
  CHECK_FALSE(c.reserve(-1, 10));
  CHECK_FALSE(c.reserve(0, -1));
  CHECK_FALSE(c.commit(2, 10));
  CHECK_FALSE(c.commit(-1, 10));
  CHECK_FALSE(c.commit(0, -5));
  CHECK_FALSE(c.rollback(2, 0));
  CHECK_FALSE(c.release(-1));
  CHECK(snap.unchanged(c));
  CHECK(c.free_pages() == 16);
  // and a real append through it still works
  const Seq<kvq::bf16> s = make_seq<kvq::bf16>(0x9e1, 300, 2, 128);
  REQUIRE(append_seq<Cfg>(c, s, 0, 300, 1) == Status::kSuccess);
  CHECK(c.len[1] == 300);
  CHECK(c.cold_len[1] == 192);
  CHECK(c.release(1));
  CHECK(c.free_pages() == 16);
}

}  // namespace

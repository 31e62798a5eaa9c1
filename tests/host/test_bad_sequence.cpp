// cache/bad_sequence.hpp and attention/bad_sequence.hpp: after a kernel set kFlagBadSequence, the
// host finds which sequences it skipped and why. Each reason must be the status the host reference
// returns for a batch where that sequence is the only bad one (the reference and the kernels share
// the per-sequence checks; the GPU tests tie the kernels to the reference).
#include <functional>

#include <kvq/attention/bad_sequence.hpp>

#include "test_util.hpp"

namespace {

using namespace kvq_test;
using kvq::BadSequence;
using Cfg = CfgInt2;  // D 128, P 64
using T = kvq::bf16;
constexpr int H = 2, D = 128, R = 64, P = 64, kSlots = 5;

bool same(const std::vector<BadSequence>& got, const std::vector<BadSequence>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].index != want[i].index || got[i].reason != want[i].reason) return false;
  return true;
}

std::string show(const std::vector<BadSequence>& v) {
  std::string s;
  for (const BadSequence& b : v) s += "{" + std::to_string(b.index) + ", " + kvq::to_string(b.reason) + "} ";
  return s.empty() ? "none" : s;
}

// Four sequences: 150 tokens (C 64), 100 (C 0), empty, 300 (C 192); a fifth hot slot spare.
struct Fixture {
  HostCache<Cfg> c = make_cache<Cfg>(H, R, 600, 4, 1);
  Seq<T> s = make_seq<T>(0xbad5, 1000, H, D);
  Fixture() {
    REQUIRE(append_seq<Cfg>(c, s, 0, 150, 0) == Status::kSuccess);
    REQUIRE(append_seq<Cfg>(c, s, 0, 100, 1) == Status::kSuccess);
    REQUIRE(append_seq<Cfg>(c, s, 0, 300, 3) == Status::kSuccess);
    REQUIRE(c.cold_len == std::vector<int32_t>{64, 0, 0, 192});
  }
};

// ---- append ------------------------------------------------------------------------------------
struct AppendArgs {
  kvq::CacheView<T> view;
  std::vector<int32_t> len, cold, cu, table, slots;
  std::vector<T> rows;
  kvq::AppendBatch<T> batch;
};

// The next step: 70, 100, 10 and 5 new tokens (pages reserved).
AppendArgs next_append(Fixture& f) {
  const std::vector<int32_t> counts{70, 100, 10, 5};
  for (int b = 0; b < 4; ++b) REQUIRE(f.c.reserve(b, counts[size_t(b)]));
  AppendArgs a;
  a.len = f.c.len;
  a.cold = f.c.cold_len;
  a.cu = {0, 70, 170, 180, 185};
  a.table = f.c.block_table;
  a.slots = f.c.hot_slot;
  a.rows = make_rows<T>(0xbad6, 185, H, D);
  a.view = f.c.view();
  a.view.block_table = a.table.data();
  a.view.hot_slot = a.slots.data();
  a.batch.batch = 4;
  a.batch.lengths = kvq::SeqLengths{a.len.data(), a.cold.data()};
  a.batch.cu_new = a.cu.data();
  a.batch.new_k = a.rows.data();
  a.batch.new_v = a.rows.data();
  return a;
}

void expect_append(const std::function<void(AppendArgs&)>& mutate, const std::vector<BadSequence>& want, const char* what) {
  Fixture f;
  AppendArgs a = next_append(f);
  mutate(a);
  const std::string label = what;
  CAPTURE(label);
  const std::vector<BadSequence> got = kvq::bad_append_sequences(a.view, a.batch, P);
  CHECK_MESSAGE(same(got, want), "got " << show(got) << ", want " << show(want));
  if (want.size() == 1 && want[0].index >= 0)  // the reference refuses the batch for that sequence's reason
    CHECK(kvq::reference::append<Cfg>(a.view, a.batch) == want[0].reason);
}

TEST_CASE("bad sequences: append, each sequence's reason, several at once") {
  const size_t row = 10;  // block-table entries per sequence (600 / 64 + 1)
  expect_append([](AppendArgs&) {}, {}, "valid");
  expect_append([](AppendArgs& a) { a.len[1] = -1; }, {{1, Status::kInvalidLength}}, "len < 0");
  expect_append([](AppendArgs& a) { a.cold[3] = 160; }, {{3, Status::kInvalidLength}}, "C not page-aligned");
  expect_append([](AppendArgs& a) { a.slots[2] = kSlots; }, {{2, Status::kInvalidHotSlot}}, "slot out of range");
  expect_append([&](AppendArgs& a) { a.table[1] = -1; }, {{0, Status::kInvalidPageId}}, "seq 0's page turning cold");
  expect_append([&](AppendArgs& a) { a.table[row + 1] = int32_t(a.view.num_pages); }, {{1, Status::kInvalidPageId}},
                "seq 1's second page turning cold");
  expect_append(
      [&](AppendArgs& a) {  // rows of 2 entries: sequence 3 holds 3 cold pages
        for (size_t b = 0; b < 4; ++b)
          for (size_t p = 0; p < 2; ++p) a.table[b * 2 + p] = a.table[b * row + p];
        a.view.max_pages_per_seq = 2;
      },
      {{3, Status::kBlockTableOverflow}}, "narrow table");
  expect_append([](AppendArgs& a) { a.cu[2] = 190; }, {{1, Status::kInvalidShape}, {2, Status::kInvalidLength}},
                "rows past cu_new[batch], then a negative count");
  expect_append(
      [&](AppendArgs& a) {
        a.table[1] = -7;  // seq 0's page turning cold (tokens 64..127)
        a.len[1] = -1;
        a.slots[2] = -1;
      },
      {{0, Status::kInvalidPageId}, {1, Status::kInvalidLength}, {2, Status::kInvalidHotSlot}}, "three at once");
  // pages already cold are not the append's business (seq 3 turns no page cold in this step)
  expect_append([&](AppendArgs& a) { a.table[3 * row + 1] = -7; }, {}, "an old cold page");
  expect_append([](AppendArgs& a) { a.view.hot_k = nullptr; }, {{-1, Status::kNullPointer}}, "the call itself");
  expect_append([](AppendArgs& a) { a.batch.batch = -1; }, {{-1, Status::kInvalidShape}}, "negative batch");
  expect_append([](AppendArgs& a) { a.batch.batch = 0; }, {}, "empty batch");
  // an unused block-table entry may hold anything, as in the kernel
  expect_append([&](AppendArgs& a) { a.table[2 * row + 5] = -1; }, {}, "unused entry");

  Fixture f;
  AppendArgs a = next_append(f);
  CHECK(same(kvq::bad_append_sequences(a.view, a.batch, P, 50), {{0, Status::kInvalidShape}, {1, Status::kInvalidShape}}));
  CHECK(same(kvq::bad_append_sequences(a.view, a.batch, P, -1), {{-1, Status::kInvalidShape}}));
  CHECK(same(kvq::bad_append_sequences(a.view, a.batch, 0), {{-1, Status::kConfigMismatch}}));
}

// ---- rollback ----------------------------------------------------------------------------------
TEST_CASE("bad sequences: rollback") {
  const std::vector<int32_t> len{10, 20, 130, 40}, cold{0, 0, 64, 0};
  std::vector<int32_t> accepted{5, -1, 100, 40};
  CHECK(kvq::bad_rollback_sequences(len.data(), cold.data(), accepted.data(), 4).empty());
  accepted = {11, -5, 63, 0};  // above the length; no change; below the cold length; fine
  CHECK(same(kvq::bad_rollback_sequences(len.data(), cold.data(), accepted.data(), 4),
             {{0, Status::kInvalidLength}, {2, Status::kInvalidLength}}));
  CHECK(same(kvq::bad_rollback_sequences(len.data(), cold.data(), accepted.data(), -1), {{-1, Status::kInvalidShape}}));
  CHECK(same(kvq::bad_rollback_sequences(nullptr, cold.data(), accepted.data(), 4), {{-1, Status::kNullPointer}}));
  CHECK(kvq::bad_rollback_sequences(nullptr, nullptr, nullptr, 0).empty());
}

// ---- dequantize --------------------------------------------------------------------------------
struct DeqArgs {
  kvq::CacheView<T> view;
  std::vector<int32_t> len, cold, cu, table, slots;
  int64_t max_len = 300;
};

DeqArgs current(Fixture& f) {
  DeqArgs a;
  a.len = f.c.len;
  a.cold = f.c.cold_len;
  a.cu = {0, 150, 250, 250, 550};
  a.table = f.c.block_table;
  a.slots = f.c.hot_slot;
  a.view = f.c.view();
  a.view.block_table = a.table.data();
  a.view.hot_slot = a.slots.data();
  return a;
}

void expect_dequantize(const std::function<void(DeqArgs&)>& mutate, const std::vector<BadSequence>& want, const char* what) {
  Fixture f;
  DeqArgs a = current(f);
  mutate(a);
  const std::string label = what;
  CAPTURE(label);
  const std::vector<BadSequence> got =
      kvq::bad_dequantize_sequences(a.view, kvq::SeqLengths{a.len.data(), a.cold.data()}, 4, a.cu.data(), a.max_len, P);
  CHECK_MESSAGE(same(got, want), "got " << show(got) << ", want " << show(want));
  // the host reference's per-sequence checks agree on lengths, slots and pages
  if (want.size() == 1 && want[0].reason != Status::kInvalidShape) {
    std::vector<T> ko(size_t(600) * H * D), vo(ko.size());
    const int b = want[0].index;
    CHECK(kvq::reference::dequantize_sequence<Cfg>(a.view, 4, b, a.len[size_t(b)], a.cold[size_t(b)], ko.data(), vo.data()) ==
          want[0].reason);
  }
}

TEST_CASE("bad sequences: dequantize") {
  const size_t row = 10;
  expect_dequantize([](DeqArgs&) {}, {}, "valid");
  expect_dequantize([](DeqArgs& a) { a.cold[0] = 0; }, {{0, Status::kInvalidLength}}, "hot span too long");
  expect_dequantize([](DeqArgs& a) { a.cold[0] = 128; }, {{0, Status::kInvalidPageId}}, "a cold page never given");
  expect_dequantize([](DeqArgs& a) { a.slots[1] = -1; }, {{1, Status::kInvalidHotSlot}}, "slot < 0");
  expect_dequantize([&](DeqArgs& a) { a.table[3 * row + 2] = -1; }, {{3, Status::kInvalidPageId}}, "seq 3's last cold page");
  expect_dequantize([&](DeqArgs& a) { a.table[3 * row + 3] = -1; }, {}, "a page past the cold length");
  expect_dequantize([](DeqArgs& a) { a.cu[2] = 249; }, {{1, Status::kInvalidShape}}, "fewer rows than tokens");
  expect_dequantize([](DeqArgs& a) { a.max_len = 200; }, {{3, Status::kInvalidShape}}, "len above max_len");
  expect_dequantize([](DeqArgs& a) { a.max_len = 0; }, {}, "max_len 0: nothing runs");
  expect_dequantize([](DeqArgs& a) { a.view.num_slots = 0; }, {{-1, Status::kInvalidShape}}, "the call itself");
}

// ---- attention ---------------------------------------------------------------------------------
struct AttnArgs {
  kvq::CacheView<T> view;
  AttnCall<T> call;
  std::vector<int32_t> table, slots;
  kvq::AttentionBatch<T> batch;
};

// 3, 100, 1 and 2 query tokens after the current lengths (seq 1's chunk turns pages cold).
AttnArgs next_attention(Fixture& f) {
  AttnArgs a;
  a.call.num_q_heads = 2 * H;
  a.call.len = f.c.len;
  a.call.cold = f.c.cold_len;
  a.call.cu_q = {0, 3, 103, 104, 106};
  a.call.q = make_rows<T>(0xbad7, 106, 2 * H, D);
  a.call.new_k = make_rows<T>(0xbad8, 106, H, D);
  a.call.new_v = make_rows<T>(0xbad9, 106, H, D);
  a.call.softmax_scale = 0.1f;
  a.table = f.c.block_table;
  a.slots = f.c.hot_slot;
  a.view = f.c.view();
  a.view.block_table = a.table.data();
  a.view.hot_slot = a.slots.data();
  a.batch = a.call.batch();
  return a;
}

constexpr kvq::AttentionLimits kWide{1 << 20, 1 << 20, 1 << 20};

void expect_attention(const std::function<void(AttnArgs&)>& mutate, const std::vector<BadSequence>& want, const char* what,
                      const kvq::AttentionLimits& limits = kWide) {
  Fixture f;
  AttnArgs a = next_attention(f);
  mutate(a);
  a.batch = a.call.batch();
  const std::string label = what;
  CAPTURE(label);
  const std::vector<BadSequence> got = kvq::bad_attention_sequences(a.view, a.batch, P, limits);
  CHECK_MESSAGE(same(got, want), "got " << show(got) << ", want " << show(want));
  if (want.size() == 1 && want[0].index >= 0 && limits.max_q_len == kWide.max_q_len) {
    std::vector<float> out(size_t(a.call.cu_q.back() > 0 ? a.call.cu_q.back() : 1) * 2 * H * D);
    CHECK(kvq::reference::attention<Cfg>(a.view, a.batch, out.data()) == want[0].reason);
  }
}

TEST_CASE("bad sequences: decode / prefill batches") {
  const size_t row = 10;
  expect_attention([](AttnArgs&) {}, {}, "valid");
  expect_attention([](AttnArgs& a) { a.call.len[0] = 192; }, {{0, Status::kInvalidLength}}, "hot span too long");
  expect_attention([](AttnArgs& a) { a.slots[3] = kSlots; }, {{3, Status::kInvalidHotSlot}}, "slot == num_slots");
  expect_attention([&](AttnArgs& a) { a.table[0] = -1; }, {{0, Status::kInvalidPageId}}, "seq 0's cold page");
  expect_attention([&](AttnArgs& a) { a.table[3 * row + 1] = 1 << 30; }, {{3, Status::kInvalidPageId}}, "seq 3's second page");
  // pages turning cold in this step are read from the ring / new tokens, not the pool
  expect_attention([&](AttnArgs& a) { a.table[row + 0] = -1; }, {}, "seq 1's page turning cold");
  expect_attention([](AttnArgs& a) { a.call.cu_q[4] = 103; }, {{2, Status::kInvalidShape}, {3, Status::kInvalidLength}},
                   "cu_q[batch] before cu_q[3]: seq 2's rows outside, seq 3's count negative");
  expect_attention([](AttnArgs& a) { a.call.cu_q[4] = 104; }, {}, "q_len 0");
  expect_attention(
      [&](AttnArgs& a) {
        a.call.cold[1] = 32;
        a.table[3 * row] = -1;
      },
      {{1, Status::kInvalidLength}, {3, Status::kInvalidPageId}}, "two at once");
  expect_attention([](AttnArgs& a) { a.call.softmax_scale = 0.0f; }, {{-1, Status::kInvalidShape}}, "the call itself");
  // beyond the plan: seq 1's chunk of 100 > max_q_len 16; rows past total_q; tokens past max_tokens
  expect_attention([](AttnArgs&) {}, {{1, Status::kInvalidShape}}, "q_len > max_q_len", kvq::AttentionLimits{16, 1 << 20, 1 << 20});
  expect_attention([](AttnArgs&) {}, {{3, Status::kInvalidShape}}, "rows past total_q", kvq::AttentionLimits{128, 105, 1 << 20});
  expect_attention([](AttnArgs&) {}, {{3, Status::kInvalidShape}}, "len + q_len > max_tokens", kvq::AttentionLimits{128, 106, 301});
}

}  // namespace

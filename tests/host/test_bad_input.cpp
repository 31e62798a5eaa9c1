// Every host entry point (reference::append, reference::attention, reference::dequantize_sequence)
// returns the right Status for bad arguments, and writes NOTHING when it rejects them.
#include <climits>
#include <functional>

#include "test_util.hpp"

namespace {

using namespace kvq_test;
using Cfg = CfgInt2;  // P 64
using T = kvq::bf16;
constexpr int H = 2, D = 128, R = 64, kSlots = 3;

// Two sequences: 0 holds 150 tokens (C 64), 1 holds 100 tokens (C 0).
struct Fixture {
  HostCache<Cfg> c = make_cache<Cfg>(H, R, 600, 2, 1);  // 10 block-table entries per sequence
  Seq<T> s0 = make_seq<T>(0xbad0, 1000, H, D), s1 = make_seq<T>(0xbad1, 1000, H, D);
  Fixture() {
    REQUIRE(append_seq<Cfg>(c, s0, 0, 150, 0) == Status::kSuccess);
    REQUIRE(append_seq<Cfg>(c, s1, 0, 100, 1) == Status::kSuccess);
    REQUIRE(c.cold_len == std::vector<int32_t>{64, 0});
    // pages for the append below: seq 0 150 -> 220 (C 64 -> 128), seq 1 100 -> 200 (C 0 -> 128)
    REQUIRE(c.reserve(0, 70));
    REQUIRE(c.reserve(1, 100));
    poison_rings<Cfg>(c, 0x1234);  // recognisable ring contents (the reference never validates them)
  }
};

// ---- append --------------------------------------------------------------------------------------
struct AppendArgs {
  kvq::CacheView<T> view;
  std::vector<int32_t> len, cold, cu, table, slots, cold_out;
  std::vector<T> nk, nv;
  kvq::AppendBatch<T> batch;
};

AppendArgs valid_append(Fixture& f) {
  AppendArgs a;
  a.len = f.c.len;
  a.cold = f.c.cold_len;
  a.cu = {0, 70, 170};
  a.table = f.c.block_table;
  a.slots = f.c.hot_slot;
  a.cold_out = {-7, -7};
  a.nk.resize(size_t(1000) * H * D);  // room for any mutated cu below
  a.nv.resize(a.nk.size());
  std::memcpy(a.nk.data(), f.s0.k_row(150), 70 * H * D * sizeof(T));
  std::memcpy(a.nv.data(), f.s0.v_row(150), 70 * H * D * sizeof(T));
  std::memcpy(a.nk.data() + 70 * H * D, f.s1.k_row(100), 100 * H * D * sizeof(T));
  std::memcpy(a.nv.data() + 70 * H * D, f.s1.v_row(100), 100 * H * D * sizeof(T));
  a.view = f.c.view();
  a.view.block_table = a.table.data();
  a.view.hot_slot = a.slots.data();
  a.batch.batch = 2;
  a.batch.lengths = kvq::SeqLengths{a.len.data(), a.cold.data()};
  a.batch.cu_new = a.cu.data();
  a.batch.new_k = a.nk.data();
  a.batch.new_v = a.nv.data();
  a.batch.cold_out = a.cold_out.data();
  return a;
}

void expect_append(const std::function<void(AppendArgs&)>& mutate, Status want, const char* what) {
  Fixture f;
  AppendArgs a = valid_append(f);
  mutate(a);
  const Snapshot<Cfg> snap(f.c);
  uint32_t flags = 0x80u;
  const Status st = kvq::reference::append<Cfg>(a.view, a.batch, &flags);
  const std::string label = what;
  CAPTURE(label);
  CHECK(st == want);
  CHECK(snap.unchanged(f.c));
  CHECK(flags == 0x80u);
  CHECK(a.cold_out == std::vector<int32_t>{-7, -7});
}

TEST_CASE("bad input: the unmutated append arguments are valid (the fixture is sound)") {
  Fixture f;
  AppendArgs a = valid_append(f);
  // an unused block-table entry may hold anything
  a.table[5] = -1;
  a.table[size_t(f.c.block_table.size() / 2) + 7] = 1 << 30;
  const Snapshot<Cfg> snap(f.c);
  REQUIRE(kvq::reference::append<Cfg>(a.view, a.batch) == Status::kSuccess);
  CHECK(a.cold_out == std::vector<int32_t>{128, 128});
  CHECK_FALSE(snap.unchanged(f.c));  // it did write: the rejection checks below are not vacuous
}

TEST_CASE("bad input: append with null pointers, bad shapes, residual or cu_new") {
  SUBCASE("append with null pointers returns kNullPointer and writes nothing") {
    expect_append([](AppendArgs& a) { a.view.cold = nullptr; }, Status::kNullPointer, "cold");
    expect_append([](AppendArgs& a) { a.view.hot_k = nullptr; }, Status::kNullPointer, "hot_k");
    expect_append([](AppendArgs& a) { a.view.hot_v = nullptr; }, Status::kNullPointer, "hot_v");
    expect_append([](AppendArgs& a) { a.view.block_table = nullptr; }, Status::kNullPointer, "block_table");
    expect_append([](AppendArgs& a) { a.view.hot_slot = nullptr; }, Status::kNullPointer, "hot_slot");
    expect_append([](AppendArgs& a) { a.batch.lengths.len = nullptr; }, Status::kNullPointer, "len");
    expect_append([](AppendArgs& a) { a.batch.lengths.cold = nullptr; }, Status::kNullPointer, "cold lengths");
    expect_append([](AppendArgs& a) { a.batch.cu_new = nullptr; }, Status::kNullPointer, "cu_new");
    expect_append([](AppendArgs& a) { a.batch.new_k = nullptr; }, Status::kNullPointer, "new_k");
    expect_append([](AppendArgs& a) { a.batch.new_v = nullptr; }, Status::kNullPointer, "new_v");
  }
  SUBCASE("append with bad shapes, residual and cu_new") {
    expect_append([](AppendArgs& a) { a.batch.batch = -1; }, Status::kInvalidShape, "batch < 0");
    expect_append([](AppendArgs& a) { a.view.num_kv_heads = 0; }, Status::kInvalidShape, "heads 0");
    expect_append([](AppendArgs& a) { a.view.num_kv_heads = 65536; }, Status::kInvalidShape, "heads past a grid dimension");
    expect_append([](AppendArgs& a) { a.view.num_slots = 0; }, Status::kInvalidShape, "slots 0");
    expect_append([](AppendArgs& a) { a.view.num_pages = -1; }, Status::kInvalidShape, "pages < 0");
    expect_append([](AppendArgs& a) { a.view.max_pages_per_seq = -1; }, Status::kInvalidShape, "table width < 0");
    expect_append([](AppendArgs& a) { a.view.residual = 32; }, Status::kConfigMismatch, "residual not a multiple of P");
    expect_append([](AppendArgs& a) { a.view.residual = -64; }, Status::kConfigMismatch, "residual < 0");
    expect_append([](AppendArgs& a) { a.view.residual = INT32_MAX / 64 * 64; }, Status::kConfigMismatch, "R + P past int32");
    expect_append([](AppendArgs& a) { a.cu[0] = 1; }, Status::kInvalidShape, "cu_new[0] != 0");
    expect_append([](AppendArgs& a) { a.cu[1] = -5; }, Status::kInvalidLength, "negative new tokens");
    // Rows outside the batch's cu_new[batch] rows: sequence 0 (checked first) fails on them.
    expect_append([](AppendArgs& a) { a.cu[2] = 60; }, Status::kInvalidShape, "rows past cu_new[batch] (a decreasing cu_new)");
    expect_append([](AppendArgs& a) { a.cu[1] = 171; }, Status::kInvalidShape, "rows past cu_new[batch]");
  }
  SUBCASE("a sequence whose rows start before row 0 is rejected by itself, the one after a negative count too") {
    Fixture f;
    AppendArgs a = valid_append(f);
    a.cu = {0, -5, 170};  // sequence 0: -5 rows (a length error); sequence 1: rows -5 .. 169
    a.batch.cu_new = a.cu.data();
    CHECK(kvq::plan_sequence(a.view, a.batch, 0, Cfg::page).status == Status::kInvalidLength);
    CHECK(kvq::plan_sequence(a.view, a.batch, 1, Cfg::page).status == Status::kInvalidShape);
    a.cu = {0, 70, 170};
    CHECK(kvq::plan_sequence(a.view, a.batch, 0, Cfg::page).status == Status::kSuccess);
    CHECK(kvq::plan_sequence(a.view, a.batch, 1, Cfg::page).status == Status::kSuccess);
  }
}

TEST_CASE("bad input: append with inconsistent lengths returns kInvalidLength / kBlockTableOverflow") {
  expect_append([](AppendArgs& a) { a.len[1] = -1; }, Status::kInvalidLength, "len < 0");
  expect_append([](AppendArgs& a) { a.cold[1] = -64; }, Status::kInvalidLength, "C < 0");
  expect_append([](AppendArgs& a) { a.cold[1] = 128; }, Status::kInvalidLength, "C > L");
  expect_append([](AppendArgs& a) { a.cold[0] = 32; }, Status::kInvalidLength, "C not page-aligned");
  expect_append([](AppendArgs& a) { a.len[0] = 192; }, Status::kInvalidLength, "hot span L - C >= R + P");
  expect_append([](AppendArgs& a) { a.cold[0] = 0; }, Status::kInvalidLength, "hot span with C = 0");
  // seq 1: 100 -> 800 tokens needs 11 pages, the table holds 10 per sequence
  expect_append([](AppendArgs& a) { a.cu[2] = 770; }, Status::kBlockTableOverflow, "table overflow");
  expect_append([](AppendArgs& a) { a.view.max_pages_per_seq = 1; }, Status::kBlockTableOverflow, "narrow table");
}

TEST_CASE("bad input: append with page ids or hot slots out of range, or duplicated slots") {
  SUBCASE("append with page ids out of range returns kInvalidPageId") {
    const size_t row = 10;  // max_pages_per_seq of the fixture (600 / 64 + 1)
    expect_append([&](AppendArgs& a) { a.table[1] = int32_t(a.view.num_pages); }, Status::kInvalidPageId, "seq 0 page 1 = num_pages");
    expect_append([&](AppendArgs& a) { a.table[1] = -1; }, Status::kInvalidPageId, "seq 0 page 1 = -1");
    expect_append([&](AppendArgs& a) { a.table[row] = 1 << 30; }, Status::kInvalidPageId, "seq 1 page 0 huge");
    expect_append([&](AppendArgs& a) { a.table[row] = -5; }, Status::kInvalidPageId, "seq 1 page 0 negative");
    expect_append([&](AppendArgs& a) { a.view.num_pages = a.table[row]; }, Status::kInvalidPageId, "pool shrunk under a page");
  }
  SUBCASE("append with hot slots out of range or duplicated returns kInvalidHotSlot") {
    expect_append([](AppendArgs& a) { a.slots[1] = kSlots; }, Status::kInvalidHotSlot, "slot == num_slots");
    expect_append([](AppendArgs& a) { a.slots[0] = -1; }, Status::kInvalidHotSlot, "slot < 0");
    expect_append([](AppendArgs& a) { a.slots[1] = a.slots[0]; }, Status::kInvalidHotSlot, "duplicate slots");
    expect_append([](AppendArgs& a) { a.view.num_slots = 1; }, Status::kInvalidHotSlot, "fewer slots");
  }
}

// ---- attention -----------------------------------------------------------------------------------
struct AttnArgs {
  kvq::CacheView<T> view;
  AttnCall<T> call;
  std::vector<int32_t> table, slots;
  kvq::AttentionBatch<T> batch;
  std::vector<float> out;
  float* out_ptr = nullptr;
};

// seq 0: decode-like 3 tokens at 150 (C 64); seq 1: a 100-token chunk at 100 (C 0, turns pages 0, 1).
AttnArgs valid_attention(Fixture& f) {
  AttnArgs a;
  a.call.num_q_heads = 2 * H;
  a.call.len = {150, 100};
  a.call.cold = {64, 0};
  a.call.cu_q = {0, 3, 103};
  a.call.q = make_rows<T>(0xbad2, 103, 2 * H, D);
  a.call.new_k.assign(f.s0.k_row(150), f.s0.k_row(153));
  a.call.new_v.assign(f.s0.v_row(150), f.s0.v_row(153));
  a.call.new_k.insert(a.call.new_k.end(), f.s1.k_row(100), f.s1.k_row(200));
  a.call.new_v.insert(a.call.new_v.end(), f.s1.v_row(100), f.s1.v_row(200));
  a.call.softmax_scale = 0.1f;
  a.table = f.c.block_table;
  a.slots = f.c.hot_slot;
  a.view = f.c.view();
  a.view.block_table = a.table.data();
  a.view.hot_slot = a.slots.data();
  a.batch = a.call.batch();
  a.out.assign(size_t(103) * 2 * H * D, -3.25f);
  a.out_ptr = a.out.data();
  return a;
}

void expect_attention(const std::function<void(AttnArgs&)>& mutate, Status want, const char* what) {
  Fixture f;
  AttnArgs a = valid_attention(f);
  mutate(a);
  const Snapshot<Cfg> snap(f.c);
  const Status st = kvq::reference::attention<Cfg>(a.view, a.batch, a.out_ptr);
  const std::string label = what;
  CAPTURE(label);
  CHECK(st == want);
  CHECK(snap.unchanged(f.c));
  CHECK(std::all_of(a.out.begin(), a.out.end(), [](float x) { return x == -3.25f; }));
}

TEST_CASE("bad input: the unmutated attention arguments are valid, unused table entries are not checked") {
  Fixture f;
  AttnArgs a = valid_attention(f);
  a.table[10] = -1;  // seq 1 page 0: turns cold in this step, read from ring/new tokens, not the pool
  a.table[4] = -1;   // seq 0 page 4: beyond its cold pages
  REQUIRE(kvq::reference::attention<Cfg>(a.view, a.batch, a.out_ptr) == Status::kSuccess);
  CHECK(std::none_of(a.out.begin(), a.out.end(), [](float x) { return x == -3.25f; }));
}

TEST_CASE("bad input: attention with null pointers or bad shapes") {
  expect_attention([](AttnArgs& a) { a.view.cold = nullptr; }, Status::kNullPointer, "cold");
  expect_attention([](AttnArgs& a) { a.view.hot_k = nullptr; }, Status::kNullPointer, "hot_k");
  expect_attention([](AttnArgs& a) { a.view.hot_v = nullptr; }, Status::kNullPointer, "hot_v");
  expect_attention([](AttnArgs& a) { a.view.block_table = nullptr; }, Status::kNullPointer, "block_table");
  expect_attention([](AttnArgs& a) { a.view.hot_slot = nullptr; }, Status::kNullPointer, "hot_slot");
  expect_attention([](AttnArgs& a) { a.batch.lengths.len = nullptr; }, Status::kNullPointer, "len");
  expect_attention([](AttnArgs& a) { a.batch.lengths.cold = nullptr; }, Status::kNullPointer, "cold lengths");
  expect_attention([](AttnArgs& a) { a.batch.cu_q = nullptr; }, Status::kNullPointer, "cu_q");
  expect_attention([](AttnArgs& a) { a.batch.q = nullptr; }, Status::kNullPointer, "q");
  expect_attention([](AttnArgs& a) { a.batch.new_k = nullptr; }, Status::kNullPointer, "new_k");
  expect_attention([](AttnArgs& a) { a.batch.new_v = nullptr; }, Status::kNullPointer, "new_v");
  expect_attention([](AttnArgs& a) { a.out_ptr = nullptr; }, Status::kNullPointer, "out");
  expect_attention([](AttnArgs& a) { a.batch.batch = -1; }, Status::kInvalidShape, "batch < 0");
  expect_attention([](AttnArgs& a) { a.batch.num_q_heads = 0; }, Status::kInvalidShape, "no query heads");
  expect_attention([](AttnArgs& a) { a.batch.num_q_heads = 3; }, Status::kInvalidShape, "q heads not a multiple of KV heads");
  expect_attention([](AttnArgs& a) { a.batch.softmax_scale = 0.0f; }, Status::kInvalidShape, "scale 0");
  expect_attention([](AttnArgs& a) { a.batch.softmax_scale = std::nanf(""); }, Status::kInvalidShape, "scale NaN");
  expect_attention([](AttnArgs& a) { a.batch.softcap = -1.0f; }, Status::kInvalidShape, "softcap < 0");
  expect_attention([](AttnArgs& a) { a.batch.softcap = std::nanf(""); }, Status::kInvalidShape, "softcap NaN");
  expect_attention([](AttnArgs& a) { a.view.num_kv_heads = 0; }, Status::kInvalidShape, "heads 0");
  expect_attention([](AttnArgs& a) { a.view.num_kv_heads = 65536; }, Status::kInvalidShape, "heads past a grid dimension");
  expect_attention([](AttnArgs& a) { a.view.residual = 96; }, Status::kConfigMismatch, "residual not a multiple of P");
}

TEST_CASE("bad input: attention with bad lengths, pages or slots") {
  expect_attention([](AttnArgs& a) { a.call.len[0] = -1; }, Status::kInvalidLength, "len < 0");
  expect_attention([](AttnArgs& a) { a.call.cold[0] = 32; }, Status::kInvalidLength, "C not page-aligned");
  expect_attention([](AttnArgs& a) { a.call.cold[1] = 256; }, Status::kInvalidLength, "C > len + q_len");
  expect_attention([](AttnArgs& a) { a.call.len[0] = 192; }, Status::kInvalidLength, "hot span too long");
  expect_attention([](AttnArgs& a) { a.call.cu_q[1] = -1; }, Status::kInvalidLength, "negative q_len");
  // Rows outside the batch's cu_q[batch] rows (sequence 0 is checked first).
  expect_attention([](AttnArgs& a) { a.call.cu_q[2] = 2; }, Status::kInvalidShape, "rows past cu_q[batch] (a decreasing cu_q)");
  expect_attention([](AttnArgs& a) { a.call.cu_q[1] = 104; }, Status::kInvalidShape, "rows past cu_q[batch]");
  expect_attention([](AttnArgs& a) { a.call.cu_q[0] = -1; }, Status::kInvalidShape, "rows before row 0");
  expect_attention([](AttnArgs& a) { a.view.max_pages_per_seq = 0; }, Status::kBlockTableOverflow, "table overflow");
  expect_attention([](AttnArgs& a) { a.table[0] = int32_t(a.view.num_pages); }, Status::kInvalidPageId, "page == num_pages");
  expect_attention([](AttnArgs& a) { a.table[0] = -1; }, Status::kInvalidPageId, "page < 0");
  expect_attention([](AttnArgs& a) { a.slots[1] = kSlots; }, Status::kInvalidHotSlot, "slot == num_slots");
  expect_attention([](AttnArgs& a) { a.slots[0] = -2; }, Status::kInvalidHotSlot, "slot < 0");
}

TEST_CASE("bad input: attention rejects exactly the sequences whose rows lie outside the batch's") {
  Fixture f;
  AttnArgs a = valid_attention(f);
  a.call.cu_q = {0, -1, 103};  // sequence 0: -1 rows (a length error); sequence 1: rows -1 .. 102
  a.batch.cu_q = a.call.cu_q.data();
  CHECK(kvq::resolve_attention(a.view, a.batch, 0, Cfg::page).status == Status::kInvalidLength);
  CHECK(kvq::resolve_attention(a.view, a.batch, 1, Cfg::page).status == Status::kInvalidShape);
  a.call.cu_q = {0, 3, 103};
  a.batch.cu_q = a.call.cu_q.data();
  CHECK(kvq::resolve_attention(a.view, a.batch, 0, Cfg::page).status == Status::kSuccess);
  CHECK(kvq::resolve_attention(a.view, a.batch, 1, Cfg::page).status == Status::kSuccess);
  // A row count outside int32, either way, is a length error, not a wrapped count.
  a.call.cu_q = {INT32_MIN, 3, 103};
  a.batch.cu_q = a.call.cu_q.data();
  CHECK(kvq::resolve_attention(a.view, a.batch, 0, Cfg::page).status == Status::kInvalidLength);
  a.call.cu_q = {0, INT32_MAX, INT32_MIN};  // sequence 1: -(2^32 - 1) rows, +1 if narrowed to int32
  a.batch.cu_q = a.call.cu_q.data();
  CHECK(kvq::resolve_attention(a.view, a.batch, 1, Cfg::page).status == Status::kInvalidLength);
  CHECK(kvq::batch_rows_of(a.batch.cu_q, 1, 2).count() == int64_t(INT32_MIN) - INT32_MAX);
  CHECK_FALSE(kvq::batch_rows_of(a.batch.cu_q, 1, 2).inside());
}

// ---- dequantize_sequence -------------------------------------------------------------------------
struct DeqArgs {
  kvq::CacheView<T> view;
  std::vector<int32_t> table, slots;
  int batch = 2, b = 0;
  int64_t len = 150, cold = 64;
  std::vector<T> ko, vo;
  T* k_ptr = nullptr;
  T* v_ptr = nullptr;
};

void expect_dequantize(const std::function<void(DeqArgs&)>& mutate, Status want, const char* what) {
  Fixture f;
  DeqArgs a;
  a.table = f.c.block_table;
  a.slots = f.c.hot_slot;
  a.view = f.c.view();
  a.view.block_table = a.table.data();
  a.view.hot_slot = a.slots.data();
  a.ko.assign(size_t(400) * H * D, T{0x5a5a});
  a.vo = a.ko;
  a.k_ptr = a.ko.data();
  a.v_ptr = a.vo.data();
  mutate(a);
  const Snapshot<Cfg> snap(f.c);
  const Status st = kvq::reference::dequantize_sequence<Cfg>(a.view, a.batch, a.b, a.len, a.cold, a.k_ptr, a.v_ptr);
  const std::string label = what;
  CAPTURE(label);
  CHECK(st == want);
  CHECK(snap.unchanged(f.c));
  if (want != Status::kSuccess) {
    CHECK(std::all_of(a.ko.begin(), a.ko.end(), [](T x) { return x.bits == 0x5a5a; }));
    CHECK(std::all_of(a.vo.begin(), a.vo.end(), [](T x) { return x.bits == 0x5a5a; }));
  } else {
    CHECK(std::none_of(a.ko.begin(), a.ko.begin() + std::ptrdiff_t(a.len) * H * D, [](T x) { return x.bits == 0x5a5a; }));
  }
}

TEST_CASE("bad input: dequantize_sequence returns the right status and writes nothing on rejection") {
  expect_dequantize([](DeqArgs&) {}, Status::kSuccess, "valid");
  expect_dequantize([](DeqArgs& a) { a.b = 1;
    a.len = 100;
    a.cold = 0; }, Status::kSuccess, "valid, seq 1");
  expect_dequantize([](DeqArgs& a) { a.view.cold = nullptr; }, Status::kNullPointer, "cold");
  expect_dequantize([](DeqArgs& a) { a.view.hot_k = nullptr; }, Status::kNullPointer, "hot_k");
  expect_dequantize([](DeqArgs& a) { a.view.hot_v = nullptr; }, Status::kNullPointer, "hot_v");
  expect_dequantize([](DeqArgs& a) { a.view.block_table = nullptr; }, Status::kNullPointer, "block_table");
  expect_dequantize([](DeqArgs& a) { a.view.hot_slot = nullptr; }, Status::kNullPointer, "hot_slot");
  expect_dequantize([](DeqArgs& a) { a.k_ptr = nullptr; }, Status::kNullPointer, "k_out");
  expect_dequantize([](DeqArgs& a) { a.v_ptr = nullptr; }, Status::kNullPointer, "v_out");
  expect_dequantize([](DeqArgs& a) { a.view.residual = 100; }, Status::kConfigMismatch, "residual");
  expect_dequantize([](DeqArgs& a) { a.len = 50; }, Status::kInvalidLength, "C > L");
  expect_dequantize([](DeqArgs& a) { a.cold = 32; }, Status::kInvalidLength, "C not page-aligned");
  expect_dequantize([](DeqArgs& a) { a.len = 192; }, Status::kInvalidLength, "hot span too long");
  expect_dequantize([](DeqArgs& a) { a.len = -1; }, Status::kInvalidLength, "len < 0");
  expect_dequantize([](DeqArgs& a) { a.view.max_pages_per_seq = 0; }, Status::kBlockTableOverflow, "table overflow");
  expect_dequantize([](DeqArgs& a) { a.table[0] = int32_t(a.view.num_pages); }, Status::kInvalidPageId, "page == num_pages");
  expect_dequantize([](DeqArgs& a) { a.table[0] = -1; }, Status::kInvalidPageId, "page < 0");
  expect_dequantize([](DeqArgs& a) { a.slots[0] = kSlots; }, Status::kInvalidHotSlot, "slot == num_slots");
  expect_dequantize([](DeqArgs& a) { a.slots[0] = -1; }, Status::kInvalidHotSlot, "slot < 0");
  // A sequence index outside the batch would read past hot_slot and the block table.
  expect_dequantize([](DeqArgs& a) { a.b = 2; }, Status::kInvalidShape, "b == batch");
  expect_dequantize([](DeqArgs& a) { a.b = -1; }, Status::kInvalidShape, "b < 0");
  expect_dequantize([](DeqArgs& a) { a.batch = 1; a.b = 1; a.len = 100; a.cold = 0; }, Status::kInvalidShape, "b past a smaller batch");
  expect_dequantize([](DeqArgs& a) { a.batch = 0; }, Status::kInvalidShape, "empty batch");
  expect_dequantize([](DeqArgs& a) { a.batch = -3; }, Status::kInvalidShape, "batch < 0");
}

}  // namespace

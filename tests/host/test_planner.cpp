// Capacity planning (cache/planner.hpp) for a Llama-3-8B shape.
#include "test_util.hpp"

namespace {

using namespace kvq_test;
using kvq::CacheFormat;
using kvq::ModelShape;

constexpr ModelShape kLlama3_8B{32, 8, 128};
constexpr CacheFormat fmt(kvq::QuantDesc k, kvq::QuantDesc v, int page = 64, int residual = 128) {
  return CacheFormat{k, v, page, residual};
}
const CacheFormat kNone = fmt(kvq::kDescNone, kvq::kDescNone);
const CacheFormat kI8 = fmt(kvq::kDescInt8, kvq::kDescInt8);
const CacheFormat kI4 = fmt(kvq::desc_int4(), kvq::desc_int4());
const CacheFormat kI2 = fmt(kvq::desc_int2(), kvq::desc_int2());
const CacheFormat kK4V2 = fmt(kvq::desc_int4(), kvq::desc_int2());

static_assert(kvq::page_bytes(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2())) == 32ull * 8 * 6144,
              "the planner is usable at compile time");

TEST_CASE("planner: bytes per page and per token for Llama-3-8B (32 layers, 8 KV heads, D 128, P 64)") {
  CHECK(kvq::page_bytes(kLlama3_8B, kNone) == 8388608ull);  // 32 * 8 * 32768
  CHECK(kvq::page_bytes(kLlama3_8B, kI8) == 4325376ull);    // 32 * 8 * 16896
  CHECK(kvq::page_bytes(kLlama3_8B, kI4) == 2621440ull);    // 32 * 8 * 10240
  CHECK(kvq::page_bytes(kLlama3_8B, kI2) == 1572864ull);    // 32 * 8 * 6144
  CHECK(kvq::page_bytes(kLlama3_8B, kK4V2) == 2097152ull);  // 32 * 8 * 8192
  CHECK(kvq::bytes_per_token(kLlama3_8B, kNone) == 131072.0);
  CHECK(kvq::bytes_per_token(kLlama3_8B, kI8) == 67584.0);
  CHECK(kvq::bytes_per_token(kLlama3_8B, kI4) == 40960.0);
  CHECK(kvq::bytes_per_token(kLlama3_8B, kI2) == 24576.0);
  CHECK(kvq::bytes_per_token(kLlama3_8B, kK4V2) == 32768.0);
  CHECK(kvq::bytes_per_token(kLlama3_8B, fmt(kvq::desc_int3(64), kvq::desc_int2(64))) == 24576.0);  // INT2's
  CHECK(kvq::bytes_per_token(kLlama3_8B, fmt(kvq::desc_int3(64), kvq::desc_int2(32))) == 26624.0);  // 3.25 bits
  // "none" costs what a dense bf16 cache costs; INT2 is 16/3 times smaller
  CHECK(kvq::bytes_per_token_dense(kLlama3_8B) == 131072.0);
  CHECK(kvq::bytes_per_token_dense(kLlama3_8B, 4) == 262144.0);
  CHECK(kvq::bytes_per_token_dense(kLlama3_8B) / kvq::bytes_per_token(kLlama3_8B, kI2) == doctest::Approx(16.0 / 3.0));
  // page 16 with Int2<16> keys: 16 * 128 * (2 + 2) bits for K, (2 + 1) bits for V
  const CacheFormat p16 = fmt(kvq::desc_int2(16), kvq::desc_int2(32), 16, 32);
  CHECK(kvq::page_bytes(kLlama3_8B, p16) == 32ull * 8 * (16 * 128 * 7 / 8));
}

TEST_CASE("planner: hot ring bytes and bytes of one sequence") {
  // 2 (K, V) * 32 layers * (128 + 64) rows * 8 heads * 128 * 2 B
  CHECK(kvq::hot_bytes_per_sequence(kLlama3_8B, kI2) == 25165824ull);
  CHECK(kvq::hot_bytes_per_sequence(kLlama3_8B, kI2, 4) == 2 * 25165824ull);
  CHECK(kvq::hot_bytes_per_sequence(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 64, 0)) == 25165824ull / 3);
  // 131072 tokens: floor((131072 - 128) / 64) = 2046 cold pages
  CHECK(kvq::cold_pages_for(131072, kI2) == 2046);
  CHECK(kvq::bytes_for_sequence(131072, kLlama3_8B, kI2) == 2046ull * 1572864 + 25165824);
  CHECK(kvq::bytes_for_sequence(0, kLlama3_8B, kI2) == 25165824ull);
  for (const CacheFormat& f : {kNone, kI8, kI4, kI2, kK4V2})
    for (int64_t len : {0, 1, 63, 64, 128, 191, 192, 193, 255, 256, 1000, 4096, 131072}) {
      CAPTURE(len);
      CHECK(kvq::cold_pages_for(len, f) * 64 == expected_cold(len, f.residual, f.page));
      CHECK(kvq::bytes_for_sequence(len, kLlama3_8B, f) ==
            uint64_t(kvq::cold_pages_for(len, f)) * kvq::page_bytes(kLlama3_8B, f) + kvq::hot_bytes_per_sequence(kLlama3_8B, f));
    }
}

TEST_CASE("planner: tokens_that_fit and sequences_that_fit sit exactly on the boundary of bytes_for_sequence") {
  std::mt19937_64 rng(0x91a2);
  const std::vector<ModelShape> shapes = {kLlama3_8B, ModelShape{80, 8, 128}, ModelShape{28, 4, 64}, ModelShape{1, 1, 256}};
  std::vector<CacheFormat> formats = {kNone, kI8, kI4, kI2, kK4V2};
  formats.push_back(fmt(kvq::desc_int2(16), kvq::desc_int2(32), 16, 0));
  formats.push_back(fmt(kvq::desc_int4(), kvq::desc_int2(), 128, 256));
  int checked = 0;
  for (const ModelShape& m : shapes)
    for (const CacheFormat& f : formats)
      for (int rep = 0; rep < 200; ++rep) {
        const int64_t seqs = 1 + int64_t(rng() % 128);
        const uint64_t hot = kvq::hot_bytes_per_sequence(m, f);
        // budgets from "not even the rings" to ~200 GB
        const uint64_t budget = rep == 0 ? hot * uint64_t(seqs) - 1
                                : rep == 1 ? hot * uint64_t(seqs)
                                           : uint64_t(rng() % 200000000000ull);
        const int64_t n = kvq::tokens_that_fit(budget, seqs, m, f);
        CAPTURE(budget);
        CAPTURE(seqs);
        if (n == 0) {
          // nothing fits: not even the hot rings of every sequence
          CHECK(uint64_t(seqs) * hot > budget);
          continue;
        }
        ++checked;
        CHECK(uint64_t(seqs) * kvq::bytes_for_sequence(n, m, f) <= budget);
        CHECK(uint64_t(seqs) * kvq::bytes_for_sequence(n + 1, m, f) > budget);
        if (rep == 1) CHECK(n == f.residual + f.page - 1);  // exactly the rings: a full window, no cold page
        // and the other direction: that many sequences of length n fit, one more does not
        const int64_t s = kvq::sequences_that_fit(budget, n, m, f);
        CHECK(s >= seqs);
        CHECK(uint64_t(s) * kvq::bytes_for_sequence(n, m, f) <= budget);
        CHECK(uint64_t(s + 1) * kvq::bytes_for_sequence(n, m, f) > budget);
      }
  CHECK(checked > 1000);
  // a hand case: 100 GiB, 64 sequences of INT2 Llama-3-8B
  const uint64_t budget = 100ull << 30;
  const int64_t n = kvq::tokens_that_fit(budget, 64, kLlama3_8B, kI2);
  // per sequence 1677721600 B; minus 25165824 hot -> 1050 pages -> 1050*64 + 191 tokens
  CHECK(n == 1050 * 64 + 191);
  CHECK(kvq::sequences_that_fit(budget, 131072, kLlama3_8B, kI2) == int64_t(budget / (2046ull * 1572864 + 25165824)));
  CHECK(kvq::sequences_that_fit(budget, 131072, kLlama3_8B, kI2) == 33);
}

TEST_CASE("planner: validate rejects bad shapes and formats") {
  CHECK(kvq::validate(kLlama3_8B, kI2) == Status::kSuccess);
  CHECK(kvq::validate(kLlama3_8B, kK4V2) == Status::kSuccess);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 64, 0)) == Status::kSuccess);
  CHECK(kvq::validate(ModelShape{0, 8, 128}, kI2) == Status::kInvalidShape);
  CHECK(kvq::validate(ModelShape{32, 0, 128}, kI2) == Status::kInvalidShape);
  CHECK(kvq::validate(ModelShape{-1, 8, 128}, kI2) == Status::kInvalidShape);
  CHECK(kvq::validate(ModelShape{32, 8, 96}, kI2) == Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 64, 100)) == Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 64, -64)) == Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 0, 128)) == Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 48, 96)) == Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(), 16, 32)) == Status::kConfigMismatch);  // Gk 32 > P
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int2(), kvq::desc_int2(48))) == Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::QuantDesc{kvq::QuantKind::kAsym, 5, 32}, kvq::desc_int2())) ==
        Status::kConfigMismatch);
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::desc_int3(64), kvq::desc_int2(64))) == Status::kSuccess);  // K3V2: INT2's bytes
  CHECK(kvq::validate(kLlama3_8B, fmt(kvq::QuantDesc{kvq::QuantKind::kInt8, 4, 0}, kvq::desc_int2())) ==
        Status::kConfigMismatch);
}

}  // namespace

TEST_CASE("planner: the recommended formats validate, and sink rows count as per-sequence bytes") {
  for (const CacheFormat& f : {kvq::recommended_int2(), kvq::recommended_int4(), kvq::recommended_k4v2()}) {
    CHECK(kvq::validate(kLlama3_8B, f) == kvq::Status::kSuccess);
    CHECK(f.sinks == 4);
    CHECK(f.key_clip == kvq::KeyClip::kMinMax);
    CHECK(f.rotate);
  }
  const CacheFormat r = kvq::recommended_int2();
  // Same cold bytes as plain INT2; the hot part grows by 4 rows (K and V, every layer and head).
  CHECK(kvq::page_bytes(kLlama3_8B, r) == kvq::page_bytes(kLlama3_8B, kI2));
  CHECK(kvq::hot_bytes_per_sequence(kLlama3_8B, r) - kvq::hot_bytes_per_sequence(kLlama3_8B, kI2) == 2ull * 32 * 4 * 8 * 128 * 2);
  CacheFormat bad = kI2;
  bad.sinks = 17;
  CHECK(kvq::validate(kLlama3_8B, bad) == kvq::Status::kConfigMismatch);
  bad.sinks = 64;  // not below the page
  CHECK(kvq::validate(kLlama3_8B, bad) == kvq::Status::kConfigMismatch);
  CacheFormat none_sinks = kNone;
  none_sinks.sinks = 4;  // "none" keeps every token exact: sinks are refused
  CHECK(kvq::validate(kLlama3_8B, none_sinks) == kvq::Status::kConfigMismatch);
  CHECK(kvq::tokens_that_fit(1ull << 30, 1, kLlama3_8B, none_sinks) == 0);
}

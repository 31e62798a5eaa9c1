// The hot-window rule (cache/window.hpp) and the length checks (window.hpp, attention/batch.hpp).
#include "test_util.hpp"

namespace {

using namespace kvq_test;

TEST_CASE("window: cold_after equals a token-by-token simulation of 'quantize while L - C >= R + P'") {
  for (int P : {16, 32, 64, 128})
    for (int R : {0, P, 2 * P, 3 * P}) {
      CAPTURE(P);
      CAPTURE(R);
      int64_t C = 0;
      int64_t bad = 0;
      for (int64_t L = 0; L <= 6 * P + R + 3; ++L) {
        while (L - C >= R + P) C += P;  // the rule of DESIGN section 5, literally
        bad += kvq::cold_after(L, 0, R, P) != C;
        bad += expected_cold(L, R, P) != C;
        if (L > 0) bad += kvq::cold_after(L, kvq::cold_after(L - 1, 0, R, P), R, P) != C;  // one token at a time
        // at least min(L, R) and at most R + P - 1 newest tokens stay unquantized
        bad += L - C < std::min<int64_t>(L, R) || L - C > R + P - 1;
      }
      CHECK(bad == 0);
    }
  // hand values: P 64, R 128
  CHECK(kvq::cold_after(191, 0, 128, 64) == 0);
  CHECK(kvq::cold_after(192, 0, 128, 64) == 64);
  CHECK(kvq::cold_after(255, 0, 128, 64) == 64);
  CHECK(kvq::cold_after(256, 0, 128, 64) == 128);
  CHECK(kvq::cold_after(1000, 0, 128, 64) == 832);
  CHECK(kvq::cold_after(1000, 832, 128, 64) == 832);
  CHECK(kvq::cold_after(63, 0, 0, 64) == 0);
  CHECK(kvq::cold_after(64, 0, 0, 64) == 64);
  CHECK(kvq::cold_after(int64_t(3000000000), 0, 128, 64) == ((int64_t(3000000000) - 128) / 64) * 64);
}

TEST_CASE("window: cold_after is idempotent and split-invariant, cold_pages_needed adds up") {
  std::mt19937_64 rng(0x3add);
  int64_t bad = 0;
  for (int P : {16, 64})
    for (int R : {0, P, 2 * P}) {
      for (int64_t L = 0; L < 8 * P; ++L)
        for (int64_t c = 0; c <= L; c += P) {
          const int64_t once = kvq::cold_after(L, c, R, P);
          bad += kvq::cold_after(L, once, R, P) != once;
          bad += once < c || once % P != 0;
          // from any valid state (L - c < R + P) the result is the append-only cold length,
          // or c itself when nothing has to turn cold
          if (L - c < R + P) bad += once != c;
          else bad += once != expected_cold(L, R, P);
        }
      // appends of random sizes: the pages needed by each add up to the pages of one append
      for (int rep = 0; rep < 200; ++rep) {
        int64_t L = 0, C = 0, pages = 0;
        const int64_t total = int64_t(rng() % (10 * uint64_t(P)));
        while (L < total) {
          const int64_t n = std::min<int64_t>(total - L, 1 + int64_t(rng() % (2 * uint64_t(P) + 3)));
          const int64_t need = kvq::cold_pages_needed(L, C, n, R, P);
          bad += need != (kvq::cold_after(L + n, C, R, P) - C) / P;
          pages += need;
          C = kvq::cold_after(L + n, C, R, P);
          L += n;
        }
        bad += pages != kvq::cold_pages_needed(0, 0, total, R, P);
        bad += C != expected_cold(total, R, P);
      }
    }
  CHECK(bad == 0);
  CHECK(kvq::cold_pages_needed(191, 0, 1, 128, 64) == 1);
  CHECK(kvq::cold_pages_needed(190, 0, 1, 128, 64) == 0);
  CHECK(kvq::cold_pages_needed(0, 0, 1000, 128, 64) == 13);
  CHECK(kvq::cold_pages_needed(500, 320, 0, 128, 64) == 0);
}

TEST_CASE("window: check_lengths (append) and check_attention_lengths reject bad lengths") {
  SUBCASE("check_lengths rejects C > L, unaligned C, an over-long hot span and block-table overflow") {
    constexpr int P = 64, R = 128;
    // valid
    CHECK(kvq::check_lengths(0, 0, 0, R, P, 0) == Status::kSuccess);
    CHECK(kvq::check_lengths(0, 0, 191, R, P, 0) == Status::kSuccess);  // no page turns cold
    CHECK(kvq::check_lengths(191, 0, 0, R, P, 0) == Status::kSuccess);
    CHECK(kvq::check_lengths(191, 0, 1, R, P, 1) == Status::kSuccess);
    CHECK(kvq::check_lengths(1000, 832, 5, R, P, 13) == Status::kSuccess);
    CHECK(kvq::check_lengths(64, 64, 0, R, P, 1) == Status::kSuccess);  // C == L
    // negative values
    CHECK(kvq::check_lengths(-1, 0, 0, R, P, 10) == Status::kInvalidLength);
    CHECK(kvq::check_lengths(10, -64, 0, R, P, 10) == Status::kInvalidLength);
    CHECK(kvq::check_lengths(10, 0, -1, R, P, 10) == Status::kInvalidLength);
    // C > L
    CHECK(kvq::check_lengths(10, 64, 0, R, P, 10) == Status::kInvalidLength);
    // C not page-aligned
    CHECK(kvq::check_lengths(200, 1, 0, R, P, 10) == Status::kInvalidLength);
    CHECK(kvq::check_lengths(200, 96, 0, R, P, 10) == Status::kInvalidLength);
    // hot span L - C >= R + P
    CHECK(kvq::check_lengths(192, 0, 0, R, P, 10) == Status::kInvalidLength);
    CHECK(kvq::check_lengths(1000, 64, 0, R, P, 100) == Status::kInvalidLength);
    CHECK(kvq::check_lengths(255, 64, 0, R, P, 100) == Status::kSuccess);
    CHECK(kvq::check_lengths(256, 64, 0, R, P, 100) == Status::kInvalidLength);
    // block table: the cold length after the append needs cold_after / P entries
    CHECK(kvq::check_lengths(191, 0, 1, R, P, 0) == Status::kBlockTableOverflow);
    CHECK(kvq::check_lengths(0, 0, 1000, R, P, 12) == Status::kBlockTableOverflow);
    CHECK(kvq::check_lengths(0, 0, 1000, R, P, 13) == Status::kSuccess);
    CHECK(kvq::check_lengths(1000, 832, 64, R, P, 13) == Status::kBlockTableOverflow);
    // lengths are int32: a length that would pass INT32_MAX is refused
    {
      const int64_t C = (int64_t(INT32_MAX) - 200) / P * P, L = C + 100;
      CHECK(kvq::check_lengths(L, C, INT32_MAX - L, R, P, int64_t(1) << 40) == Status::kSuccess);
      CHECK(kvq::check_lengths(L, C, INT32_MAX - L + 1, R, P, int64_t(1) << 40) == Status::kInvalidLength);
    }
    // R = 0 works like any other multiple of P
    CHECK(kvq::check_lengths(63, 0, 0, 0, P, 0) == Status::kSuccess);
    CHECK(kvq::check_lengths(64, 0, 0, 0, P, 5) == Status::kInvalidLength);
    CHECK(kvq::check_lengths(64, 64, 0, 0, P, 1) == Status::kSuccess);
  }
  SUBCASE("attention length checks accept the cold length before or after the append") {
    constexpr int P = 64, R = 128;
    // prefix 191 (ring full), q_len 1: C is 0 before the append and 64 after; both are accepted
    CHECK(kvq::check_attention_lengths(191, 0, 1, R, P, 1) == Status::kSuccess);
    CHECK(kvq::check_attention_lengths(191, 64, 1, R, P, 1) == Status::kSuccess);
    // a chunk that turns pages of its own tokens cold: after the append C may exceed len
    CHECK(kvq::check_attention_lengths(100, 0, 500, R, P, 7) == Status::kSuccess);
    CHECK(kvq::check_attention_lengths(100, 448, 500, R, P, 7) == Status::kSuccess);
    CHECK(kvq::check_attention_lengths(100, 448, 500, R, P, 6) == Status::kBlockTableOverflow);
    CHECK(kvq::check_attention_lengths(100, 0, 500, R, P, 6) == Status::kBlockTableOverflow);
    // ... but never beyond len + q_len, never unaligned, never with an over-long hot span
    CHECK(kvq::check_attention_lengths(100, 640, 500, R, P, 20) == Status::kInvalidLength);
    CHECK(kvq::check_attention_lengths(100, 32, 500, R, P, 20) == Status::kInvalidLength);
    CHECK(kvq::check_attention_lengths(192, 0, 1, R, P, 20) == Status::kInvalidLength);
    CHECK(kvq::check_attention_lengths(-1, 0, 1, R, P, 20) == Status::kInvalidLength);
    CHECK(kvq::check_attention_lengths(10, 0, -1, R, P, 20) == Status::kInvalidLength);
    CHECK(kvq::check_attention_lengths(10, -64, 1, R, P, 20) == Status::kInvalidLength);
    CHECK(kvq::check_attention_lengths(0, 0, 0, R, P, 0) == Status::kSuccess);
    CHECK(kvq::ring_row(191, 192) == 191);
    CHECK(kvq::ring_row(192, 192) == 0);
    CHECK(kvq::ring_row(1000, 192) == 1000 % 192);
  }
}

}  // namespace

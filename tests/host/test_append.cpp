// reference::append on a HostCache: the hot-window boundaries of DESIGN section 5, flags,
// batches with engine-assigned slots, and dequantize_sequence.
#include "test_util.hpp"

namespace {

using namespace kvq_test;

// Every length where the window rule changes, for page P and residual R.
std::vector<int64_t> boundary_lengths(int P, int R) {
  std::vector<int64_t> v = {0,         1,         P - 1,         P,             P + 1,         R,
                            R + 1,     R + P - 1, R + P,         R + P + 1,     2 * P + R - 1, 2 * P + R,
                            2 * P + R + 1, 3 * P + R + 5, 5 * P + R + 7};
  if (R > 0) v.push_back(R - 1);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  v.erase(std::remove_if(v.begin(), v.end(), [](int64_t x) { return x < 0; }), v.end());
  return v;
}

// One prompt of each boundary length, appended in one call.
template <class Cfg>
void one_shot(int R, uint64_t seed, int heads = 2) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page;
  const std::vector<int64_t> lengths = boundary_lengths(P, R);
  const Seq<T> s = make_seq<T>(seed, lengths.back(), heads, Cfg::head_dim);
  for (int64_t L : lengths) {
    CAPTURE(R);
    CAPTURE(L);
    HostCache<Cfg> c = make_cache<Cfg>(heads, R, lengths.back());
    uint32_t flags = 0;
    REQUIRE(append_seq<Cfg>(c, s, 0, L, 0, &flags) == Status::kSuccess);
    CHECK(flags == 0u);
    CHECK(c.len[0] == L);
    CHECK(c.cold_len[0] == (L >= R + P ? ((L - R) / P) * P : 0));
    check_sequence<Cfg>(c, 0, s);
  }
}

// The same lengths reached one decode token at a time; the cold length is checked after every token.
template <class Cfg>
void token_by_token(int R, uint64_t seed, int heads = 2) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page;
  const std::vector<int64_t> lengths = boundary_lengths(P, R);
  const Seq<T> s = make_seq<T>(seed, lengths.back(), heads, Cfg::head_dim);
  HostCache<Cfg> c = make_cache<Cfg>(heads, R, lengths.back());
  check_sequence<Cfg>(c, 0, s);  // L = 0
  int64_t bad_cold = 0;
  for (int64_t t = 0; t < lengths.back(); ++t) {
    REQUIRE(append_seq<Cfg>(c, s, t, 1) == Status::kSuccess);
    bad_cold += c.cold_len[0] != expected_cold(t + 1, R, P);
    if (std::binary_search(lengths.begin(), lengths.end(), t + 1)) {
      CAPTURE(R);
      CAPTURE(t + 1);
      check_sequence<Cfg>(c, 0, s);
    }
  }
  CHECK(bad_cold == 0);
}

TEST_CASE("append: hot-window boundaries, one-shot prompts, INT2 P=64 (R = 0, 64, 128)") {
  one_shot<CfgInt2>(0, 0xa001);
  one_shot<CfgInt2>(64, 0xa002);
  one_shot<CfgInt2>(128, 0xa003);
}

TEST_CASE("append: hot-window boundaries, token by token, INT2 P=64 (R = 0, 64, 128)") {
  token_by_token<CfgInt2>(0, 0xa011);
  token_by_token<CfgInt2>(64, 0xa012);
  token_by_token<CfgInt2>(128, 0xa013);
}

TEST_CASE("append: hot-window boundaries at pages 16 and 32") {
  for (int R : {0, 16, 48}) {
    one_shot<CfgP16Int2>(R, 0xa020 + uint64_t(R));
    token_by_token<CfgP16Int2>(R, 0xa030 + uint64_t(R));
  }
  one_shot<CfgP16K4V2D64>(32, 0xa041, 3);
  token_by_token<CfgP16K4V2D64>(0, 0xa042, 3);
  one_shot<CfgP16Int8Fp16D64>(16, 0xa043);
  token_by_token<CfgP16Int8Fp16D64>(0, 0xa044);
  one_shot<CfgP32Int2G16D64>(32, 0xa045);
  token_by_token<CfgP32Int2G16D64>(64, 0xa046);
}

TEST_CASE("append: hot-window boundaries for INT4, INT8, none, K4V2, K3V2 and an fp16 model") {
  one_shot<CfgInt4>(128, 0xa051, 1);
  token_by_token<CfgInt4>(64, 0xa052, 1);
  one_shot<CfgInt8>(0, 0xa053, 1);
  token_by_token<CfgInt8>(128, 0xa054, 1);
  one_shot<CfgNone>(64, 0xa055, 1);
  token_by_token<CfgNone>(0, 0xa056, 1);
  one_shot<CfgK4V2>(128, 0xa057, 1);
  token_by_token<CfgK4V2>(0, 0xa058, 1);
  one_shot<CfgFp16Int2>(128, 0xa059, 1);
  token_by_token<CfgFp16Int2>(64, 0xa05a, 1);
  one_shot<CfgK3V2>(128, 0xa05b, 1);
  token_by_token<CfgK3V2>(0, 0xa05c, 1);
}

TEST_CASE("append: NaN / Inf / beyond-fp16 inputs raise flags when their page is quantized and decode finite") {
  using Cfg = CfgInt2;
  using T = kvq::bf16;
  constexpr int R = 64;
  Seq<T> s = make_seq<T>(0xf1a9, 300, 2, 128);
  s.k_mut(10, 1)[3] = T::from_float(std::numeric_limits<float>::quiet_NaN());
  s.v_mut(20, 0)[7] = T::from_float(std::numeric_limits<float>::infinity());
  s.k_mut(30, 0)[100] = T::from_float(-std::numeric_limits<float>::infinity());
  s.k_mut(70, 0)[9] = T::from_float(1e6f);     // finite, beyond fp16: saturates
  s.v_mut(100, 1)[90] = T::from_float(-7e4f);
  HostCache<Cfg> c = make_cache<Cfg>(2, R, 300);
  uint32_t flags = 0;
  REQUIRE(append_seq<Cfg>(c, s, 0, 100, 0, &flags) == Status::kSuccess);
  CHECK(c.cold_len[0] == 0);
  flags = 0;
  REQUIRE(append_seq<Cfg>(c, s, 100, 40, 0, &flags) == Status::kSuccess);  // page 0 (tokens 0..63) turns cold
  CHECK(c.cold_len[0] == 64);
  CHECK(flags == kvq::kFlagNonFinite);
  flags = 0;
  REQUIRE(append_seq<Cfg>(c, s, 140, 60, 0, &flags) == Status::kSuccess);  // page 1 (64..127): saturation only
  CHECK(c.cold_len[0] == 128);
  CHECK(flags == kvq::kFlagSaturated);
  flags = 0;
  REQUIRE(append_seq<Cfg>(c, s, 200, 64, 0, &flags) == Status::kSuccess);  // page 2: clean
  CHECK(c.cold_len[0] == 192);
  CHECK(flags == 0u);
  // the sanitised values are what the records hold (check_sequence bounds against sanitised input)
  check_sequence<Cfg>(c, 0, s);
  const auto v = c.view();
  int64_t nonfinite = 0;
  for (int64_t t = 0; t < 192; ++t)
    for (int h = 0; h < 2; ++h)
      for (int ch = 0; ch < 128; ++ch) {
        nonfinite += !std::isfinite(cached_value<Cfg, Role::kKey>(v, 0, 192, t, h, ch));
        nonfinite += !std::isfinite(cached_value<Cfg, Role::kValue>(v, 0, 192, t, h, ch));
      }
  CHECK(nonfinite == 0);
  CHECK(cached_value<Cfg, Role::kValue>(v, 0, 192, 20, 0, 7) > 60000.0f);
  CHECK(cached_value<Cfg, Role::kKey>(v, 0, 192, 30, 0, 100) < -60000.0f);
  // flags are ORed into the caller's word, never cleared
  flags = kvq::kFlagBadSequence;
  REQUIRE(append_seq<Cfg>(c, s, 264, 1, 0, &flags) == Status::kSuccess);
  CHECK(flags == kvq::kFlagBadSequence);
}

TEST_CASE("append: a batch with engine-assigned hot slots equals appending each sequence alone, empty appends change nothing") {
  SUBCASE("a batch with engine-assigned hot slots equals appending each sequence alone") {
    using Cfg = CfgK4V2;
    using T = kvq::bf16;
    constexpr int B = 4, H = 2, R = 64;
    const int64_t max_tokens = 700;
    std::vector<Seq<T>> seqs;
    for (int b = 0; b < B; ++b) seqs.push_back(make_seq<T>(0xba7c + uint64_t(b), max_tokens, H, 128));
    HostCache<Cfg> batched = make_cache<Cfg>(H, R, max_tokens, B, 2);
    batched.hot_slot = {5, 0, 3, 2};  // not the batch index
    std::vector<HostCache<Cfg>> alone;
    for (int b = 0; b < B; ++b) alone.push_back(make_cache<Cfg>(H, R, max_tokens));
    std::mt19937_64 rng(0xba7d);
    std::vector<int64_t> done(B, 0);
    for (int step = 0; step < 12; ++step) {
      std::vector<int64_t> counts(B);
      std::vector<const T*> k(B), v(B);
      for (int b = 0; b < B; ++b) {
        const int64_t want = step % 4 == b ? 0 : int64_t(rng() % (step < 2 ? 300 : 40));
        counts[size_t(b)] = std::min(want, max_tokens - done[size_t(b)]);
        k[size_t(b)] = seqs[size_t(b)].k_row(done[size_t(b)]);
        v[size_t(b)] = seqs[size_t(b)].v_row(done[size_t(b)]);
      }
      REQUIRE(append_rows<Cfg>(batched, counts, k, v) == Status::kSuccess);
      for (int b = 0; b < B; ++b) {
        REQUIRE(append_seq<Cfg>(alone[size_t(b)], seqs[size_t(b)], done[size_t(b)], counts[size_t(b)]) == Status::kSuccess);
        done[size_t(b)] += counts[size_t(b)];
        CAPTURE(step);
        CAPTURE(b);
        CHECK(batched.len[size_t(b)] == alone[size_t(b)].len[0]);
        CHECK(batched.cold_len[size_t(b)] == alone[size_t(b)].cold_len[0]);
        CHECK(seq_cold_bytes<Cfg>(batched, b) == seq_cold_bytes<Cfg>(alone[size_t(b)], 0));
        CHECK(live_rows_equal<Cfg>(batched, b, alone[size_t(b)], 0));
      }
    }
    for (int b = 0; b < B; ++b) check_sequence<Cfg>(batched, b, seqs[size_t(b)]);
    // the unused slots (1 and 4) were never written
    const size_t slot_elems = size_t(R + 64) * H * 128;
    for (int slot : {1, 4})
      for (size_t i = 0; i < slot_elems; ++i) REQUIRE(batched.hot_k[size_t(slot) * slot_elems + i].bits == 0);
  }
  SUBCASE("zero new tokens, and an empty batch, change nothing") {
    using Cfg = CfgInt2;
    using T = kvq::bf16;
    const Seq<T> s = make_seq<T>(0x2e60, 400, 2, 128);
    HostCache<Cfg> c = make_cache<Cfg>(2, 128, 400, 2);
    REQUIRE(append_seq<Cfg>(c, s, 0, 250, 0) == Status::kSuccess);
    REQUIRE(append_seq<Cfg>(c, s, 0, 17, 1) == Status::kSuccess);
    const Snapshot<Cfg> snap(c);
    REQUIRE(append_rows<Cfg>(c, {0, 0}, {s.k_row(0), s.k_row(0)}, {s.v_row(0), s.v_row(0)}) == Status::kSuccess);
    CHECK(snap.unchanged(c));
    kvq::AppendBatch<T> empty;
    CHECK(kvq::reference::append<Cfg>(c.view(), empty) == Status::kSuccess);
    CHECK(snap.unchanged(c));
  }
}

TEST_CASE("append: fp16 model, groups spanning from -65504 to 65504: dequantize_sequence returns finite values") {
  // A group whose range is wider than fp16 gets scale fp16(131008 / 3) = 43680, and code 3 decodes to
  // -65504 + 3 * 43680 = 65536: finite in fp32, but it must not become Inf in the fp16 model dtype.
  using Cfg = CfgFp16Int2;
  using T = kvq::fp16;
  Seq<T> s = make_seq<T>(0x65504, 64, 1, 128);
  for (int t = 0; t < 32; ++t) s.k_mut(t)[5] = T::from_float(t % 2 ? 65504.0f : -65504.0f);  // key channel 5, group 0
  for (int t = 32; t < 64; ++t) s.k_mut(t)[6] = T::from_float(t == 40 ? 65504.0f : 0.0f);     // [0, 65504]
  for (int ch = 0; ch < 32; ++ch) s.v_mut(3)[ch] = T::from_float(ch % 3 == 0 ? -65504.0f : 65504.0f);
  HostCache<Cfg> c = make_cache<Cfg>(1, 0, 64);
  uint32_t flags = 0;
  REQUIRE(append_seq<Cfg>(c, s, 0, 64, 0, &flags) == Status::kSuccess);
  REQUIRE(c.cold_len[0] == 64);
  CHECK(flags == 0u);  // every input is a finite fp16 value: nothing to sanitise
  BoundStats st;
  const auto v = c.view();
  check_record<Cfg>(v.cold + kvq::record_offset(v.block_table[0], 0, 1, Cfg::record_bytes), [&](int t) { return s.k_row(t); },
                    [&](int t) { return s.v_row(t); }, st);
  CHECK_MESSAGE(st.bad == 0, st.first);
  std::vector<T> ko(64 * 128), vo(64 * 128);
  REQUIRE(kvq::reference::dequantize_sequence<Cfg>(v, 1, 0, 64, 64, ko.data(), vo.data()) == Status::kSuccess);
  int64_t inf_k = 0, inf_v = 0;
  for (size_t i = 0; i < ko.size(); ++i) {
    inf_k += !std::isfinite(ko[i].to_float());
    inf_v += !std::isfinite(vo[i].to_float());
  }
  CHECK(inf_k == 0);
  CHECK(inf_v == 0);
  // the saturated value is the fp16 maximum, within the bound of the exact input 65504
  CHECK(ko[size_t(1) * 128 + 5].to_float() == 65504.0f);
  CHECK(ko[size_t(0) * 128 + 5].to_float() == -65504.0f);
}

}  // namespace

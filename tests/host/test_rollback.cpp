// Speculative decoding: append draft tokens, roll back to the accepted length, append again
// (HostCache::rollback, DESIGN section 5).
#include "test_util.hpp"

namespace {

using namespace kvq_test;

// Ring rows of tokens [from, to) of sequence 0 of two caches hold the same bits.
template <class Cfg>
bool rows_equal(HostCache<Cfg>& x, HostCache<Cfg>& y, int64_t from, int64_t to) {
  const auto vx = x.view(), vy = y.view();
  const int W = vx.residual + Cfg::page;
  for (int64_t t = from; t < to; ++t)
    for (int h = 0; h < vx.num_kv_heads; ++h) {
      const size_t ox = kvq::hot_offset(vx.hot_slot[0], kvq::ring_row(t, W), h, W, vx.num_kv_heads, Cfg::head_dim);
      const size_t oy = kvq::hot_offset(vy.hot_slot[0], kvq::ring_row(t, W), h, W, vy.num_kv_heads, Cfg::head_dim);
      if (!same_bits(vx.hot_k + ox, vy.hot_k + oy, Cfg::head_dim) || !same_bits(vx.hot_v + ox, vy.hot_v + oy, Cfg::head_dim))
        return false;
    }
  return true;
}

// Speculative decoding against plain decoding of the accepted tokens. Each step appends k drafts
// (the first `acc` are the true tokens, the rest junk), rolls back to L + acc, then appends the
// bonus token; the plain cache appends the acc + 1 true tokens directly. R >= k, so the rollback
// target is never below the cold length.
template <class Cfg>
void speculative_vs_direct(uint64_t seed, int R, int64_t prompt, int64_t end, int max_k) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page, H = 2;
  REQUIRE(max_k <= R);
  const Seq<T> truth = make_seq<T>(seed, end + 2 * (R + P), H, D);
  const Seq<T> junk = make_seq<T>(seed + 1, end + max_k, H, D);
  HostCache<Cfg> spec = make_cache<Cfg>(H, R, end + 2 * (R + P)), direct = spec;
  REQUIRE(append_seq<Cfg>(spec, truth, 0, prompt) == Status::kSuccess);
  REQUIRE(append_seq<Cfg>(direct, truth, 0, prompt) == Status::kSuccess);
  std::mt19937_64 rng(seed + 2);
  int same_c = 0, ahead = 0;
  for (int64_t L = prompt; L < end;) {
    const int64_t k = 1 + int64_t(rng() % uint64_t(max_k));
    const int64_t acc = int64_t(rng() % uint64_t(k + 1));
    // drafts: truth[L, L + acc) then junk
    std::vector<T> dk(size_t(k) * H * D), dv(dk.size());
    for (int64_t i = 0; i < k; ++i) {
      const Seq<T>& src = i < acc ? truth : junk;
      std::memcpy(dk.data() + size_t(i) * H * D, src.k_row(L + i), size_t(H) * D * sizeof(T));
      std::memcpy(dv.data() + size_t(i) * H * D, src.v_row(L + i), size_t(H) * D * sizeof(T));
    }
    REQUIRE(append_rows<Cfg>(spec, {k}, {dk.data()}, {dv.data()}) == Status::kSuccess);
    REQUIRE(spec.rollback(0, L + acc));
    REQUIRE(append_seq<Cfg>(spec, truth, L + acc, 1) == Status::kSuccess);  // the bonus token
    REQUIRE(append_seq<Cfg>(direct, truth, L, acc + 1) == Status::kSuccess);
    L += acc + 1;
    CAPTURE(L);
    REQUIRE(spec.len[0] == L);
    REQUIRE(direct.len[0] == L);
    const int64_t cs = spec.cold_len[0], cd = direct.cold_len[0];
    // the speculative cache may have quantized a page the plain one has not reached yet
    CHECK(cs >= cd);
    CHECK(cs - cd <= int64_t((max_k + P - 1) / P) * P);
    const std::vector<uint8_t> bs = seq_cold_bytes<Cfg>(spec, 0), bd = seq_cold_bytes<Cfg>(direct, 0);
    CHECK(std::equal(bd.begin(), bd.end(), bs.begin()));  // the plain cache's pages are a prefix
    CHECK(rows_equal<Cfg>(spec, direct, cs, L));
    if (cs == cd) {
      ++same_c;
      CHECK(bs == bd);
      CHECK(live_rows_equal<Cfg>(spec, 0, direct, 0));
    } else {
      ++ahead;
    }
    // no junk token survives anywhere: records within the bound of the true tokens, ring exact
    if (L % 7 == 0) check_sequence<Cfg>(spec, 0, truth);
  }
  CHECK(same_c > 0);
  // a chunk of a full window brings both to the same cold length: identical caches
  const int64_t L = spec.len[0];
  REQUIRE(append_seq<Cfg>(spec, truth, L, R + P) == Status::kSuccess);
  REQUIRE(append_seq<Cfg>(direct, truth, L, R + P) == Status::kSuccess);
  CHECK(spec.cold_len[0] == direct.cold_len[0]);
  CHECK(spec.block_table == direct.block_table);
  CHECK(spec.cold == direct.cold);
  CHECK(live_rows_equal<Cfg>(spec, 0, direct, 0));
  check_sequence<Cfg>(spec, 0, truth);
  // and a decode step over the two caches gives the same bits
  const int64_t Lf = spec.len[0];
  const std::vector<T> q = make_rows<T>(seed + 3, 1, 2 * H, D);
  const auto call_s = single_call<T>(Lf, spec.cold_len[0], 1, 2 * H, truth.k_row(Lf), truth.v_row(Lf), q, H, D, 0.1f);
  CHECK(same_floats(run_attention<Cfg>(spec, call_s), run_attention<Cfg>(direct, call_s)));
  MESSAGE("steps with equal cold length: ", same_c, ", with the speculative cache a page ahead: ", ahead);
}

TEST_CASE("rollback: drafts rolled back and re-appended equal appending the accepted tokens directly") {
  speculative_vs_direct<CfgInt2>(0xb001, 64, 150, 700, 8);
  speculative_vs_direct<CfgP16K4V2D64>(0xb002, 16, 40, 400, 16);
  // an fp16 model and INT8, long drafts (k up to R)
  speculative_vs_direct<CfgFp16Int2>(0xb011, 64, 10, 500, 64);
  speculative_vs_direct<CfgP16Int8Fp16D64>(0xb012, 32, 0, 300, 32);
}

TEST_CASE("rollback: below the cold length or above the length fails and changes nothing, exactly C works") {
  using Cfg = CfgInt2;
  using T = kvq::bf16;
  const Seq<T> s = make_seq<T>(0xb021, 400, 2, 128);
  HostCache<Cfg> c = make_cache<Cfg>(2, 0, 400);
  REQUIRE(append_seq<Cfg>(c, s, 0, 100) == Status::kSuccess);
  REQUIRE(c.cold_len[0] == 64);
  const Snapshot<Cfg> snap(c);
  CHECK_FALSE(c.rollback(0, 63));
  CHECK_FALSE(c.rollback(0, 0));
  CHECK_FALSE(c.rollback(0, 101));
  CHECK(snap.unchanged(c));
  // O(1): a valid rollback changes the length and nothing else
  REQUIRE(c.rollback(0, 64));
  CHECK(c.len[0] == 64);
  CHECK(c.cold_len[0] == 64);
  CHECK(c.cold == snap.cold);
  CHECK(same_bits(c.hot_k.data(), snap.hot_k.data(), c.hot_k.size()));
  CHECK(c.block_table == snap.block_table);
  // the cache at L == C is usable: attention with an empty hot span, then appends again
  const std::vector<T> q = make_rows<T>(0xb022, 1, 4, 128);
  const auto call = single_call<T>(64, 64, 1, 4, s.k_row(64), s.v_row(64), q, 2, 128, 0.1f);
  (void)run_attention<Cfg>(c, call);
  REQUIRE(append_seq<Cfg>(c, s, 64, 36) == Status::kSuccess);
  HostCache<Cfg> one = make_cache<Cfg>(2, 0, 400);
  REQUIRE(append_seq<Cfg>(one, s, 0, 100) == Status::kSuccess);
  CHECK(c.cold == one.cold);
  CHECK(live_rows_equal<Cfg>(c, 0, one, 0));
  // with R = 0 a long draft turns its own tokens cold: rolling back into them is refused
  REQUIRE(append_seq<Cfg>(c, s, 100, 70) == Status::kSuccess);  // 170 tokens, C = 128
  REQUIRE(c.cold_len[0] == 128);
  CHECK_FALSE(c.rollback(0, 110));
  CHECK(c.len[0] == 170);
  CHECK(c.rollback(0, 128));
  // the reference entry points refuse a length below the cold length too
  std::vector<T> ko(170 * 2 * 128), vo(ko.size());
  CHECK(kvq::reference::dequantize_sequence<Cfg>(c.view(), c.batch(), 0, 110, 128, ko.data(), vo.data()) == Status::kInvalidLength);
}

}  // namespace

TEST_CASE("release: a finished sequence's pages return to the pool; the slot starts a new sequence like a fresh cache") {
  using Cfg = CfgInt2;
  using T = kvq::bf16;
  const Seq<T> s = make_seq<T>(0xb031, 400, 2, 128);
  HostCache<Cfg> c = make_cache<Cfg>(2, 64, 400);
  const int64_t free0 = c.free_pages();
  REQUIRE(append_seq<Cfg>(c, s, 0, 300) == Status::kSuccess);
  REQUIRE(c.cold_len[0] > 0);
  CHECK(c.free_pages() == free0 - c.cold_len[0] / Cfg::page);
  c.release(0);
  CHECK(c.free_pages() == free0);
  CHECK(c.len[0] == 0);
  CHECK(c.cold_len[0] == 0);
  // the same slot runs a new sequence: its live rows and pool pages equal a fresh cache's
  REQUIRE(append_seq<Cfg>(c, s, 0, 250) == Status::kSuccess);
  HostCache<Cfg> fresh = make_cache<Cfg>(2, 64, 400);
  REQUIRE(append_seq<Cfg>(fresh, s, 0, 250) == Status::kSuccess);
  CHECK(c.len[0] == fresh.len[0]);
  CHECK(c.cold_len[0] == fresh.cold_len[0]);
  CHECK(live_rows_equal<Cfg>(c, 0, fresh, 0));
  std::vector<T> ka(250 * 2 * 128), va(ka.size()), kb(ka.size()), vb(ka.size());
  REQUIRE(kvq::reference::dequantize_sequence<Cfg>(c.view(), c.batch(), 0, 250, c.cold_len[0], ka.data(), va.data()) == Status::kSuccess);
  REQUIRE(kvq::reference::dequantize_sequence<Cfg>(fresh.view(), fresh.batch(), 0, 250, fresh.cold_len[0], kb.data(), vb.data()) ==
          Status::kSuccess);
  CHECK(same_bits(ka.data(), kb.data(), ka.size()));
  CHECK(same_bits(va.data(), vb.data(), va.size()));
}

// Chunked prefill needs no alignment (DESIGN section 5): any split of a prompt gives the bytes of a
// one-shot prefill, and attention over the two caches is bit-identical.
#include "test_util.hpp"

namespace {

using namespace kvq_test;

// Chunk lengths summing to total: single tokens, a few tokens, about a page, several pages.
std::vector<int64_t> random_split(std::mt19937_64& rng, int64_t total, int P) {
  std::vector<int64_t> out;
  for (int64_t left = total; left > 0;) {
    const uint64_t kind = rng() % 4;
    const int64_t n = kind == 0 ? 1 : kind == 1 ? 1 + int64_t(rng() % 5) : kind == 2 ? 1 + int64_t(rng() % (2 * uint64_t(P))) : 1 + int64_t(rng() % (6 * uint64_t(P)));
    out.push_back(std::min(n, left));
    left -= out.back();
  }
  return out;
}

template <class Cfg>
void chunk_invariance(int R, int64_t prompt, int heads, int reps, uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  const Seq<T> s = make_seq<T>(seed, prompt + 1, heads, D);
  const int hq = heads * 2;
  const std::vector<T> q = make_rows<T>(seed + 1, 1, hq, D);
  HostCache<Cfg> one = make_cache<Cfg>(heads, R, prompt + 1);
  uint32_t flags_one = 0;
  REQUIRE(append_seq<Cfg>(one, s, 0, prompt, 0, &flags_one) == Status::kSuccess);
  const auto call_one = single_call<T>(prompt, one.cold_len[0], 1, hq, s.k_row(prompt), s.v_row(prompt), q, heads, D,
                                       1.0f / std::sqrt(float(D)));
  const std::vector<float> out_one = run_attention<Cfg>(one, call_one);
  std::mt19937_64 rng(seed + 2);
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<int64_t> split;
    if (rep == 0) split.assign(size_t(prompt), 1);  // token by token
    else if (rep == 1)                              // page-aligned chunks
      for (int64_t left = prompt; left > 0; left -= std::min<int64_t>(left, P)) split.push_back(std::min<int64_t>(left, P));
    else split = random_split(rng, prompt, P);
    HostCache<Cfg> chunked = make_cache<Cfg>(heads, R, prompt + 1);
    uint32_t flags = 0;
    int64_t at = 0;
    for (int64_t n : split) {
      REQUIRE(append_seq<Cfg>(chunked, s, at, n, 0, &flags) == Status::kSuccess);
      at += n;
    }
    CAPTURE(rep);
    CAPTURE(split.size());
    CHECK(chunked.len[0] == one.len[0]);
    CHECK(chunked.cold_len[0] == one.cold_len[0]);
    CHECK(chunked.block_table == one.block_table);
    CHECK(chunked.cold == one.cold);  // the whole pool, byte for byte (same page ids in the same order)
    CHECK(live_rows_equal<Cfg>(chunked, 0, one, 0));
    CHECK(flags == flags_one);
    const std::vector<float> out = run_attention<Cfg>(chunked, call_one);
    CHECK(same_floats(out, out_one));
  }
  check_sequence<Cfg>(one, 0, s);
}

TEST_CASE("chunking: INT2 P=64, any split equals one-shot prefill (pool bytes, live rows, decode attention)") {
  chunk_invariance<CfgInt2>(128, 900, 2, 8, 0xc401);
  chunk_invariance<CfgInt2>(0, 611, 2, 6, 0xc402);
}

TEST_CASE("chunking: INT4, INT8, none and INT4-keys/INT2-values, any split equals one-shot prefill") {
  SUBCASE("INT4 and INT8, any split equals one-shot prefill") {
    chunk_invariance<CfgInt4>(64, 777, 2, 6, 0xc411);
    chunk_invariance<CfgInt8>(128, 700, 2, 6, 0xc412);
  }
  SUBCASE("none and INT4-keys/INT2-values, any split equals one-shot prefill") {
    chunk_invariance<CfgNone>(128, 640, 1, 5, 0xc421);
    chunk_invariance<CfgK4V2>(64, 1001, 2, 6, 0xc422);
  }
}

TEST_CASE("chunking: fp16 models and pages 16 / 32, any split equals one-shot prefill") {
  SUBCASE("fp16 models, any split equals one-shot prefill") {
    chunk_invariance<CfgFp16Int2>(128, 850, 2, 6, 0xc431);
    chunk_invariance<CfgFp16None>(0, 300, 1, 4, 0xc432);
  }
  SUBCASE("pages 16 and 32, any split equals one-shot prefill") {
    chunk_invariance<CfgP16Int2>(32, 500, 2, 8, 0xc441);
    chunk_invariance<CfgP16K4V2D64>(0, 333, 4, 8, 0xc442);
    chunk_invariance<CfgP16Int8Fp16D64>(16, 400, 2, 6, 0xc443);
    chunk_invariance<CfgP32Int2G16D64>(64, 450, 2, 6, 0xc444);
  }
}

TEST_CASE("chunking: one call mixing prompts, chunks and decode tokens equals one-shot per sequence") {
  using Cfg = CfgP16Int2;
  using T = kvq::bf16;
  constexpr int B = 3, H = 2, R = 32, D = 128;
  const std::vector<int64_t> total = {420, 97, 260};
  std::vector<Seq<T>> seqs;
  for (int b = 0; b < B; ++b) seqs.push_back(make_seq<T>(0xc450 + uint64_t(b), total[size_t(b)] + 1, H, D));
  HostCache<Cfg> mixed = make_cache<Cfg>(H, R, 421, B, 1);
  mixed.hot_slot = {2, 3, 0};
  std::mt19937_64 rng(0xc45f);
  append_mixed_chunks<Cfg>(mixed, seqs, total, rng, 90);
  // decode step for the whole batch in one attention call
  const int hq = 2 * H;
  AttnCall<T> call;
  call.num_q_heads = hq;
  call.softmax_scale = 0.09f;
  call.cu_q = {0};
  for (int b = 0; b < B; ++b) {
    call.len.push_back(int32_t(total[size_t(b)]));
    call.cold.push_back(mixed.cold_len[size_t(b)]);
    call.cu_q.push_back(call.cu_q.back() + 1);
    call.new_k.insert(call.new_k.end(), seqs[size_t(b)].k_row(total[size_t(b)]), seqs[size_t(b)].k_row(total[size_t(b)]) + H * D);
    call.new_v.insert(call.new_v.end(), seqs[size_t(b)].v_row(total[size_t(b)]), seqs[size_t(b)].v_row(total[size_t(b)]) + H * D);
  }
  call.q = make_rows<T>(0xc460, B, hq, D);
  const std::vector<float> out = run_attention<Cfg>(mixed, call);
  for (int b = 0; b < B; ++b) {
    HostCache<Cfg> one = make_cache<Cfg>(H, R, 421);
    REQUIRE(append_seq<Cfg>(one, seqs[size_t(b)], 0, total[size_t(b)]) == Status::kSuccess);
    CAPTURE(b);
    CHECK(mixed.len[size_t(b)] == one.len[0]);
    CHECK(mixed.cold_len[size_t(b)] == one.cold_len[0]);
    CHECK(seq_cold_bytes<Cfg>(mixed, b) == seq_cold_bytes<Cfg>(one, 0));
    CHECK(live_rows_equal<Cfg>(mixed, b, one, 0));
    const std::vector<T> qb(call.q.begin() + std::ptrdiff_t(b) * hq * D, call.q.begin() + std::ptrdiff_t(b + 1) * hq * D);
    const auto c1 = single_call<T>(total[size_t(b)], one.cold_len[0], 1, hq, seqs[size_t(b)].k_row(total[size_t(b)]),
                                   seqs[size_t(b)].v_row(total[size_t(b)]), qb, H, D, 0.09f);
    const std::vector<float> o1 = run_attention<Cfg>(one, c1);
    CHECK(std::memcmp(o1.data(), out.data() + size_t(b) * hq * D, o1.size() * sizeof(float)) == 0);
  }
}

}  // namespace

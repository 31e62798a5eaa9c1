// reference::attention (attention/batch.hpp contract): against a naive fp64 attention, causal
// masking, append-before vs append-after, and the accuracy order of the formats.
#include "test_util.hpp"

namespace {

using namespace kvq_test;

// One sequence: a prompt of `prefix` tokens in `before`; `after` is the same cache after this
// step's append of q_len tokens. q holds the step's queries ([q_len][heads * group][D]).
template <class Cfg>
struct Step {
  using T = typename Cfg::dtype;
  Seq<T> s;
  HostCache<Cfg> before, after;
  int64_t prefix = 0, q_len = 0;
  int heads = 0, hq = 0;
  std::vector<T> q;
  Step(uint64_t seed, int heads_, int group, int R, int64_t prefix_, int64_t q_len_, const GenOptions& o = GenOptions{})
      : s(make_seq<T>(seed, prefix_ + q_len_, heads_, Cfg::head_dim, o)),
        before(make_cache<Cfg>(heads_, R, prefix_ + q_len_)),
        after(before),
        prefix(prefix_),
        q_len(q_len_),
        heads(heads_),
        hq(heads_ * group),
        q(make_rows<T>(seed ^ 0x9e3779b97f4a7c15ull, q_len_, heads_ * group, Cfg::head_dim)) {
    REQUIRE(append_seq<Cfg>(before, s, 0, prefix) == Status::kSuccess);
    after = before;
    REQUIRE(append_seq<Cfg>(after, s, prefix, q_len) == Status::kSuccess);
  }
  AttnCall<T> call(bool after_append, float scale, float softcap = 0.0f) const {
    const int64_t cold = after_append ? after.cold_len[0] : before.cold_len[0];
    return single_call<T>(prefix, cold, q_len, hq, s.k_row(prefix), s.v_row(prefix), q, heads, Cfg::head_dim, scale, softcap);
  }
  std::vector<float> run(bool after_append, float scale, float softcap = 0.0f) {
    return run_attention<Cfg>(after_append ? after : before, call(after_append, scale, softcap));
  }
  // The fp64 attention over what the cache holds after the append, read through kvq_test::cached_value.
  std::vector<double> naive(double scale, double softcap = 0.0) {
    std::vector<double> k, v;
    cached_operands<Cfg>(after, 0, prefix, after.cold_len[0], s.k_row(prefix), s.v_row(prefix), q_len, k, v);
    return naive_attention(q.data(), prefix, q_len, hq, heads, Cfg::head_dim, k, v, scale, softcap);
  }
};

template <class Cfg>
void against_naive(uint64_t seed, int group, int R, int64_t prefix, int64_t q_len, float scale, float softcap) {
  CAPTURE(group);
  CAPTURE(prefix);
  CAPTURE(q_len);
  CAPTURE(softcap);
  Step<Cfg> st(seed, 2, group, R, prefix, q_len);
  const std::vector<double> ref = st.naive(scale, softcap);
  const std::vector<float> before = st.run(false, scale, softcap), after = st.run(true, scale, softcap);
  const size_t rows = size_t(q_len) * size_t(st.hq);
  CHECK(max_row_rel_err(before.data(), ref.data(), rows, Cfg::head_dim) < 1e-5);
  CHECK(max_row_rel_err(after.data(), ref.data(), rows, Cfg::head_dim) < 1e-5);
}

TEST_CASE("attention: reference equals a naive fp64 attention on the decoded cache, GQA 1, 2, 3, 4, 8, none is lossless") {
  SUBCASE("reference equals a naive fp64 attention on the decoded cache, GQA 1, 2, 3, 4, 8") {
    const float scale = 1.0f / std::sqrt(128.0f);
    // prefix 639 with R 128, P 64: the ring is full, the decode token turns page 7 cold in this step
    against_naive<CfgInt2>(0xa701, 1, 128, 639, 1, scale, 0.0f);
    against_naive<CfgK4V2>(0xa702, 2, 128, 700, 1, scale, 0.0f);
    against_naive<CfgInt8>(0xa703, 3, 64, 1000, 1, scale, 0.0f);
    against_naive<CfgNone>(0xa704, 4, 128, 383, 1, scale, 0.0f);
    against_naive<CfgInt4>(0xa705, 8, 0, 640, 1, scale, 0.0f);
    against_naive<CfgP16Int2>(0xa706, 8, 32, 555, 1, scale, 0.0f);
    against_naive<CfgFp16Int2>(0xa707, 4, 64, 1500, 1, scale, 0.0f);
    against_naive<CfgK3V2>(0xa708, 4, 128, 700, 1, scale, 0.0f);
  }
  SUBCASE("\"none\" attends the raw input (lossless baseline)") {
    using Cfg = CfgNone;
    const float scale = 1.0f / std::sqrt(128.0f);
    Step<Cfg> st(0xa781, 2, 4, 64, 700, 5);
    // operands straight from the input tokens, not through the cache
    std::vector<double> k(st.s.k.size()), v(st.s.v.size());
    for (size_t i = 0; i < k.size(); ++i) k[i] = st.s.k[i].to_float(), v[i] = st.s.v[i].to_float();
    const std::vector<double> ref = naive_attention(st.q.data(), st.prefix, st.q_len, st.hq, st.heads, 128, k, v, scale, 0.0);
    const std::vector<float> out = st.run(false, scale);
    CHECK(max_row_rel_err(out.data(), ref.data(), size_t(st.q_len) * size_t(st.hq), 128) < 1e-5);
    CHECK(st.after.cold_len[0] > 0);
  }
}

TEST_CASE("attention: logit soft-cap matches the naive attention and changes the result") {
  // large logits (scale 0.35) so that a cap of 8 is active
  for (int group : {1, 2, 3, 4, 8}) {
    against_naive<CfgInt2>(0xa710 + uint64_t(group), group, 64, 400 + 37 * group, group % 2 ? 1 : 3, 0.35f, 8.0f);
  }
  Step<CfgK4V2> st(0xa719, 2, 4, 128, 500, 1);
  const std::vector<float> capped = st.run(false, 0.35f, 8.0f), uncapped = st.run(false, 0.35f, 0.0f);
  CHECK(rel_err(capped, uncapped) > 1e-3);
  const std::vector<double> ref = st.naive(0.35, 8.0);
  CHECK(max_row_rel_err(capped.data(), ref.data(), size_t(st.hq), 128) < 1e-5);
}

TEST_CASE("attention: chunked prefill (q_len > 1) equals the naive causal attention") {
  const float scale = 1.0f / std::sqrt(128.0f);
  against_naive<CfgInt4>(0xa721, 2, 64, 500, 37, scale, 0.0f);          // q_len < R
  against_naive<CfgInt2>(0xa722, 4, 64, 300, 150, scale, 0.0f);         // q_len > R: pages of new tokens turn cold
  against_naive<CfgP16K4V2D64>(0xa723, 3, 32, 201, 90, 0.125f, 0.0f);
  against_naive<CfgInt8>(0xa724, 1, 128, 0, 260, scale, 5.0f);          // a whole prompt, empty prefix
  against_naive<CfgNone>(0xa725, 2, 0, 64, 64, scale, 0.0f);
}

TEST_CASE("attention: causal masking: query i never sees new token i+1") {
  using Cfg = CfgInt2;
  using T = kvq::bf16;
  const float scale = 1.0f / std::sqrt(128.0f);
  constexpr int64_t q_len = 8;  // <= R: the pages turning cold in this step hold prefix tokens only
  Step<Cfg> st(0xa731, 2, 2, 64, 311, q_len);
  const AttnCall<T> base = st.call(false, scale);
  const std::vector<float> out = run_attention<Cfg>(st.before, base);
  const size_t row = size_t(st.hq) * 128;
  for (int64_t i = 0; i + 1 < q_len; ++i) {
    AttnCall<T> c = base;
    for (size_t e = size_t(i + 1) * 2 * 128; e < c.new_k.size(); ++e) {  // tokens i+1 .. q_len-1
      c.new_k[e] = T::from_float(c.new_k[e].to_float() * -3.0f + 5.0f);
      c.new_v[e] = T::from_float(c.new_v[e].to_float() * 7.0f - 2.0f);
    }
    const std::vector<float> o = run_attention<Cfg>(st.before, c);
    CAPTURE(i);
    CHECK(std::memcmp(o.data(), out.data(), size_t(i + 1) * row * sizeof(float)) == 0);  // queries 0..i unchanged
    CHECK(std::memcmp(o.data() + size_t(i + 1) * row, out.data() + size_t(i + 1) * row, row * sizeof(float)) != 0);
  }
  // and the query at the last position does see every new token, including its own
  AttnCall<T> c = base;
  c.new_v[c.new_v.size() - 1] = T::from_float(100.0f);
  const std::vector<float> o = run_attention<Cfg>(st.before, c);
  CHECK(std::memcmp(o.data(), out.data(), size_t(q_len - 1) * row * sizeof(float)) == 0);
  CHECK(std::memcmp(o.data() + size_t(q_len - 1) * row, out.data() + size_t(q_len - 1) * row, row * sizeof(float)) != 0);
}

// Decoding steps of random q_len from `start` to `end`: at each step attention with the cold
// length before the append must equal, bit for bit, attention after reference::append.
template <class Cfg>
int before_after_steps(uint64_t seed, int R, int64_t start, int64_t end, int64_t min_q, int64_t max_q, int group = 2) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  const int heads = 2, hq = heads * group;
  const Seq<T> s = make_seq<T>(seed, end, heads, D);
  HostCache<Cfg> c = make_cache<Cfg>(heads, R, end);
  REQUIRE(append_seq<Cfg>(c, s, 0, start) == Status::kSuccess);
  std::mt19937_64 rng(seed + 1);
  int turned = 0, mismatches = 0;
  for (int64_t L = start; L < end;) {
    const int64_t q_len = std::min(end - L, min_q + int64_t(rng() % uint64_t(max_q - min_q + 1)));
    const std::vector<T> q = make_rows<T>(seed + uint64_t(L), q_len, hq, D);
    const int64_t c_old = c.cold_len[0];
    const auto call_before = single_call<T>(L, c_old, q_len, hq, s.k_row(L), s.v_row(L), q, heads, D, 0.1f);
    const std::vector<float> before = run_attention<Cfg>(c, call_before);
    REQUIRE(append_seq<Cfg>(c, s, L, q_len) == Status::kSuccess);
    const int64_t c_new = c.cold_len[0];
    turned += c_new > c_old;
    const auto call_after = single_call<T>(L, c_new, q_len, hq, s.k_row(L), s.v_row(L), q, heads, D, 0.1f);
    const std::vector<float> after = run_attention<Cfg>(c, call_after);
    if (!same_floats(before, after)) {
      if (mismatches++ == 0) MESSAGE("first mismatch at L=", L, " q_len=", q_len, " C_old=", c_old, " C_new=", c_new);
    }
    L += q_len;
  }
  CHECK(mismatches == 0);
  return turned;
}

TEST_CASE("attention: append before or after the step gives the same bits (q_len 1, pages turning cold)") {
  CHECK(before_after_steps<CfgInt2>(0xa741, 64, 100, 480, 1, 1) >= 5);
  CHECK(before_after_steps<CfgP16Int2>(0xa742, 0, 10, 200, 1, 1, 3) >= 10);
  CHECK(before_after_steps<CfgFp16Int2>(0xa743, 128, 190, 330, 1, 1, 1) >= 2);
  CHECK(before_after_steps<CfgInt8>(0xa744, 64, 127, 330, 1, 1, 4) >= 3);
}

TEST_CASE("attention: append before or after the step gives the same bits (q_len 2..16, speculative decode)") {
  CHECK(before_after_steps<CfgK4V2>(0xa751, 64, 50, 600, 2, 16) >= 5);
  CHECK(before_after_steps<CfgP16K4V2D64>(0xa752, 16, 5, 300, 2, 9, 4) >= 10);
  CHECK(before_after_steps<CfgInt4>(0xa753, 0, 63, 500, 3, 5) >= 5);
}

TEST_CASE("attention: append before or after the step gives the same bits (big chunks, batch of mixed steps)") {
  CHECK(before_after_steps<CfgInt2>(0xa761, 128, 0, 1500, 100, 400) >= 3);
  CHECK(before_after_steps<CfgP16Int8Fp16D64>(0xa762, 32, 7, 700, 50, 257) >= 3);
  // a batch: decode token, speculative step and chunk in one call, cold lengths before vs after
  using Cfg = CfgK4V2;
  using T = kvq::bf16;
  constexpr int H = 2, D = 128, hq = 4, R = 64;
  const std::vector<int64_t> prefix = {191, 250, 130}, q_len = {1, 7, 300};
  std::vector<Seq<T>> seqs;
  HostCache<Cfg> c = make_cache<Cfg>(H, R, 600, 3, 2);
  c.hot_slot = {4, 1, 2};
  AttnCall<T> call;
  call.num_q_heads = hq;
  call.softmax_scale = 0.08f;
  call.cu_q = {0};
  std::vector<int64_t> counts;
  std::vector<const T*> k, v;
  for (int b = 0; b < 3; ++b) {
    seqs.push_back(make_seq<T>(0xa770 + uint64_t(b), prefix[size_t(b)] + q_len[size_t(b)], H, D));
    REQUIRE(append_seq<Cfg>(c, seqs.back(), 0, prefix[size_t(b)], b) == Status::kSuccess);
    call.len.push_back(int32_t(prefix[size_t(b)]));
    call.cold.push_back(c.cold_len[size_t(b)]);
    call.cu_q.push_back(call.cu_q.back() + int32_t(q_len[size_t(b)]));
    const T* kb = seqs.back().k_row(prefix[size_t(b)]);
    const T* vb = seqs.back().v_row(prefix[size_t(b)]);
    call.new_k.insert(call.new_k.end(), kb, kb + q_len[size_t(b)] * H * D);
    call.new_v.insert(call.new_v.end(), vb, vb + q_len[size_t(b)] * H * D);
    counts.push_back(q_len[size_t(b)]);
    k.push_back(kb);
    v.push_back(vb);
  }
  call.q = make_rows<T>(0xa77f, call.cu_q.back(), hq, D);
  const std::vector<float> before = run_attention<Cfg>(c, call);
  const std::vector<int32_t> cold_before = c.cold_len;
  REQUIRE(append_rows<Cfg>(c, counts, k, v) == Status::kSuccess);
  for (int b = 0; b < 3; ++b) CHECK(c.cold_len[size_t(b)] > cold_before[size_t(b)]);  // every sequence turned a page
  call.cold = c.cold_len;
  const std::vector<float> after = run_attention<Cfg>(c, call);
  CHECK(same_floats(before, after));
}

template <class Cfg>
double quantized_error(uint64_t seed, const GenOptions& o, const std::vector<float>& reference, std::vector<float>* out_none) {
  Step<Cfg> st(seed, 2, 4, 64, 2000, 4, o);
  const std::vector<float> out = st.run(false, 1.0f / std::sqrt(128.0f));
  if (out_none) *out_none = out;
  return reference.empty() ? 0.0 : rel_err(out, reference);
}

TEST_CASE("attention: error against none is ordered INT8 < INT4 < INT2 on keys with outlier channels (K3V2 below INT2)") {
  GenOptions o;
  o.outliers_per_head = 4;
  o.min_mag = 10.0f;
  o.max_mag = 20.0f;
  o.outlier_offset = 0.8f;  // outlier channels: large, mostly constant magnitude (KIVI's observation)
  o.outlier_spread = 0.1f;
  for (uint64_t seed : {0xa791ull, 0xa792ull, 0xa793ull}) {
    std::vector<float> none;
    quantized_error<CfgNone>(seed, o, {}, &none);
    const double e8 = quantized_error<CfgInt8>(seed, o, none, nullptr);
    const double e4 = quantized_error<CfgInt4>(seed, o, none, nullptr);
    const double e2 = quantized_error<CfgInt2>(seed, o, none, nullptr);
    const double e42 = quantized_error<CfgK4V2>(seed, o, none, nullptr);
    const double e32 = quantized_error<CfgK3V2>(seed, o, none, nullptr);  // the same bytes as INT2
    MESSAGE("relative attention error vs none: int8 ", e8, "  int4 ", e4, "  k4v2 ", e42, "  k3v2 ", e32, "  int2 ", e2);
    CHECK(e8 > 0.0);
    CHECK(e8 < e4);
    CHECK(e4 < e42);
    CHECK(e42 < e2);
    CHECK(e32 < e2);
    CHECK(e2 < 1.0);  // INT2 is lossy but still correlated with the baseline (noise would give ~1.4)
  }
}

}  // namespace

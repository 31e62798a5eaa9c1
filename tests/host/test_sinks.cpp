// Attention sinks through the host reference (CacheView::sinks, cache/view.hpp): the sink buffer
// holds page 0's first rows exactly once page 0 is cold; page 0's records are the page encoded
// with rows t < sinks read as row `sinks`; chunking, batching, rollback and release keep cold pool
// and sink buffers byte-identical to a one-shot prefill; dequantize_sequence and attention read
// sink tokens exactly, also while page 0 turns cold inside an attention call.
#include "test_util.hpp"

namespace {

using namespace kvq_test;
using kvq::KeyClip;

constexpr uint16_t kSinkPoison = 0x7fc1;  // a NaN in bf16 and fp16: any read of it shows up

// A cache whose sink buffers hold kSinkPoison (so "not written" and "not read" are observable).
template <class Cfg>
HostCache<Cfg> sink_cache(int heads, int R, int64_t max_tokens, int sinks, KeyClip clip, int batch = 1, int extra_slots = 0) {
  HostCache<Cfg> c = make_cache<Cfg>(heads, R, max_tokens, batch, extra_slots);
  REQUIRE(c.set_encoding(sinks, clip) == Status::kSuccess);
  for (auto& x : c.sink_k) x.bits = kSinkPoison;
  for (auto& x : c.sink_v) x.bits = kSinkPoison;
  return c;
}

// Model-like tokens whose token 0 is an attention sink: keys x24 + 3, values x6.
template <class T>
Seq<T> sinky_seq(uint64_t seed, int64_t n, int heads, int D) {
  Seq<T> s = make_seq<T>(seed, n, heads, D);
  for (int h = 0; h < heads && n > 0; ++h)
    for (int c = 0; c < D; ++c) {
      s.k_mut(0, h)[c] = T::from_float(s.k_row(0, h)[c].to_float() * 24.0f + 3.0f);
      s.v_mut(0, h)[c] = T::from_float(s.v_row(0, h)[c].to_float() * 6.0f);
    }
  return s;
}

template <class Cfg>
const typename Cfg::dtype* sink_k_row(HostCache<Cfg>& c, int b, int t, int h) {
  const auto v = c.view();
  return c.sink_k.data() + kvq::sink_offset(v.hot_slot[b], t, h, v.sinks, v.num_kv_heads, Cfg::head_dim);
}
template <class Cfg>
const typename Cfg::dtype* sink_v_row(HostCache<Cfg>& c, int b, int t, int h) {
  const auto v = c.view();
  return c.sink_v.data() + kvq::sink_offset(v.hot_slot[b], t, h, v.sinks, v.num_kv_heads, Cfg::head_dim);
}

// Whether sequence b's sink rows hold tokens [0, sinks) of s, bit for bit (all heads).
template <class Cfg>
bool sinks_hold(HostCache<Cfg>& c, int b, const Seq<typename Cfg::dtype>& s) {
  const auto v = c.view();
  for (int t = 0; t < v.sinks; ++t)
    for (int h = 0; h < v.num_kv_heads; ++h)
      if (!same_bits(sink_k_row(c, b, t, h), s.k_row(t, h), Cfg::head_dim) ||
          !same_bits(sink_v_row(c, b, t, h), s.v_row(t, h), Cfg::head_dim))
        return false;
  return true;
}

// Whether every sink row of hot slot `slot` still holds the poison.
template <class Cfg>
bool slot_poisoned(const HostCache<Cfg>& c, int slot, int sinks, int heads) {
  const size_t per_slot = size_t(sinks) * size_t(heads) * Cfg::head_dim;
  for (size_t i = size_t(slot) * per_slot; i < size_t(slot + 1) * per_slot; ++i)
    if (c.sink_k[i].bits != kSinkPoison || c.sink_v[i].bits != kSinkPoison) return false;
  return true;
}

// Record of page p, head h, as the encoder must write it: the page's raw rows with rows t < sinks
// replaced by row `sinks` on page 0, encoded with key_clip `clip` (a one-head encode_page).
template <class Cfg>
std::vector<uint8_t> expected_record(const Seq<typename Cfg::dtype>& s, int64_t p, int h, int sinks, KeyClip clip) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::vector<T> rows(size_t(2 * P) * D);
  for (int t = 0; t < P; ++t) {
    const int64_t src = p * P + (p == 0 && t < sinks ? sinks : t);
    std::copy_n(s.k_row(src, h), D, rows.data() + size_t(t) * D);
    std::copy_n(s.v_row(src, h), D, rows.data() + size_t(P + t) * D);
  }
  std::vector<uint8_t> record(Cfg::record_bytes);
  kvq::SeqAppend sa{};
  sa.len_new = P;
  sa.cold_new = P;
  kvq::CacheView<T> view{};
  view.num_kv_heads = 1;
  view.key_clip = clip;  // sinks stay 0 here: the replacement above is the rule under test
  uint32_t flags = 0;
  kvq::reference::encode_page<Cfg>(view, rows.data(), rows.data() + size_t(P) * D, sa, 0, record.data(), flags);
  return record;
}

template <class Cfg>
const uint8_t* pool_record(HostCache<Cfg>& c, int b, int64_t p, int h) {
  const auto v = c.view();
  return v.cold + kvq::record_offset(v.block_table[int64_t(b) * v.max_pages_per_seq + p], h, v.num_kv_heads, Cfg::record_bytes);
}

// Every cold record of sequence b equals expected_record.
template <class Cfg>
int64_t bad_records(HostCache<Cfg>& c, int b, const Seq<typename Cfg::dtype>& s, KeyClip clip) {
  const auto v = c.view();
  int64_t bad = 0;
  for (int64_t p = 0; p < c.cold_len[size_t(b)] / Cfg::page; ++p)
    for (int h = 0; h < v.num_kv_heads; ++h) {
      const std::vector<uint8_t> want = expected_record<Cfg>(s, p, h, v.sinks, clip);
      bad += std::memcmp(pool_record(c, b, p, h), want.data(), Cfg::record_bytes) != 0;
    }
  return bad;
}

// ---- the append ----------------------------------------------------------------------------------
// Sequence 1 of two (hot slots permuted, an unused slot) grows to past R + P tokens, either in one
// call or token by token. Until page 0 turns cold no sink row is written; then sequence 1's slot
// holds its tokens [0, sinks) exactly and every other slot is untouched; the records are
// expected_record's.
template <class Cfg>
void page0_turns_cold(int sinks, int R, KeyClip clip, bool one_shot, uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim, H = 2;
  CAPTURE(sinks);
  CAPTURE(R);
  CAPTURE(one_shot);
  CAPTURE(int(clip));
  const int64_t n = R + 3 * P + 5;
  const Seq<T> s = sinky_seq<T>(seed, n, H, D), other = sinky_seq<T>(seed + 1, n, H, D);
  HostCache<Cfg> c = sink_cache<Cfg>(H, R, n, sinks, clip, 2, 1);
  c.hot_slot = {2, 0};
  REQUIRE(append_seq<Cfg>(c, other, 0, R + P - 1, 0) == Status::kSuccess);  // sequence 0 stays hot
  if (one_shot) {
    REQUIRE(append_seq<Cfg>(c, s, 0, n, 1) == Status::kSuccess);
  } else {
    for (int64_t t = 0; t < n; ++t) {
      REQUIRE(append_seq<Cfg>(c, s, t, 1, 1) == Status::kSuccess);
      if (c.cold_len[1] == 0) REQUIRE(slot_poisoned<Cfg>(c, 0, sinks, H));
    }
  }
  CHECK(c.cold_len[1] > P);
  CHECK(sinks_hold<Cfg>(c, 1, s));
  CHECK(slot_poisoned<Cfg>(c, 2, sinks, H));  // sequence 0's slot: page 0 still hot
  CHECK(slot_poisoned<Cfg>(c, 1, sinks, H));  // the unused slot
  CHECK(bad_records<Cfg>(c, 1, s, clip) == 0);
  // not vacuous: with the sink token in its groups, page 0 would have other bytes
  bool differs = false;
  for (int h = 0; h < H; ++h) {
    const std::vector<uint8_t> plain = expected_record<Cfg>(s, 0, h, 0, clip);
    differs = differs || std::memcmp(pool_record(c, 1, 0, h), plain.data(), Cfg::record_bytes) != 0;
  }
  CHECK(differs);
  // the ring rows of the hot tokens hold their input
  const auto v = c.view();
  const int W = R + P;
  int64_t bad_ring = 0;
  for (int64_t t = c.cold_len[1]; t < c.len[1]; ++t)
    for (int h = 0; h < H; ++h) {
      const size_t o = kvq::hot_offset(v.hot_slot[1], kvq::ring_row(t, W), h, W, H, D);
      bad_ring += !same_bits(v.hot_k + o, s.k_row(t, h), D) || !same_bits(v.hot_v + o, s.v_row(t, h), D);
    }
  CHECK(bad_ring == 0);
}

TEST_CASE("sinks: page 0 turning cold copies its first rows exactly; page 0's record reads them as token `sinks`") {
  SUBCASE("INT2, P 64: sinks 1, 4, 16, 63; R 0 and 64; one call or token by token") {
    for (int sinks : {1, 4, 16})
      for (int R : {0, 64}) {
        page0_turns_cold<CfgInt2>(sinks, R, KeyClip::kMinMax, true, 0x5100 + uint64_t(sinks));
        page0_turns_cold<CfgInt2>(sinks, R, KeyClip::kMinMax, false, 0x5110 + uint64_t(sinks));
      }
  }
  SUBCASE("every format and page size, kMinMax and kMse") {
    for (KeyClip clip : {KeyClip::kMinMax, KeyClip::kMse}) {
      page0_turns_cold<CfgInt4>(4, 64, clip, true, 0x5121);
      page0_turns_cold<CfgInt8>(16, 0, clip, true, 0x5122);
      page0_turns_cold<CfgK4V2>(1, 128, clip, false, 0x5123);
      page0_turns_cold<CfgFp16Int2>(16, 64, clip, true, 0x5124);
      page0_turns_cold<CfgP16Int2>(15, 16, clip, false, 0x5125);  // sinks = P - 1
      page0_turns_cold<CfgP16K4V2D64>(4, 0, clip, true, 0x5126);
      page0_turns_cold<CfgP16Int8Fp16D64>(1, 32, clip, true, 0x5127);
      page0_turns_cold<CfgP32Int2G16D64>(16, 32, clip, false, 0x5128);  // key groups 0..15 hold sink rows only
    }
  }
}

TEST_CASE("sinks: the sink token no longer sets the step of page 0's key groups") {
  using Cfg = CfgInt2;
  using T = kvq::bf16;
  constexpr int P = 64, D = 128;
  const Seq<T> s = sinky_seq<T>(0x5131, 2 * P, 1, D);
  // key error of tokens [sinks, P) of page 0, encoded without and with 4 sinks
  auto error = [&](int sinks) {
    const std::vector<uint8_t> rec = expected_record<Cfg>(s, 0, 0, sinks, KeyClip::kMinMax);
    double e = 0.0;
    for (int t = 4; t < P; ++t)
      for (int c = 0; c < D; ++c) {
        const double d = double(s.k_row(t)[c].to_float()) - kvq::decode_record_element<Cfg, Role::kKey>(rec.data(), t, c);
        e += d * d;
      }
    return e;
  };
  const double without = error(0), with = error(4);
  MESSAGE("page 0 key squared error of tokens 4..63: no sinks ", without, ", 4 sinks ", with);
  CHECK(with < 0.5 * without);
}

// ---- chunking and batching -------------------------------------------------------------------
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

template <class T>
bool same_vec(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

// Any split of a prompt gives the one-shot prefill's cold pool, sink buffers, live rows and flags,
// and bit-identical attention for the next token.
template <class Cfg>
void sink_chunk_invariance(int sinks, KeyClip clip, int R, int64_t prompt, int reps, uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim, H = 2;
  CAPTURE(sinks);
  CAPTURE(int(clip));
  CAPTURE(R);
  CAPTURE(prompt);
  const Seq<T> s = sinky_seq<T>(seed, prompt + 1, H, D);
  const int hq = 2 * H;
  const std::vector<T> q = make_rows<T>(seed + 1, 1, hq, D);
  HostCache<Cfg> one = sink_cache<Cfg>(H, R, prompt + 1, sinks, clip);
  uint32_t flags_one = 0;
  REQUIRE(append_seq<Cfg>(one, s, 0, prompt, 0, &flags_one) == Status::kSuccess);
  REQUIRE(one.cold_len[0] > 0);
  CHECK(sinks_hold<Cfg>(one, 0, s));
  CHECK(bad_records<Cfg>(one, 0, s, clip) == 0);
  const auto call = single_call<T>(prompt, one.cold_len[0], 1, hq, s.k_row(prompt), s.v_row(prompt), q, H, D, 0.09f);
  const std::vector<float> out_one = run_attention<Cfg>(one, call);
  std::mt19937_64 rng(seed + 2);
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<int64_t> split;
    if (rep == 0) split.assign(size_t(prompt), 1);
    else if (rep == 1)
      for (int64_t left = prompt; left > 0; left -= std::min<int64_t>(left, P)) split.push_back(std::min<int64_t>(left, P));
    else if (rep == 2)  // a cut right after the sink tokens and one right before page 0 turns cold
      split = {sinks, R + P - 1 - sinks, 1, prompt - R - P};
    else split = random_split(rng, prompt, P);
    HostCache<Cfg> chunked = sink_cache<Cfg>(H, R, prompt + 1, sinks, clip);
    uint32_t flags = 0;
    int64_t at = 0;
    for (int64_t n : split) {
      REQUIRE(append_seq<Cfg>(chunked, s, at, n, 0, &flags) == Status::kSuccess);
      at += n;
    }
    CAPTURE(rep);
    CHECK(chunked.cold_len == one.cold_len);
    CHECK(chunked.cold == one.cold);
    CHECK(same_vec(chunked.sink_k, one.sink_k));
    CHECK(same_vec(chunked.sink_v, one.sink_v));
    CHECK(live_rows_equal<Cfg>(chunked, 0, one, 0));
    CHECK(flags == flags_one);
    CHECK(same_floats(run_attention<Cfg>(chunked, call), out_one));
  }
}

TEST_CASE("sinks: any split of a prompt gives the one-shot cold pool and sink buffers, byte for byte") {
  SUBCASE("INT2 P 64, sinks 1, 4, 16, kMinMax and kMse") {
    for (int sinks : {1, 4, 16}) {
      sink_chunk_invariance<CfgInt2>(sinks, KeyClip::kMinMax, 64, 500, 5, 0x5200 + uint64_t(sinks));
      sink_chunk_invariance<CfgInt2>(sinks, KeyClip::kMse, 0, 333, 5, 0x5210 + uint64_t(sinks));
    }
  }
  SUBCASE("other formats and pages") {
    sink_chunk_invariance<CfgK4V2>(4, KeyClip::kMse, 128, 700, 5, 0x5221);
    sink_chunk_invariance<CfgInt8>(16, KeyClip::kMinMax, 64, 400, 4, 0x5222);
    sink_chunk_invariance<CfgFp16Int2>(1, KeyClip::kMse, 64, 300, 4, 0x5223);
    sink_chunk_invariance<CfgP16Int2>(15, KeyClip::kMse, 32, 250, 6, 0x5224);
    sink_chunk_invariance<CfgP16K4V2D64>(8, KeyClip::kMinMax, 0, 200, 6, 0x5225);
    sink_chunk_invariance<CfgP32Int2G16D64>(16, KeyClip::kMse, 32, 260, 6, 0x5226);
  }
}

TEST_CASE("sinks: one call mixing prompts, chunks and decode tokens over permuted slots equals one-shot per sequence") {
  using Cfg = CfgP16Int2;
  using T = kvq::bf16;
  constexpr int B = 3, H = 2, R = 32, D = 128, sinks = 5;
  const std::vector<int64_t> total = {300, 60, 180};
  std::vector<Seq<T>> seqs;
  for (int b = 0; b < B; ++b) seqs.push_back(sinky_seq<T>(0x5250 + uint64_t(b), total[size_t(b)], H, D));
  HostCache<Cfg> mixed = sink_cache<Cfg>(H, R, 301, sinks, KeyClip::kMse, B, 2);
  mixed.hot_slot = {4, 1, 3};
  std::mt19937_64 rng(0x525f);
  append_mixed_chunks<Cfg>(mixed, seqs, total, rng, 40);
  CHECK(slot_poisoned<Cfg>(mixed, 0, sinks, H));
  CHECK(slot_poisoned<Cfg>(mixed, 2, sinks, H));
  for (int b = 0; b < B; ++b) {
    HostCache<Cfg> one = sink_cache<Cfg>(H, R, 301, sinks, KeyClip::kMse);
    REQUIRE(append_seq<Cfg>(one, seqs[size_t(b)], 0, total[size_t(b)]) == Status::kSuccess);
    CAPTURE(b);
    REQUIRE(mixed.cold_len[size_t(b)] == one.cold_len[0]);
    CHECK(seq_cold_bytes<Cfg>(mixed, b) == seq_cold_bytes<Cfg>(one, 0));
    CHECK(live_rows_equal<Cfg>(mixed, b, one, 0));
    if (one.cold_len[0] > 0) {
      CHECK(sinks_hold<Cfg>(mixed, b, seqs[size_t(b)]));
      CHECK(sinks_hold<Cfg>(one, 0, seqs[size_t(b)]));
    } else {
      CHECK(slot_poisoned<Cfg>(mixed, mixed.hot_slot[size_t(b)], sinks, H));
    }
  }
}

// ---- rollback and release --------------------------------------------------------------------
TEST_CASE("sinks: rollback keeps the sink rows; hot sink tokens rolled back are replaced; release starts over") {
  using Cfg = CfgInt2;
  using T = kvq::bf16;
  constexpr int P = 64, D = 128, H = 2, R = 64, sinks = 4;
  const Seq<T> a = sinky_seq<T>(0x5301, 600, H, D), b = sinky_seq<T>(0x5302, 600, H, D);
  SUBCASE("rollback to the cold length after page 0 turned cold: sink rows unchanged, then other tokens") {
    HostCache<Cfg> c = sink_cache<Cfg>(H, R, 600, sinks, KeyClip::kMse);
    REQUIRE(append_seq<Cfg>(c, a, 0, 200) == Status::kSuccess);
    REQUIRE(c.cold_len[0] == 128);
    const std::vector<T> sk = c.sink_k, sv = c.sink_v;
    REQUIRE(c.rollback(0, 128));
    CHECK_FALSE(c.rollback(0, 127));  // below the cold length: refused
    // different tokens from 128 on (b's rows): pages 2.. turn cold from them, the sink rows stay a's
    REQUIRE(append_seq<Cfg>(c, b, 128, 200) == Status::kSuccess);
    CHECK(c.cold_len[0] > 128);
    CHECK(same_vec(c.sink_k, sk));
    CHECK(same_vec(c.sink_v, sv));
    CHECK(sinks_hold<Cfg>(c, 0, a));
    std::vector<T> ko(size_t(328) * H * D), vo(ko.size());
    REQUIRE(kvq::reference::dequantize_sequence<Cfg>(c.view(), 1, 0, 328, c.cold_len[0], ko.data(), vo.data()) ==
            Status::kSuccess);
    for (int t = 0; t < sinks; ++t)
      for (int h = 0; h < H; ++h) {
        CHECK(same_bits(ko.data() + (size_t(t) * H + h) * D, a.k_row(t, h), D));
        CHECK(same_bits(vo.data() + (size_t(t) * H + h) * D, a.v_row(t, h), D));
      }
  }
  SUBCASE("rollback while page 0 is hot, below the sinks: the replacing tokens become the sink rows") {
    HostCache<Cfg> c = sink_cache<Cfg>(H, R, 600, sinks, KeyClip::kMinMax);
    REQUIRE(append_seq<Cfg>(c, a, 0, 3) == Status::kSuccess);
    REQUIRE(c.rollback(0, 1));
    // tokens 1.. now come from b: the sequence is a[0], b[1], b[2], ...
    Seq<T> mix = b;
    std::copy_n(a.k_row(0), H * D, mix.k_mut(0));
    std::copy_n(a.v_row(0), H * D, mix.v_mut(0));
    REQUIRE(append_seq<Cfg>(c, b, 1, 10) == Status::kSuccess);
    REQUIRE(c.rollback(0, 7));  // still hot: nothing quantized
    REQUIRE(append_seq<Cfg>(c, b, 7, 200) == Status::kSuccess);
    REQUIRE(c.cold_len[0] > 0);
    CHECK(sinks_hold<Cfg>(c, 0, mix));
    CHECK(bad_records<Cfg>(c, 0, mix, KeyClip::kMinMax) == 0);
  }
  SUBCASE("release, then a new sequence in the same slot: its own sink rows once its page 0 is cold") {
    HostCache<Cfg> c = sink_cache<Cfg>(H, R, 600, sinks, KeyClip::kMse);
    REQUIRE(append_seq<Cfg>(c, a, 0, 300) == Status::kSuccess);
    CHECK(sinks_hold<Cfg>(c, 0, a));
    REQUIRE(c.release(0));
    REQUIRE(append_seq<Cfg>(c, b, 0, R + P - 1) == Status::kSuccess);  // page 0 still hot: a's rows remain
    CHECK(sinks_hold<Cfg>(c, 0, a));
    // ... and are not read: dequantize gives b's hot rows
    std::vector<T> ko(size_t(R + P - 1) * H * D), vo(ko.size());
    REQUIRE(kvq::reference::dequantize_sequence<Cfg>(c.view(), 1, 0, R + P - 1, 0, ko.data(), vo.data()) == Status::kSuccess);
    CHECK(same_bits(ko.data(), b.k_row(0), size_t(sinks) * H * D));
    CHECK(same_bits(vo.data(), b.v_row(0), size_t(sinks) * H * D));
    REQUIRE(append_seq<Cfg>(c, b, R + P - 1, 1) == Status::kSuccess);
    REQUIRE(c.cold_len[0] == P);
    CHECK(sinks_hold<Cfg>(c, 0, b));
    CHECK(bad_records<Cfg>(c, 0, b, KeyClip::kMse) == 0);
  }
}

// ---- dequantize_sequence -------------------------------------------------------------------------
template <class Cfg>
void dequantize_with_sinks(int sinks, KeyClip clip, int R, uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim, H = 2;
  CAPTURE(sinks);
  CAPTURE(R);
  const int64_t n = R + 4 * P + 7;
  const Seq<T> s = sinky_seq<T>(seed, n, H, D);
  HostCache<Cfg> c = sink_cache<Cfg>(H, R, n, sinks, clip, 1, 1);
  c.hot_slot = {1};
  int64_t sink_differs = 0;
  for (int64_t L : {int64_t(sinks) - 1 > 0 ? int64_t(sinks) - 1 : int64_t(1), int64_t(R + P - 1), int64_t(R + P), n}) {
    REQUIRE(append_seq<Cfg>(c, s, c.len[0], L - c.len[0]) == Status::kSuccess);
    const int64_t C = c.cold_len[0];
    CAPTURE(L);
    CAPTURE(C);
    std::vector<T> ko(size_t(L) * H * D), vo(ko.size());
    REQUIRE(kvq::reference::dequantize_sequence<Cfg>(c.view(), 1, 0, L, C, ko.data(), vo.data()) == Status::kSuccess);
    int64_t bad = 0;
    for (int64_t t = 0; t < L; ++t)
      for (int h = 0; h < H; ++h) {
        const T* gk = ko.data() + (size_t(t) * H + h) * D;
        const T* gv = vo.data() + (size_t(t) * H + h) * D;
        if (t < sinks || t >= C) {  // exact: the sink buffer or the ring
          bad += !same_bits(gk, s.k_row(t, h), D) || !same_bits(gv, s.v_row(t, h), D);
          if (t < sinks && t < C) {
            const uint8_t* rec = pool_record(c, 0, 0, h);
            for (int ch = 0; ch < D; ++ch)
              sink_differs += T::from_float_saturate(kvq::decode_record_element<Cfg, Role::kKey>(rec, int(t), ch)).bits != gk[ch].bits;
          }
          continue;
        }
        const uint8_t* rec = pool_record(c, 0, t / P, h);
        for (int ch = 0; ch < D; ++ch) {
          bad += T::from_float_saturate(kvq::decode_record_element<Cfg, Role::kKey>(rec, int(t % P), ch)).bits != gk[ch].bits;
          bad += T::from_float_saturate(kvq::decode_record_element<Cfg, Role::kValue>(rec, int(t % P), ch)).bits != gv[ch].bits;
        }
      }
    CHECK(bad == 0);
  }
  CHECK(sink_differs > 0);  // the record's sink positions are not the sink tokens
}

TEST_CASE("sinks: dequantize_sequence returns sink tokens exactly, the other cold tokens decoded") {
  dequantize_with_sinks<CfgInt2>(4, KeyClip::kMinMax, 64, 0x5401);
  dequantize_with_sinks<CfgInt2>(16, KeyClip::kMse, 0, 0x5402);
  dequantize_with_sinks<CfgK4V2>(1, KeyClip::kMse, 128, 0x5403);
  dequantize_with_sinks<CfgInt8>(7, KeyClip::kMinMax, 64, 0x5404);
  dequantize_with_sinks<CfgFp16Int2>(16, KeyClip::kMse, 64, 0x5405);
  dequantize_with_sinks<CfgP16Int2>(15, KeyClip::kMinMax, 16, 0x5406);
  dequantize_with_sinks<CfgP32Int2G16D64>(2, KeyClip::kMse, 32, 0x5407);
}

// ---- attention -----------------------------------------------------------------------------------
// One sequence of `prefix` tokens, then a step of q_len queries with fresh K/V. The expected
// operands are built without the library's token routing: tokens < sinks are the input rows,
// tokens below the cold length after this step's append are decoded from the records that append
// writes, the others (and the step's own tokens, attention/batch.hpp) are the input rows.
template <class Cfg>
void attention_with_sinks(int sinks, KeyClip clip, int R, int64_t prefix, int64_t q_len, int group, float softcap,
                          uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim, H = 2;
  CAPTURE(sinks);
  CAPTURE(R);
  CAPTURE(prefix);
  CAPTURE(q_len);
  CAPTURE(group);
  const int hq = H * group;
  const float scale = 1.0f / std::sqrt(float(D));
  const Seq<T> s = sinky_seq<T>(seed, prefix + q_len, H, D);
  const std::vector<T> q = make_rows<T>(seed + 7, q_len, hq, D);
  HostCache<Cfg> before = sink_cache<Cfg>(H, R, prefix + q_len, sinks, clip, 1, 1);
  before.hot_slot = {1};
  REQUIRE(append_seq<Cfg>(before, s, 0, prefix) == Status::kSuccess);
  HostCache<Cfg> after = before;
  REQUIRE(append_seq<Cfg>(after, s, prefix, q_len) == Status::kSuccess);
  const int64_t c_before = before.cold_len[0], c_after = after.cold_len[0];
  CAPTURE(c_before);
  CAPTURE(c_after);
  std::vector<double> k(size_t(prefix + q_len) * H * D), v(k.size());
  for (int64_t t = 0; t < prefix + q_len; ++t)
    for (int h = 0; h < H; ++h)
      for (int c = 0; c < D; ++c) {
        const size_t e = (size_t(t) * H + h) * D + c;
        if (t < sinks || t >= c_after || t >= prefix) {  // the step's own tokens: always unquantized
          k[e] = s.k_row(t, h)[c].to_float();
          v[e] = s.v_row(t, h)[c].to_float();
        } else {
          const uint8_t* rec = pool_record(after, 0, t / P, h);
          k[e] = kvq::decode_record_element<Cfg, Role::kKey>(rec, int(t % P), c);
          v[e] = kvq::decode_record_element<Cfg, Role::kValue>(rec, int(t % P), c);
        }
      }
  const std::vector<double> ref = naive_attention(q.data(), prefix, q_len, hq, H, D, k, v, scale, softcap);
  const auto call_before = single_call<T>(prefix, c_before, q_len, hq, s.k_row(prefix), s.v_row(prefix), q, H, D, scale, softcap);
  const auto call_after = single_call<T>(prefix, c_after, q_len, hq, s.k_row(prefix), s.v_row(prefix), q, H, D, scale, softcap);
  const std::vector<float> out_before = run_attention<Cfg>(before, call_before);
  const std::vector<float> out_after = run_attention<Cfg>(after, call_after);
  const size_t rows = size_t(q_len) * size_t(hq);
  CHECK(max_row_rel_err(out_before.data(), ref.data(), rows, D) < 1e-5);
  CHECK(max_row_rel_err(out_after.data(), ref.data(), rows, D) < 1e-5);
  CHECK(same_floats(out_before, out_after));
}

TEST_CASE("sinks: attention equals a naive attention over exact sink tokens and decoded cold tokens") {
  const KeyClip mm = KeyClip::kMinMax, ms = KeyClip::kMse;
  SUBCASE("page 0 long cold: decode and speculative steps") {
    attention_with_sinks<CfgInt2>(4, mm, 64, 500, 1, 2, 0.0f, 0x5501);
    attention_with_sinks<CfgK4V2>(16, ms, 128, 700, 5, 4, 0.0f, 0x5502);
    attention_with_sinks<CfgP16Int2>(15, ms, 16, 200, 3, 4, 0.0f, 0x5503);
    attention_with_sinks<CfgInt8>(1, mm, 64, 400, 2, 1, 8.0f, 0x5504);
  }
  SUBCASE("page 0 turns cold inside the call (transition): a decode token, a chunk, a whole prompt") {
    attention_with_sinks<CfgInt2>(4, mm, 64, 127, 1, 2, 0.0f, 0x5511);      // the decode token turns page 0
    attention_with_sinks<CfgInt2>(16, ms, 64, 100, 40, 2, 0.0f, 0x5512);    // sink rows from the ring
    attention_with_sinks<CfgK4V2>(16, ms, 0, 0, 150, 3, 0.0f, 0x5513);      // sink rows from the step's new rows
    attention_with_sinks<CfgInt8>(1, mm, 128, 190, 5, 4, 0.0f, 0x5514);
    attention_with_sinks<CfgP32Int2G16D64>(16, ms, 32, 40, 30, 2, 5.0f, 0x5515);
    attention_with_sinks<CfgFp16Int2>(8, mm, 64, 3, 200, 2, 0.0f, 0x5516);  // sink rows split: ring and new rows
    attention_with_sinks<CfgP16K4V2D64>(4, ms, 0, 10, 60, 8, 0.0f, 0x5517);  // pages 0..3 turn cold together
  }
  SUBCASE("page 0 still hot: sink tokens from the ring or the new rows, the sink buffer not read") {
    attention_with_sinks<CfgInt2>(4, mm, 64, 2, 5, 2, 0.0f, 0x5521);
    attention_with_sinks<CfgP16Int2>(15, ms, 16, 20, 4, 1, 0.0f, 0x5522);
  }
}

// Decode steps of random q_len from an empty cache: attention with the cold length before the
// append equals, bit for bit, attention after it (page 0 turning cold in some step included).
template <class Cfg>
void sink_before_after(int sinks, KeyClip clip, int R, int64_t end, int64_t max_q, uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, H = 2, hq = 4;
  CAPTURE(sinks);
  const Seq<T> s = sinky_seq<T>(seed, end, H, D);
  HostCache<Cfg> c = sink_cache<Cfg>(H, R, end, sinks, clip);
  std::mt19937_64 rng(seed + 1);
  int mismatches = 0, turned = 0;
  for (int64_t L = 0; L < end;) {
    const int64_t q_len = std::min(end - L, 1 + int64_t(rng() % uint64_t(max_q)));
    const std::vector<T> q = make_rows<T>(seed + uint64_t(L), q_len, hq, D);
    const int64_t c_old = c.cold_len[0];
    const std::vector<float> before =
        run_attention<Cfg>(c, single_call<T>(L, c_old, q_len, hq, s.k_row(L), s.v_row(L), q, H, D, 0.1f));
    REQUIRE(append_seq<Cfg>(c, s, L, q_len) == Status::kSuccess);
    turned += c_old == 0 && c.cold_len[0] > 0;
    const std::vector<float> after =
        run_attention<Cfg>(c, single_call<T>(L, c.cold_len[0], q_len, hq, s.k_row(L), s.v_row(L), q, H, D, 0.1f));
    if (!same_floats(before, after) && mismatches++ == 0) MESSAGE("first mismatch at L=", L, " q_len=", q_len);
    L += q_len;
  }
  CHECK(turned == 1);
  CHECK(mismatches == 0);
}

TEST_CASE("sinks: attention before or after the step's append gives the same bits") {
  sink_before_after<CfgInt2>(4, KeyClip::kMinMax, 64, 260, 1, 0x5601);
  sink_before_after<CfgP16Int2>(15, KeyClip::kMse, 16, 120, 6, 0x5602);
  sink_before_after<CfgK4V2>(16, KeyClip::kMse, 0, 200, 16, 0x5603);
  sink_before_after<CfgInt8>(1, KeyClip::kMinMax, 64, 220, 40, 0x5604);
}

// ---- HostCache::set_encoding ---------------------------------------------------------------------
TEST_CASE("sinks: HostCache::set_encoding sizes the sink buffers and the view carries the encoding") {
  HostCache<CfgInt2> c = make_cache<CfgInt2>(3, 64, 400, 2, 1);
  auto v0 = c.view();
  CHECK(v0.sinks == 0);
  CHECK(v0.sink_k == nullptr);
  CHECK(v0.sink_v == nullptr);
  CHECK(v0.key_clip == KeyClip::kMinMax);
  REQUIRE(c.set_encoding(16, KeyClip::kMse) == Status::kSuccess);
  CHECK(c.sink_k.size() == size_t(3) * 16 * 3 * 128);  // [slots][sinks][heads][D]
  CHECK(c.sink_v.size() == c.sink_k.size());
  auto v1 = c.view();
  CHECK(v1.sinks == 16);
  CHECK(v1.sink_k == c.sink_k.data());
  CHECK(v1.sink_v == c.sink_v.data());
  CHECK(v1.key_clip == KeyClip::kMse);
  REQUIRE(c.set_encoding(0, KeyClip::kMinMax) == Status::kSuccess);
  CHECK(c.view().sinks == 0);
  CHECK(c.view().sink_k == nullptr);
  HostCache<CfgP16Int2> p16 = make_cache<CfgP16Int2>(1, 16, 100);
  CHECK(p16.set_encoding(15, KeyClip::kMinMax) == Status::kSuccess);  // sinks < page
  HostCache<CfgNone> none = make_cache<CfgNone>(1, 64, 100);
  CHECK(none.set_encoding(0, KeyClip::kMse) == Status::kSuccess);  // key_clip alone: allowed (nothing to clip)
}

}  // namespace

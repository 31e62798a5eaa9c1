// Bad sink / key-clip settings (check_view and check_sinks, cache/append_plan.hpp; HostCache::
// set_encoding): reference::append, reference::attention and reference::dequantize_sequence return
// the documented Status and write nothing -- no pool, ring, sink row or output.
#include <functional>

#include "test_util.hpp"

namespace {

using namespace kvq_test;
using kvq::KeyClip;

constexpr int H = 2, R = 64, kSlots = 3;

// Two sequences of a cache with 4 sinks (0: 150 tokens, C 64, sink rows written; 1: 100 tokens,
// C 0), pages reserved for an append of 70 and 100 tokens; rings and sink rows poisoned with
// recognisable bits.
template <class Cfg>
struct Fixture {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim;
  HostCache<Cfg> c = make_cache<Cfg>(H, R, 600, 2, 1);
  Seq<T> s0 = make_seq<T>(0x5b00, 400, H, D), s1 = make_seq<T>(0x5b01, 400, H, D);
  std::vector<T> spare_k, spare_v;  // sink buffers for views that set sinks themselves
  explicit Fixture(int sinks) {
    if (sinks > 0) REQUIRE(c.set_encoding(sinks, KeyClip::kMse) == Status::kSuccess);
    REQUIRE(append_seq<Cfg>(c, s0, 0, 150, 0) == Status::kSuccess);
    REQUIRE(append_seq<Cfg>(c, s1, 0, 100, 1) == Status::kSuccess);
    REQUIRE(c.cold_len == std::vector<int32_t>{64, 0});
    REQUIRE(c.reserve(0, 70));
    REQUIRE(c.reserve(1, 100));
    poison_rings<Cfg>(c, 0x1234);
    for (auto& x : c.sink_k) x.bits = uint16_t(x.bits ^ 0x0101);  // still finite, but not the input
    for (auto& x : c.sink_v) x.bits = uint16_t(x.bits ^ 0x0101);
    spare_k.assign(size_t(kSlots) * 64 * H * D, T{0x3c3c});
    spare_v = spare_k;
  }
  // Everything an entry point might write.
  struct State {
    Snapshot<Cfg> snap;
    std::vector<T> sink_k, sink_v, spare_k, spare_v;
    bool unchanged(const Fixture& f) const {
      return snap.unchanged(f.c) && same_bits(sink_k.data(), f.c.sink_k.data(), sink_k.size()) && sink_k.size() == f.c.sink_k.size() &&
             same_bits(sink_v.data(), f.c.sink_v.data(), sink_v.size()) && same_bits(spare_k.data(), f.spare_k.data(), spare_k.size()) &&
             same_bits(spare_v.data(), f.spare_v.data(), spare_v.size());
    }
  };
  State state() const { return State{Snapshot<Cfg>(c), c.sink_k, c.sink_v, spare_k, spare_v}; }
};

template <class Cfg>
using Mutation = std::function<void(kvq::CacheView<typename Cfg::dtype>&, Fixture<Cfg>&)>;

// The view mutated by `mutate` is refused with `want` by append, attention and dequantize alike,
// each of which leaves every buffer and output as it was. (want == kSuccess: accepted, and each call writes.)
template <class Cfg>
void expect_view(int fixture_sinks, const Mutation<Cfg>& mutate, Status want, const char* what) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  const std::string label = what;
  CAPTURE(label);
  // append: seq 0 150 -> 220 (C 64 -> 128), seq 1 100 -> 200 (C 0 -> 128: page 0 turns cold)
  {
    Fixture<Cfg> f(fixture_sinks);
    kvq::CacheView<T> view = f.c.view();
    mutate(view, f);
    std::vector<int32_t> len = f.c.len, cold = f.c.cold_len, cu{0, 70, 170}, cold_out{-7, -7};
    std::vector<T> nk(size_t(170) * H * D), nv(nk.size());
    std::memcpy(nk.data(), f.s0.k_row(150), 70 * H * D * sizeof(T));
    std::memcpy(nv.data(), f.s0.v_row(150), 70 * H * D * sizeof(T));
    std::memcpy(nk.data() + 70 * H * D, f.s1.k_row(100), 100 * H * D * sizeof(T));
    std::memcpy(nv.data() + 70 * H * D, f.s1.v_row(100), 100 * H * D * sizeof(T));
    kvq::AppendBatch<T> a;
    a.batch = 2;
    a.lengths = kvq::SeqLengths{len.data(), cold.data()};
    a.cu_new = cu.data();
    a.new_k = nk.data();
    a.new_v = nv.data();
    a.cold_out = cold_out.data();
    const auto st0 = f.state();
    uint32_t flags = 0x80u;
    CHECK(kvq::reference::append<Cfg>(view, a, &flags) == want);
    if (want != Status::kSuccess) {
      CHECK(st0.unchanged(f));
      CHECK(flags == 0x80u);
      CHECK(cold_out == std::vector<int32_t>{-7, -7});
    } else {
      CHECK(cold_out == std::vector<int32_t>{128, 128});
    }
  }
  // attention: seq 0 three tokens at 150 (C 64); seq 1 a 100-token chunk at 100 (C 0: pages 0
  // and 1 turn cold inside the call, sink rows from the ring)
  {
    Fixture<Cfg> f(fixture_sinks);
    kvq::CacheView<T> view = f.c.view();
    mutate(view, f);
    AttnCall<T> call;
    call.num_q_heads = 2 * H;
    call.len = {150, 100};
    call.cold = {64, 0};
    call.cu_q = {0, 3, 103};
    call.q = make_rows<T>(0x5b02, 103, 2 * H, D);
    call.new_k.assign(f.s0.k_row(150), f.s0.k_row(153));
    call.new_v.assign(f.s0.v_row(150), f.s0.v_row(153));
    call.new_k.insert(call.new_k.end(), f.s1.k_row(100), f.s1.k_row(200));
    call.new_v.insert(call.new_v.end(), f.s1.v_row(100), f.s1.v_row(200));
    call.softmax_scale = 0.1f;
    std::vector<float> out(size_t(103) * 2 * H * D, -3.25f);
    const auto st0 = f.state();
    CHECK(kvq::reference::attention<Cfg>(view, call.batch(), out.data()) == want);
    CHECK(st0.unchanged(f));  // attention never writes the cache
    if (want != Status::kSuccess)
      CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == -3.25f; }));
    else
      CHECK(std::none_of(out.begin(), out.end(), [](float x) { return x == -3.25f; }));
  }
  // dequantize_sequence of seq 0 (150 tokens, C 64: sink rows read)
  {
    Fixture<Cfg> f(fixture_sinks);
    kvq::CacheView<T> view = f.c.view();
    mutate(view, f);
    std::vector<T> ko(size_t(150) * H * D, T{0x5a5a}), vo = ko;
    const auto st0 = f.state();
    CHECK(kvq::reference::dequantize_sequence<Cfg>(view, 2, 0, 150, 64, ko.data(), vo.data()) == want);
    CHECK(st0.unchanged(f));
    const bool untouched = std::all_of(ko.begin(), ko.end(), [](T x) { return x.bits == 0x5a5a; }) &&
                           std::all_of(vo.begin(), vo.end(), [](T x) { return x.bits == 0x5a5a; });
    CHECK(untouched == (want != Status::kSuccess));
  }
}

TEST_CASE("sinks bad input: the fixtures are sound (accepted, and every entry point writes)") {
  expect_view<CfgInt2>(4, [](auto&, auto&) {}, Status::kSuccess, "4 sinks, kMse");
  expect_view<CfgInt2>(0, [](auto&, auto&) {}, Status::kSuccess, "no sinks");
  expect_view<CfgNone>(0, [](auto&, auto&) {}, Status::kSuccess, "none, no sinks");
  expect_view<CfgNone>(0, [](auto& v, auto&) { v.key_clip = KeyClip::kMse; }, Status::kSuccess, "none, kMse (no asymmetric keys)");
  // the largest valid counts, through a view that brings its own (big enough) sink buffers
  expect_view<CfgInt2>(0, [](auto& v, auto& f) { v.sinks = 16; v.sink_k = f.spare_k.data(); v.sink_v = f.spare_v.data(); },
                       Status::kSuccess, "16 sinks, P 64");
}

TEST_CASE("sinks bad input: a sink count outside [0, min(16, page - 1)] is kConfigMismatch, nothing written") {
  auto with_spare = [](int sinks) {
    return [sinks](kvq::CacheView<kvq::bf16>& v, Fixture<CfgInt2>& f) {
      v.sinks = sinks;
      v.sink_k = f.spare_k.data();
      v.sink_v = f.spare_v.data();
    };
  };
  expect_view<CfgInt2>(4, with_spare(-1), Status::kConfigMismatch, "sinks -1");
  expect_view<CfgInt2>(4, with_spare(INT32_MIN), Status::kConfigMismatch, "sinks INT32_MIN");
  expect_view<CfgInt2>(4, with_spare(17), Status::kConfigMismatch, "sinks 17 > kMaxSinks");
  expect_view<CfgInt2>(4, with_spare(64), Status::kConfigMismatch, "sinks == page");
  expect_view<CfgInt2>(4, with_spare(1000), Status::kConfigMismatch, "sinks 1000");
  // P 16: 16 sinks are within kMaxSinks but not below the page
  CHECK(kvq::kMaxSinks == 16);
  HostCache<CfgP16Int2> p16 = make_cache<CfgP16Int2>(1, 16, 100);
  REQUIRE(p16.set_encoding(15, KeyClip::kMinMax) == Status::kSuccess);
  const Seq<kvq::bf16> s = make_seq<kvq::bf16>(0x5b10, 60, 1, 128);
  REQUIRE(append_seq<CfgP16Int2>(p16, s, 0, 40) == Status::kSuccess);
  REQUIRE(p16.cold_len[0] == 16);
  kvq::CacheView<kvq::bf16> v = p16.view();
  std::vector<kvq::bf16> buf(16 * 128, kvq::bf16{0x3c3c}), ko(40 * 128, kvq::bf16{0x5a5a}), vo = ko;
  v.sink_k = v.sink_v = buf.data();
  v.sinks = 16;
  CHECK(kvq::reference::dequantize_sequence<CfgP16Int2>(v, 1, 0, 40, 16, ko.data(), vo.data()) == Status::kConfigMismatch);
  CHECK(std::all_of(ko.begin(), ko.end(), [](kvq::bf16 x) { return x.bits == 0x5a5a; }));
  CHECK(std::all_of(buf.begin(), buf.end(), [](kvq::bf16 x) { return x.bits == 0x3c3c; }));
  v.sinks = 15;
  CHECK(kvq::check_view(v, 16) == Status::kSuccess);
  v.sinks = 16;
  CHECK(kvq::check_view(v, 16) == Status::kConfigMismatch);
  v.residual = 32;
  CHECK(kvq::check_view(v, 32) == Status::kSuccess);  // the same 16 sinks below a page of 32
  v.sinks = 17;
  CHECK(kvq::check_view(v, 64) == Status::kConfigMismatch);
}

TEST_CASE("sinks bad input: null sink buffers with sinks > 0 are kNullPointer, nothing written") {
  expect_view<CfgInt2>(4, [](auto& v, auto&) { v.sink_k = nullptr; }, Status::kNullPointer, "sink_k null");
  expect_view<CfgInt2>(4, [](auto& v, auto&) { v.sink_v = nullptr; }, Status::kNullPointer, "sink_v null");
  expect_view<CfgInt2>(4, [](auto& v, auto&) { v.sink_k = v.sink_v = nullptr; }, Status::kNullPointer, "both null");
  expect_view<CfgK4V2>(0, [](auto& v, auto& f) { v.sinks = 1; v.sink_k = f.spare_k.data(); }, Status::kNullPointer,
                       "sinks set, sink_v never given");
  // sinks 0: the pointers are not looked at
  expect_view<CfgInt2>(0, [](auto& v, auto&) { v.sink_k = nullptr; v.sink_v = nullptr; }, Status::kSuccess, "no sinks, null");
}

TEST_CASE("sinks bad input: sinks on a configuration that quantizes neither K nor V are kConfigMismatch") {
  auto sinks_on = [](int sinks) {
    return [sinks](auto& v, auto& f) {
      v.sinks = sinks;
      v.sink_k = f.spare_k.data();
      v.sink_v = f.spare_v.data();
    };
  };
  expect_view<CfgNone>(0, sinks_on(1), Status::kConfigMismatch, "none/none, 1 sink");
  expect_view<CfgNone>(0, sinks_on(16), Status::kConfigMismatch, "none/none, 16 sinks");
  expect_view<CfgFp16None>(0, sinks_on(4), Status::kConfigMismatch, "fp16 none/none, 4 sinks");
  using KNoneV2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::NoQuant, kvq::Int2<32>>;  // one side quantized: allowed
  expect_view<KNoneV2>(0, sinks_on(4), Status::kSuccess, "none keys, INT2 values, 4 sinks");
}

TEST_CASE("sinks bad input: a key_clip that is not a KeyClip value is kConfigMismatch, nothing written") {
  expect_view<CfgInt2>(4, [](auto& v, auto&) { v.key_clip = static_cast<KeyClip>(2); }, Status::kConfigMismatch, "key_clip 2");
  expect_view<CfgInt2>(0, [](auto& v, auto&) { v.key_clip = static_cast<KeyClip>(-1); }, Status::kConfigMismatch, "key_clip -1");
  expect_view<CfgInt8>(0, [](auto& v, auto&) { v.key_clip = static_cast<KeyClip>(77); }, Status::kConfigMismatch,
                       "key_clip 77 on INT8 (no asymmetric keys: still refused)");
  expect_view<CfgNone>(0, [](auto& v, auto&) { v.key_clip = static_cast<KeyClip>(3); }, Status::kConfigMismatch, "key_clip 3 on none");
}

// set_encoding: a refused call changes nothing (sinks, key_clip, sink buffers, the view).
template <class Cfg>
void expect_set_encoding(HostCache<Cfg>& c, int sinks, KeyClip clip, Status want) {
  CAPTURE(sinks);
  CAPTURE(int(clip));
  const auto before = c.view();
  const std::vector<typename Cfg::dtype> sk = c.sink_k, sv = c.sink_v;
  CHECK(c.set_encoding(sinks, clip) == want);
  if (want == Status::kSuccess) return;
  const auto after = c.view();
  CHECK(after.sinks == before.sinks);
  CHECK(after.key_clip == before.key_clip);
  CHECK(after.sink_k == before.sink_k);
  CHECK(after.sink_v == before.sink_v);
  CHECK(c.sink_k.size() == sk.size());
  CHECK(same_bits(c.sink_k.data(), sk.data(), sk.size()));
  CHECK(same_bits(c.sink_v.data(), sv.data(), sv.size()));
}

TEST_CASE("sinks bad input: HostCache::set_encoding refuses what the entry points refuse, and changes nothing") {
  HostCache<CfgInt2> c = make_cache<CfgInt2>(2, 64, 300, 2, 1);
  REQUIRE(c.set_encoding(3, KeyClip::kMse) == Status::kSuccess);
  for (auto& x : c.sink_k) x.bits = 0x1111;
  for (auto& x : c.sink_v) x.bits = 0x2222;
  expect_set_encoding(c, -1, KeyClip::kMinMax, Status::kConfigMismatch);
  expect_set_encoding(c, 17, KeyClip::kMinMax, Status::kConfigMismatch);
  expect_set_encoding(c, 64, KeyClip::kMinMax, Status::kConfigMismatch);
  expect_set_encoding(c, 4, static_cast<KeyClip>(2), Status::kConfigMismatch);
  expect_set_encoding(c, 0, static_cast<KeyClip>(-1), Status::kConfigMismatch);
  HostCache<CfgP16Int2> p16 = make_cache<CfgP16Int2>(1, 16, 100);
  expect_set_encoding(p16, 16, KeyClip::kMinMax, Status::kConfigMismatch);
  expect_set_encoding(p16, 15, KeyClip::kMinMax, Status::kSuccess);
  // "none" K and V: every entry point refuses sinks there, so set_encoding does too
  HostCache<CfgNone> none = make_cache<CfgNone>(1, 64, 100);
  expect_set_encoding(none, 1, KeyClip::kMinMax, Status::kConfigMismatch);
  expect_set_encoding(none, 16, KeyClip::kMse, Status::kConfigMismatch);
  expect_set_encoding(none, 0, KeyClip::kMse, Status::kSuccess);
  HostCache<CfgFp16None> none16 = make_cache<CfgFp16None>(1, 64, 100);
  expect_set_encoding(none16, 4, KeyClip::kMinMax, Status::kConfigMismatch);
  // only while every sequence is empty: a later change would mix encodings and lose sink rows
  HostCache<CfgInt2> used = make_cache<CfgInt2>(1, 64, 300);
  REQUIRE(used.set_encoding(4, KeyClip::kMse) == Status::kSuccess);
  used.len[0] = 5;  // as after an append of 5 tokens
  expect_set_encoding(used, 2, KeyClip::kMinMax, Status::kInvalidLength);
  used.len[0] = 0;
  expect_set_encoding(used, 2, KeyClip::kMinMax, Status::kSuccess);
  // a refused cache answers with its own status
  HostCache<CfgInt2> refused(0, 10, 1, 0, 4, 1);
  REQUIRE(refused.status() == Status::kInvalidShape);
  CHECK(refused.set_encoding(4, KeyClip::kMse) == Status::kInvalidShape);
}

}  // namespace

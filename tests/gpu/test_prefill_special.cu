// Chunked-prefill cases the random schedules do not reach: arguments rejected on the host,
// sequences rejected on the device (only they are skipped), and CUDA-graph capture replayed with
// different chunk lengths within the plan.
#include "attention_special.cuh"
#include "prefill_check.cuh"

namespace {

using Cfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using T = kvq::bf16;
constexpr int kHeads = 2, kGroup = 3, kR = 64, kPages = 80;

struct Fixture : kvq_test::SpecialFixture<Cfg> {
  Fixture(const std::vector<int32_t>& prompt, uint64_t seed) : SpecialFixture(kHeads, kPages, kR, prompt, seed, true) {}
};

// A prefill call's host inputs for chunks of `counts` tokens per sequence.
struct Inputs : kvq_test::SpecialInputs<T> {
  Inputs(kvq::reference::HostCache<Cfg>& host, kvq_test::KvGenerator& gen, const std::vector<int32_t>& counts)
      : SpecialInputs(host, gen, counts, kHeads, kGroup) {}
};

kvq::PrefillPlan make_plan(int batch, int64_t max_tokens, int max_q, int64_t total_q) {
  kvq::PrefillPlan plan;
  REQUIRE(kvq::plan_prefill<Cfg>(kvq::PrefillShape{batch, kHeads * kGroup, kHeads, kR, max_tokens, max_q, total_q}, &plan) ==
          kvq::Status::kSuccess);
  return plan;
}

}  // namespace

namespace kvq_test_policy {  // a named namespace: kernels' template arguments (not a function's local type)
// The warp-specialized kernel with at most 3 stages, unpaired; and the paired kernel launched
// without clusters (its CTAs then run unpaired).
struct TunedPrefill : kvq::PrefillPolicy {
  static constexpr int kWsMaxStages = 3;
  static constexpr bool kWsPairs = false;
};
struct NoClusters : kvq::PrefillPolicy {
  static constexpr bool kWsClusters = false;
};
}  // namespace kvq_test_policy

TEST_SUITE("gpu") {
  TEST_CASE("prefill: arguments rejected on the host, with the Status that names the problem") {
    Fixture f({300, 40}, 81);
    Inputs in(f.host, f.gen, {100, 7});
    for (int b = 0; b < 2; ++b) REQUIRE(f.host.reserve(b, in.cu[size_t(b) + 1] - in.cu[size_t(b)]));
    f.dev.upload_tables(f.host);
    kvq_test::DeviceAttention<T> d(in.a, in.cu, in.q, in.k, in.v, f.dev.cold_len.get());
    const kvq::PrefillPlan plan = make_plan(2, 400, 100, 107);
    kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes + 256);
    kvq_test::DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
    const kvq::CacheView<T> v = f.dev.view(f.host);
    auto run = [&](const kvq::CacheView<T>& view, const kvq::AttentionBatch<T>& a, const kvq::PrefillPlan& p, void* w,
                   size_t bytes, T* out, uint32_t* fl) { return kvq::prefill<Cfg>(view, a, p, w, bytes, out, fl, nullptr); };
    auto call = [&](void* w, size_t bytes, T* out, uint32_t* fl) { return run(v, d.a, plan, w, bytes, out, fl); };
    kvq_test::check_call_arguments<T>(call, ws, plan.workspace_bytes, d.out.get(), flags.get());
    kvq::AttentionBatch<T> odd_q = d.a;
    odd_q.q = d.a.q + 1;  // rows must be 16-byte aligned
    CHECK(run(v, odd_q, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::AttentionBatch<T> no_k = d.a;
    no_k.new_k = nullptr;
    CHECK(run(v, no_k, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kNullPointer);
    kvq::AttentionBatch<T> odd_heads = d.a;
    odd_heads.num_q_heads = 7;
    CHECK(run(v, odd_heads, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::AttentionBatch<T> no_scale = d.a;
    no_scale.softmax_scale = 0.0f;
    CHECK(run(v, no_scale, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::AttentionBatch<T> bigger = d.a;
    bigger.batch = 3;
    CHECK(run(v, bigger, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::PrefillPlan other = plan;
    other.page = 32;
    CHECK(run(v, d.a, other, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kConfigMismatch);
    kvq::CacheView<T> no_ring = v;
    no_ring.hot_k = nullptr;
    CHECK(run(no_ring, d.a, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kNullPointer);
    // Attention sinks: rows read with 16-byte loads, both buffers given, fewer than the page and kMaxSinks.
    kvq_test::DeviceBuffer<T> sink_rows(size_t(f.host.view().num_slots) * 4 * kHeads * 128 + 8);
    kvq::CacheView<T> sinks = v;
    sinks.sinks = 4;
    sinks.sink_k = sinks.sink_v = sink_rows.get();
    kvq::CacheView<T> odd_sink = sinks;
    odd_sink.sink_v = sink_rows.get() + 1;
    CHECK(run(odd_sink, d.a, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::CacheView<T> no_sink = sinks;
    no_sink.sink_k = nullptr;
    CHECK(run(no_sink, d.a, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kNullPointer);
    kvq::CacheView<T> many_sinks = sinks;
    many_sinks.sinks = kvq::kMaxSinks + 1;
    CHECK(run(many_sinks, d.a, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kConfigMismatch);
    kvq::PrefillPlan p;
    CHECK(kvq::plan_prefill<Cfg>(kvq::PrefillShape{2, 6, 2, kR, 400, 0, 0}, &p) == kvq::Status::kInvalidShape);
    CHECK(kvq::plan_prefill<Cfg>(kvq::PrefillShape{2, 6, 2, kR, 400, 10, 21}, &p) == kvq::Status::kInvalidShape);
    CHECK(kvq::plan_prefill<Cfg>(kvq::PrefillShape{2, 6, 4, kR, 400, 10, 20}, &p) == kvq::Status::kInvalidShape);
    CHECK(kvq::plan_prefill<Cfg>(kvq::PrefillShape{2, 6, 2, 70, 400, 10, 20}, &p) == kvq::Status::kConfigMismatch);
    CHECK(kvq::plan_prefill<Cfg>(kvq::PrefillShape{2, 6, 2, kR, 400, 10, 20}, nullptr) == kvq::Status::kNullPointer);
    const kvq::PrefillShape ok{2, 6, 2, kR, 400, 10, 20};
    // A kernel forced by the tests' and benchmarks' planner (detail::plan_prefill_with).
    using Choice = kvq::detail::PrefillChoice;
    const auto plan_with = [&](const Choice& c) { return kvq::detail::plan_prefill_with<Cfg>(ok, &p, c); };
    CHECK(plan_with(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 48}) == kvq::Status::kInvalidShape);  // tile
    CHECK(plan_with(Choice{static_cast<kvq::PrefillKernel>(7), 0, 0}) == kvq::Status::kInvalidShape);
    CHECK(plan_with(Choice{static_cast<kvq::PrefillKernel>(1), 0, 0}) == kvq::Status::kInvalidShape);  // no kernel 1
    CHECK(plan_with(Choice{kvq::PrefillKernel::kMmaSync, 0, 64}) == kvq::Status::kInvalidShape);  // tiles: wgmma_ws only
    if (kvq::detail::prefill_wgmma_available<Cfg>()) {
      CHECK(plan_with(Choice{kvq::PrefillKernel::kWgmmaWs, kvq::kPrefillRowsSmall, 0}) == kvq::Status::kInvalidShape);
      CHECK(plan_with(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 32}) == kvq::Status::kInvalidShape);  // its tile is 64
      REQUIRE(kvq::plan_prefill<Cfg>(ok, &p) == kvq::Status::kSuccess);
      CHECK(p.kernel == kvq::prefill_hopper_default<Cfg>());
      CHECK(p.kernel == kvq::PrefillKernel::kWgmmaWs);
      CHECK(p.tile_tokens == 64);
      // Neither role quantized: 128-token tiles by default, 64 on request, nothing else.
      using NoneCfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::NoQuant, kvq::NoQuant>;
      const auto plan_none = [&](const Choice& c) { return kvq::detail::plan_prefill_with<NoneCfg>(ok, &p, c); };
      REQUIRE(kvq::plan_prefill<NoneCfg>(ok, &p) == kvq::Status::kSuccess);
      CHECK(p.kernel == kvq::PrefillKernel::kWgmmaWs);
      CHECK(p.tile_tokens == 128);
      REQUIRE(plan_none(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 64}) == kvq::Status::kSuccess);
      CHECK(p.tile_tokens == 64);
      REQUIRE(plan_none(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 128}) == kvq::Status::kSuccess);
      CHECK(p.tile_tokens == 128);
      CHECK(plan_none(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 32}) == kvq::Status::kInvalidShape);
      CHECK(plan_with(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 128}) == kvq::Status::kInvalidShape);  // quantized: 64 only
    } else {
      CHECK(plan_with(Choice{kvq::PrefillKernel::kWgmmaWs, 0, 0}) == kvq::Status::kNotInstantiated);
    }
    REQUIRE(plan_with(Choice{kvq::PrefillKernel::kMmaSync, 0, 0}) == kvq::Status::kSuccess);
    CHECK(p.kernel == kvq::PrefillKernel::kMmaSync);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(flags.download()[0] == 0u);
  }

  TEST_CASE("prefill: a PrefillPolicy of other values runs kernels of its own, which match the reference") {
    static_assert(kvq::detail::PrefillWsSmem<Cfg, 64, kvq_test_policy::TunedPrefill>::stages == 3, "the policy's stages");
    static_assert(!kvq::detail::prefill_ws_paired<Cfg, 64, kvq_test_policy::TunedPrefill>(), "unpaired");
    static_assert(kvq::detail::prefill_ws_paired<Cfg, 64, kvq::PrefillPolicy>(), "the default pairs this configuration");
    if (!kvq::detail::prefill_wgmma_available<Cfg>()) {
      MESSAGE("no wgmma kernel for this configuration, build or GPU: skipped");
      return;
    }
    kvq_test::ScopedPrefillChoice choice(kvq::PrefillKernel::kWgmmaWs, 0);
    kvq_test::check_prefill_schedule<Cfg, kvq_test_policy::TunedPrefill>(8901);
    kvq_test::check_prefill_schedule<Cfg, kvq_test_policy::NoClusters>(8902);
  }

  TEST_CASE("prefill: sequences rejected on the device keep their poisoned output, the others are computed") {
    Fixture f({700, 300, 500, 90}, 91);
    // Sequence 1's chunk is longer than the plan's.
    const Inputs in(f.host, f.gen, {150, 201, 20, 5});
    kvq_test::check_device_rejections(f, in, kPages, [&](kvq_test::DeviceAttention<T>& d, int64_t max_tokens, T* out,
                                                         uint32_t* flags) {
      const kvq::PrefillPlan plan = make_plan(4, max_tokens, 200, in.cu.back());
      kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
      return kvq::prefill<Cfg>(f.dev.view(f.host), d.a, plan, ws.get(), ws.size(), out, flags, nullptr);
    });
  }

  TEST_CASE("prefill: captured once in a CUDA graph, replayed with different chunk lengths") {
    constexpr int kBatch = 2, kMaxQ = 300;
    Fixture f({500, 3}, 101);
    const kvq::PrefillPlan plan = make_plan(kBatch, 4000, kMaxQ, kBatch * kMaxQ);
    for (int b = 0; b < kBatch; ++b) REQUIRE(f.host.reserve(b, 1500));  // block tables fixed before capture
    f.dev.upload_tables(f.host);
    kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
    kvq_test::check_graph_replays<Cfg>(
        f.host, f.dev, kBatch, kMaxQ, kHeads, kGroup, /*replays*/ 4, /*seed*/ 102, /*check_rel_max*/ false,
        [&](const std::vector<int32_t>& counts) { return Inputs(f.host, f.gen, counts); },
        [&](const kvq::AttentionBatch<T>& da, T* out, uint32_t* flags, cudaStream_t stream) {
          return kvq::prefill<Cfg>(f.dev.view(f.host), da, plan, ws.get(), ws.size(), out, flags, stream);
        });
  }
}

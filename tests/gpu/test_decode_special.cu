// Decode attention cases the random tests do not reach: arguments rejected on the host, sequences
// rejected on the device (only they are skipped), CUDA-graph capture replayed with different
// lengths within the plan (the records kernel, and the many-row kernel of a "none" configuration),
// a query row whose slots need several passes of the merge kernel, and a batch mixing an empty
// prefix with one of over 1M tokens.
#include "decode_check.cuh"
#include "attention_special.cuh"

#include <algorithm>

namespace {

using Cfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using T = kvq::bf16;
constexpr int kHeads = 2, kGroup = 4, kR = 64, kRowPages = 80;

struct Fixture : kvq_test::SpecialFixture<Cfg> {
  Fixture(const std::vector<int32_t>& prompt, uint64_t seed) : SpecialFixture(kHeads, kRowPages, kR, prompt, seed, false) {}
};

// A decode call's host inputs for q_len `counts` per sequence.
struct Inputs : kvq_test::SpecialInputs<T> {
  Inputs(kvq::reference::HostCache<Cfg>& host, kvq_test::KvGenerator& gen, const std::vector<int32_t>& counts)
      : SpecialInputs(host, gen, counts, kHeads, kGroup) {}
};

// Runs decode on d's inputs into poisoned output: the output and the flags word.
std::pair<std::vector<T>, uint32_t> decode_into_poison(kvq_test::DeviceAttention<T>& d, const kvq::CacheView<T>& view,
                                                       const kvq::DecodePlan& plan) {
  kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
  return kvq_test::run_into_poison(d, [&](T* out, uint32_t* flags) {
    return kvq::decode<Cfg>(view, d.a, plan, ws.get(), ws.size(), out, flags, nullptr);
  });
}

kvq::DecodePlan make_plan(int batch, int64_t max_tokens, int max_q, int64_t total_q) {
  kvq::DecodePlan plan;
  REQUIRE(kvq::plan_decode<Cfg>(kvq::DecodeShape{batch, kHeads * kGroup, kHeads, kR, max_tokens, max_q, total_q,
                                                 kvq_test::num_sms()},
                                &plan) == kvq::Status::kSuccess);
  return plan;
}

}  // namespace

namespace kvq_test_policy {  // a named namespace: kernels' template arguments (not a function's local type)
// Every member of DecodePolicy changed: the records kernel at 3 CTAs a multiprocessor (1 CTA: 2 for
// the two-row-tile form) and steps of one tile.
struct TunedDecode : kvq::DecodePolicy {
  static constexpr int kMinCtas = 3, kMinCtasWide = 2, kStep = 1;
};
}  // namespace kvq_test_policy

TEST_SUITE("gpu") {
  TEST_CASE("decode: arguments rejected on the host, with the Status that names the problem") {
    Fixture f({300, 40}, 51);
    Inputs in(f.host, f.gen, {1, 2});
    for (int b = 0; b < 2; ++b) REQUIRE(f.host.reserve(b, in.cu[size_t(b) + 1] - in.cu[size_t(b)]));
    f.dev.upload_tables(f.host);
    kvq_test::DeviceAttention<T> d(in.a, in.cu, in.q, in.k, in.v, f.dev.cold_len.get());
    const kvq::DecodePlan plan = make_plan(2, 400, 2, 3);
    kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes + 256);
    kvq_test::DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
    const kvq::CacheView<T> v = f.dev.view(f.host);
    auto run = [&](const kvq::CacheView<T>& view, const kvq::AttentionBatch<T>& a, const kvq::DecodePlan& p, void* w,
                   size_t bytes, T* out, uint32_t* fl) { return kvq::decode<Cfg>(view, a, p, w, bytes, out, fl, nullptr); };
    auto call = [&](void* w, size_t bytes, T* out, uint32_t* fl) { return run(v, d.a, plan, w, bytes, out, fl); };
    kvq_test::check_call_arguments<T>(call, ws, plan.workspace_bytes, d.out.get(), flags.get());
    kvq::AttentionBatch<T> no_q = d.a;
    no_q.q = nullptr;
    CHECK(run(v, no_q, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kNullPointer);
    kvq::AttentionBatch<T> odd_heads = d.a;
    odd_heads.num_q_heads = 7;  // not a multiple of the KV heads
    CHECK(run(v, odd_heads, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::AttentionBatch<T> bigger = d.a;
    bigger.batch = 3;  // more sequences than planned
    CHECK(run(v, bigger, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kInvalidShape);
    kvq::DecodePlan other = plan;
    other.head_dim = 64;
    CHECK(run(v, d.a, other, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kConfigMismatch);
    for (int rows : {0, 7, 16, kvq::kDecodeManyRows}) {  // not what the planner gives this shape (8); 64: INT2 has no many-row kernel
      kvq::DecodePlan altered = plan;
      altered.rows_per_cta = rows;
      CHECK(run(v, d.a, altered, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kConfigMismatch);
    }
    kvq::CacheView<T> no_table = v;
    no_table.block_table = nullptr;
    CHECK(run(no_table, d.a, plan, ws.get(), ws.size(), d.out.get(), flags.get()) == kvq::Status::kNullPointer);
    kvq::DecodePlan p;
    const kvq::DecodeShape too_long{2, 8, 2, kR, 400, kvq::kDecodeMaxQLen + 1, 34, 132};
    CHECK(kvq::plan_decode<Cfg>(too_long, &p) == kvq::Status::kInvalidShape);
    const kvq::DecodeShape zero_q{2, 8, 2, kR, 400, 0, 2, 132};
    CHECK(kvq::plan_decode<Cfg>(zero_q, &p) == kvq::Status::kInvalidShape);
    CHECK(kvq::plan_decode<Cfg>(too_long, nullptr) == kvq::Status::kNullPointer);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(flags.download()[0] == 0u);
  }

  TEST_CASE("decode: sequences rejected on the device keep their poisoned output, the others are computed") {
    Fixture f({700, 300, 500, 90}, 61);
    // Sequence 1 asks for 3 new tokens (the plan allows 2).
    const Inputs in(f.host, f.gen, {2, 3, 1, 1});
    kvq_test::check_device_rejections(f, in, kRowPages, [&](kvq_test::DeviceAttention<T>& d, int64_t max_tokens, T* out,
                                                            uint32_t* flags) {
      const kvq::DecodePlan plan = make_plan(4, max_tokens, 2, in.cu.back());
      kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
      return kvq::decode<Cfg>(f.dev.view(f.host), d.a, plan, ws.get(), ws.size(), out, flags, nullptr);
    });
  }

  TEST_CASE("decode: a sequence whose cu_q rows lie outside the batch's is rejected, the others are computed") {
    Fixture f({700, 300, 500}, 67);
    Inputs in(f.host, f.gen, {1, 2, 1});  // rows [0, 1), [1, 3), [3, 4)
    for (int b = 0; b < 3; ++b) REQUIRE(f.host.reserve(b, in.cu[size_t(b) + 1] - in.cu[size_t(b)]));
    std::vector<float> ref(in.q.size());
    REQUIRE(kvq::reference::attention<Cfg>(f.host.view(), in.a, ref.data()) == kvq::Status::kSuccess);
    f.dev.upload_tables(f.host);
    const kvq::DecodePlan plan = make_plan(3, 800, 2, in.cu.back());
    const size_t row = size_t(kHeads * kGroup) * 128;
    struct Case {
      std::vector<int32_t> cu;
      std::vector<bool> computed;  // per output row: its sequence is served
      const char* what;
    };
    const Case cases[] = {
        {{-1, 1, 3, 4}, {false, true, true, true}, "sequence 0 starts before row 0"},
        {{0, 1, 3, 2}, {true, false, false, false}, "sequence 1 ends past cu_q[batch] (sequence 2: -1 rows)"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.what);
      kvq_test::DeviceAttention<T> d(in.a, c.cu, in.q, in.k, in.v, f.dev.cold_len.get());
      const auto [got, flags] = decode_into_poison(d, f.dev.view(f.host), plan);
      CHECK((flags & kvq::kFlagBadSequence) != 0u);
      for (size_t r = 0; r < c.computed.size(); ++r) {
        const auto first = got.begin() + std::ptrdiff_t(r * row), last = first + std::ptrdiff_t(row);
        if (c.computed[r]) {
          const std::vector<float> ref_r(ref.begin() + std::ptrdiff_t(r * row), ref.begin() + std::ptrdiff_t((r + 1) * row));
          const kvq_test::OutputError e = kvq_test::output_error(std::vector<T>(first, last), ref_r);
          CHECK_MESSAGE(e.rel_l2 < kvq_test::kRelL2Bound, "row " << r << ": rel L2 " << e.rel_l2);
        } else {
          const size_t w = kvq_test::count_written(first, last);
          CHECK_MESSAGE(w == 0, "row " << r << " of a rejected sequence: " << w << " outputs written");
        }
      }
    }
  }

  TEST_CASE("decode: its launches are chained as dependent launches where device and code allow it") {
    // The kernels' waits (griddepcontrol) exist only in code compiled for 9.0+: the chained
    // launches and the tail beside the records kernel must be on exactly when the device is 9.0+
    // and this binary holds such code (__CUDA_ARCH_LIST__: the architectures nvcc compiled for).
    constexpr int archs[] = {__CUDA_ARCH_LIST__};
    int newest = 0;
    for (int arch : archs) newest = std::max(newest, arch);
    int dev = 0, major = 0;
    REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
    REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess);
    const bool expected = major >= 9 && newest >= 900;
    CHECK(kvq::detail::dependent_launch_supported(kvq::detail::decode_merge_kernel<Cfg>) == expected);
    CHECK(kvq::detail::dependent_launch_supported(kvq::detail::decode_tail_kernel<Cfg>) == expected);
    CHECK(kvq::detail::dependent_launch_supported(kvq::detail::decode_records_kernel<Cfg, 1, kvq::DecodePolicy>) == expected);
  }

  TEST_CASE("decode: a DecodePolicy of other values runs kernels of its own, which match the reference") {
    using Tuned = kvq_test_policy::TunedDecode;
    const void* tuned = reinterpret_cast<const void*>(kvq::detail::decode_records_kernel<Cfg, 1, Tuned>);
    const void* tuned_wide = reinterpret_cast<const void*>(kvq::detail::decode_records_kernel<Cfg, 2, Tuned>);
    CHECK(tuned != reinterpret_cast<const void*>(kvq::detail::decode_records_kernel<Cfg, 1, kvq::DecodePolicy>));
    CHECK(tuned_wide != reinterpret_cast<const void*>(kvq::detail::decode_records_kernel<Cfg, 2, kvq::DecodePolicy>));
    kvq_test::check_decode_random<Cfg, Tuned>(8801, 16, 2);  // up to 16 new tokens: both forms of the kernel
  }

  TEST_CASE("decode: captured once in a CUDA graph, replayed with different lengths") {
    constexpr int kBatch = 3, kMaxQ = 4;
    Fixture f({300, 2000, 5}, 71);
    // The tail beside the records kernel (its dependent launch, plan.hpp) whatever the planner chose
    // for this small shape, so that the captured graph holds the programmatic dependency too.
    kvq::DecodePlan plan = make_plan(kBatch, 4000, kMaxQ, kBatch * kMaxQ);
    plan.tail_ctas = 3;
    plan.tail_span = plan.tail_chunks;  // and one slot for the whole tail (the plan's span is at most this)
    plan.tail_slots = 1;
    for (int b = 0; b < kBatch; ++b) REQUIRE(f.host.reserve(b, 1200));  // block tables fixed before capture
    f.dev.upload_tables(f.host);
    kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
    kvq_test::check_graph_replays<Cfg>(
        f.host, f.dev, kBatch, kMaxQ, kHeads, kGroup, /*replays*/ 5, /*seed*/ 72, /*check_rel_max*/ true,
        [&](const std::vector<int32_t>& counts) { return Inputs(f.host, f.gen, counts); },
        [&](const kvq::AttentionBatch<T>& da, T* out, uint32_t* flags, cudaStream_t stream) {
          return kvq::decode<Cfg>(f.dev.view(f.host), da, plan, ws.get(), ws.size(), out, flags, stream);
        });
  }

  TEST_CASE("decode: the many-row kernel (\"none\", GQA 4 x q_len up to 16) captured once in a CUDA graph, replayed") {
    using NoneCfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::NoQuant, kvq::NoQuant>;
    constexpr int kBatch = 3, kMaxQ = 16;
    kvq_test::SpecialFixture<NoneCfg> f(kHeads, kRowPages, kR, {300, 2000, 5}, 73, false);
    kvq::DecodePlan plan;
    // Planned for up to 65,536 tokens a sequence (3 x 65,536 in the batch: the many-row kernel).
    REQUIRE(kvq::plan_decode<NoneCfg>(kvq::DecodeShape{kBatch, kHeads * kGroup, kHeads, kR, 65536, kMaxQ, kBatch * kMaxQ,
                                                       kvq_test::num_sms()},
                                      &plan) == kvq::Status::kSuccess);
    REQUIRE(plan.rows_per_cta == kvq::kDecodeManyRows);
    for (int b = 0; b < kBatch; ++b) REQUIRE(f.host.reserve(b, 1200));  // block tables fixed before capture
    f.dev.upload_tables(f.host);
    kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
    kvq_test::check_graph_replays<NoneCfg>(
        f.host, f.dev, kBatch, kMaxQ, kHeads, kGroup, /*replays*/ 5, /*seed*/ 74, /*check_rel_max*/ true,
        [&](const std::vector<int32_t>& counts) { return kvq_test::SpecialInputs<T>(f.host, f.gen, counts, kHeads, kGroup); },
        [&](const kvq::AttentionBatch<T>& da, T* out, uint32_t* flags, cudaStream_t stream) {
          return kvq::decode<NoneCfg>(f.dev.view(f.host), da, plan, ws.get(), ws.size(), out, flags, stream);
        });
  }

  TEST_CASE("decode: a query row whose slots take the merge three passes (over 1,100 splits)") {
    kvq_test::check_decode_many_slots<Cfg>(81);
  }
  TEST_CASE("decode: a batch of an empty prefix, 1,049,353 tokens and 3,000 tokens, q_len up to 16") {
    kvq_test::check_decode_million<Cfg>(83);
  }
}

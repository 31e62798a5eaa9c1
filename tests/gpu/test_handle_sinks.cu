// kvq::Handle passes the whole CacheView through: attention sinks (sink_k, sink_v, sinks) and the
// key-group range rule (key_clip) reach the kernels. An append + decode schedule through a handle
// (CacheView<void>) and through the typed entry points (kvq::append / kvq::decode<Cfg>) on two
// identical caches must leave the same bytes everywhere (cold pool, hot rings, sink rows) and give
// the same outputs bit for bit; a third cache without sinks and with min/max key groups must
// differ, so the schedule does exercise both options. (handle_impl.cuh once rebuilt the typed view
// without sink_k / sink_v / sinks / key_clip: the handle then ran a cache without sinks or MSE.)
#include <kvq/append/append_impl.cuh>
#include <kvq/cache/window.hpp>
#include <kvq/decode/decode_impl.cuh>
#include <kvq/numeric/dtype.hpp>
#include <kvq/runtime/handle.hpp>
#include <kvq/runtime/handle_impl.cuh>

#include <random>
#include <vector>

#include "gpu_util.cuh"

namespace kvq_test_handle {
using Cfg = kvq::CacheConfig<kvq::bf16, 64, 64, kvq::Int2<32>, kvq::Int2<32>>;
}  // namespace kvq_test_handle

KVQ_INSTANTIATE_OPS(kvq_test_handle::Cfg, kvq::kOpAppend | kvq::kOpDecode);

namespace {

using Cfg = kvq_test_handle::Cfg;
using T = kvq::bf16;
constexpr int kHeads = 2, kGroup = 3, kD = 64, kP = 64, kR = 64, kPages = 16, kSinks = 4;

// One sequence's cache (slot 0, pages 0..kPages-1 in order), zero-filled.
struct Cache {
  kvq_test::DeviceBuffer<uint8_t> cold{size_t(kPages) * kHeads * Cfg::record_bytes};
  kvq_test::DeviceBuffer<T> hot_k{size_t(kR + kP) * kHeads * kD}, hot_v{size_t(kR + kP) * kHeads * kD};
  kvq_test::DeviceBuffer<T> sink_k{size_t(kSinks) * kHeads * kD}, sink_v{size_t(kSinks) * kHeads * kD};
  kvq_test::DeviceBuffer<int32_t> table, slot{std::vector<int32_t>{0}};
  int sinks;
  kvq::KeyClip clip;

  Cache(int s, kvq::KeyClip c) : sinks(s), clip(c) {
    std::vector<int32_t> t(kPages);
    for (int i = 0; i < kPages; ++i) t[size_t(i)] = i;
    table.upload(t);
    KVQ_CUDA_CHECK(cudaMemset(cold.get(), 0, cold.size()));
    for (auto* b : {&hot_k, &hot_v, &sink_k, &sink_v}) KVQ_CUDA_CHECK(cudaMemset(b->get(), 0, b->size() * sizeof(T)));
  }
  kvq::CacheView<T> view() const {
    kvq::CacheView<T> v;
    v.cold = cold.get();
    v.num_pages = kPages;
    v.hot_k = hot_k.get();
    v.hot_v = hot_v.get();
    v.num_slots = 1;
    v.residual = kR;
    v.num_kv_heads = kHeads;
    v.block_table = table.get();
    v.max_pages_per_seq = kPages;
    v.hot_slot = slot.get();
    v.sink_k = sinks ? sink_k.get() : nullptr;
    v.sink_v = sinks ? sink_v.get() : nullptr;
    v.sinks = sinks;
    v.key_clip = clip;
    return v;
  }
  kvq::CacheView<void> erased() const { return kvq::erased_view(view()); }
};

int num_sms() {
  int dev = 0, n = 0;
  KVQ_CUDA_CHECK(cudaGetDevice(&dev));
  KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

std::vector<T> random_rows(std::mt19937& rng, size_t rows, int width) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<T> x(rows * size_t(width));
  for (size_t i = 0; i < x.size(); ++i) x[i] = T::from_float(dist(rng) * (i % kD == 3 ? 8.0f : 1.0f));  // an outlier channel
  return x;
}

// The schedule on one cache: a 300-token append, then decode steps (decode over the prefix and the
// step's token, then its append). `handle` null: the typed entry points. Returns the decode outputs.
std::vector<T> run_schedule(const Cache& c, const kvq::Handle* handle) {
  std::mt19937 rng(7);
  const int64_t max_tokens = int64_t(kPages) * kP;
  kvq::DecodePlan plan{};
  const kvq::DecodeShape shape{1, kHeads * kGroup, kHeads, kR, max_tokens, 1, 1, num_sms()};
  REQUIRE((handle ? handle->plan_decode(shape, &plan) : kvq::plan_decode<Cfg>(shape, &plan)) == kvq::Status::kSuccess);
  kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes + 256);
  kvq_test::DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
  int64_t len = 0, cold = 0;
  std::vector<T> outs;
  for (int n : {300, 1, 1, 40, 1, 1}) {
    const std::vector<T> k = random_rows(rng, size_t(n), kHeads * kD), v = random_rows(rng, size_t(n), kHeads * kD);
    kvq_test::DeviceBuffer<T> dk(k), dv(v);
    kvq_test::DeviceBuffer<int32_t> dlen(std::vector<int32_t>{int32_t(len)}), dcold(std::vector<int32_t>{int32_t(cold)});
    kvq_test::DeviceBuffer<int32_t> cu(std::vector<int32_t>{0, n});
    if (n == 1) {  // decode before the append (the step's token attends to itself as a new token)
      const std::vector<T> q = random_rows(rng, 1, kHeads * kGroup * kD);
      kvq_test::DeviceBuffer<T> dq(q), out(q.size());
      kvq::AttentionBatch<T> a;
      a.batch = 1;
      a.num_q_heads = kHeads * kGroup;
      a.lengths = kvq::SeqLengths{dlen.get(), dcold.get()};
      a.cu_q = cu.get();
      a.q = dq.get();
      a.new_k = dk.get();
      a.new_v = dv.get();
      a.softmax_scale = 0.125f;
      kvq::Status st;
      if (handle) {
        kvq::AttentionBatch<void> e;
        e.batch = a.batch;
        e.num_q_heads = a.num_q_heads;
        e.lengths = a.lengths;
        e.cu_q = a.cu_q;
        e.q = a.q;
        e.new_k = a.new_k;
        e.new_v = a.new_v;
        e.softmax_scale = a.softmax_scale;
        e.softcap = a.softcap;
        st = handle->decode(c.erased(), e, plan, ws.get(), ws.size(), out.get(), flags.get(), nullptr);
      } else {
        st = kvq::decode<Cfg>(c.view(), a, plan, ws.get(), ws.size(), out.get(), flags.get(), nullptr);
      }
      REQUIRE(st == kvq::Status::kSuccess);
      const std::vector<T> o = out.download();
      outs.insert(outs.end(), o.begin(), o.end());
    }
    kvq::AppendBatch<T> b;
    b.batch = 1;
    b.lengths = kvq::SeqLengths{dlen.get(), dcold.get()};
    b.cu_new = cu.get();
    b.new_k = dk.get();
    b.new_v = dv.get();
    kvq::Status st;
    if (handle) {
      kvq::AppendBatch<void> e;
      e.batch = b.batch;
      e.lengths = b.lengths;
      e.cu_new = b.cu_new;
      e.new_k = b.new_k;
      e.new_v = b.new_v;
      st = handle->append(c.erased(), e, n, flags.get(), nullptr);
    } else {
      st = kvq::append<Cfg>(c.view(), b, n, flags.get(), nullptr);
    }
    REQUIRE(st == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    len += n;
    cold = kvq::cold_after(len, cold, kR, kP);
  }
  CHECK(flags.download()[0] == 0u);
  REQUIRE(cold >= 3 * kP);  // pages went cold: the records (and the sink-aware first page) were written
  return outs;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("handle: the typed view keeps every CacheView field (sinks, key_clip)") {
    Cache c(kSinks, kvq::KeyClip::kMse);
    const kvq::CacheView<T> v = kvq::typed_view<T>(c.erased()), w = c.view();
    CHECK(v.cold == w.cold);
    CHECK(v.num_pages == w.num_pages);
    CHECK(v.hot_k == w.hot_k);
    CHECK(v.hot_v == w.hot_v);
    CHECK(v.num_slots == w.num_slots);
    CHECK(v.residual == w.residual);
    CHECK(v.num_kv_heads == w.num_kv_heads);
    CHECK(v.block_table == w.block_table);
    CHECK(v.max_pages_per_seq == w.max_pages_per_seq);
    CHECK(v.hot_slot == w.hot_slot);
    CHECK(v.sink_k == w.sink_k);
    CHECK(v.sink_v == w.sink_v);
    CHECK(v.sinks == kSinks);
    CHECK(v.key_clip == kvq::KeyClip::kMse);
  }

  TEST_CASE("handle: append + decode with sinks and MSE key groups equal the typed calls bit for bit") {
    kvq::Handle h;
    REQUIRE(kvq::make_handle<kvq::kOpAppend | kvq::kOpDecode>(kvq::ConfigList<Cfg>{}, kvq::key_of<Cfg>(), &h) ==
            kvq::Status::kSuccess);
    Cache via_handle(kSinks, kvq::KeyClip::kMse), typed(kSinks, kvq::KeyClip::kMse), plain(0, kvq::KeyClip::kMinMax);
    const std::vector<T> out_handle = run_schedule(via_handle, &h);
    const std::vector<T> out_typed = run_schedule(typed, nullptr);
    const std::vector<T> out_plain = run_schedule(plain, nullptr);
    CHECK(kvq_test::first_difference(out_handle, out_typed) == -1);
    CHECK(kvq_test::first_difference(via_handle.cold.download(), typed.cold.download()) == -1);
    CHECK(kvq_test::first_difference(via_handle.hot_k.download(), typed.hot_k.download()) == -1);
    CHECK(kvq_test::first_difference(via_handle.hot_v.download(), typed.hot_v.download()) == -1);
    CHECK(kvq_test::first_difference(via_handle.sink_k.download(), typed.sink_k.download()) == -1);
    CHECK(kvq_test::first_difference(via_handle.sink_v.download(), typed.sink_v.download()) == -1);
    // The options change the cache: a handle that dropped them would match `plain`, not `typed`.
    const std::vector<T> sinks = typed.sink_k.download();
    size_t nonzero = 0;
    for (const T& x : sinks) nonzero += x.to_float() != 0.0f;
    CHECK(nonzero > sinks.size() / 2);
    CHECK(kvq_test::first_difference(plain.cold.download(), typed.cold.download()) != -1);
    CHECK(kvq_test::first_difference(out_plain, out_typed) != -1);
  }
}

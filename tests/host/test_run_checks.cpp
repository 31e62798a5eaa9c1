// kvq::check_attention_run (host): the argument checks decode and prefill make before launching,
// each refusal with its Status, in the documented order.
#include <doctest/doctest.h>

#include <kvq/attention/run_checks.hpp>
#include <kvq/cache/config.hpp>

#include <cstdint>

namespace {

using Cfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using T = kvq::bf16;

}  // namespace

TEST_CASE("attention run checks: plan, buffers and alignment are checked before any launch") {
  alignas(256) static uint8_t pool[512];
  alignas(256) static uint8_t ws[1024];
  alignas(16) static T ring[16], q[16], out[16];
  static int32_t table[4], slot[1], len[1], cold[1], cu[2];
  static uint32_t flags;
  kvq::CacheView<T> v;
  v.cold = pool;
  v.num_pages = 1;
  v.hot_k = ring;
  v.hot_v = ring;
  v.num_slots = 1;
  v.residual = 128;
  v.num_kv_heads = 2;
  v.block_table = table;
  v.max_pages_per_seq = 4;
  v.hot_slot = slot;
  kvq::AttentionBatch<T> a;
  a.batch = 1;
  a.num_q_heads = 8;
  a.lengths = kvq::SeqLengths{len, cold};
  a.cu_q = cu;
  a.q = q;
  a.new_k = q;
  a.new_v = q;
  a.softmax_scale = 0.125f;
  const kvq::PlannedAttention plan{128, 64, Cfg::record_bytes, 8, 2, 128, 2, 512};
  auto run = [&](const kvq::CacheView<T>& cv, const kvq::AttentionBatch<T>& ab, const kvq::PlannedAttention& p,
                 const void* w, size_t bytes, const void* o, const uint32_t* f) {
    return kvq::check_attention_run<Cfg>(cv, ab, p, w, bytes, o, f);
  };
  CHECK(run(v, a, plan, ws, 512, out, &flags) == kvq::Status::kSuccess);
  kvq::CacheView<T> no_pool = v;
  no_pool.cold = nullptr;
  CHECK(run(no_pool, a, plan, ws, 512, out, &flags) == kvq::Status::kNullPointer);
  kvq::AttentionBatch<T> odd = a;
  odd.num_q_heads = 7;
  CHECK(run(v, odd, plan, ws, 512, out, &flags) == kvq::Status::kInvalidShape);
  for (int field = 0; field < 6; ++field) {
    kvq::PlannedAttention p = plan;
    if (field == 0) p.head_dim = 64;
    if (field == 1) p.page = 32;
    if (field == 2) p.record_bytes += 16;
    if (field == 3) p.num_q_heads = 16;
    if (field == 4) p.num_kv_heads = 1;
    if (field == 5) p.residual = 64;
    CHECK(run(v, a, p, ws, 512, out, &flags) == kvq::Status::kConfigMismatch);
  }
  kvq::AttentionBatch<T> more = a;
  more.batch = 3;  // above the plan's 2
  CHECK(run(v, more, plan, ws, 512, out, &flags) == kvq::Status::kInvalidShape);
  CHECK(run(v, a, plan, nullptr, 512, out, &flags) == kvq::Status::kNullPointer);
  CHECK(run(v, a, plan, ws, 512, nullptr, &flags) == kvq::Status::kNullPointer);
  CHECK(run(v, a, plan, ws, 512, out, nullptr) == kvq::Status::kNullPointer);
  CHECK(run(v, a, plan, ws, 511, out, &flags) == kvq::Status::kWorkspaceTooSmall);
  CHECK(run(v, a, plan, ws + 16, 512, out, &flags) == kvq::Status::kInvalidShape);
  kvq::CacheView<T> odd_pool = v;
  odd_pool.cold = pool + 8;
  CHECK(run(odd_pool, a, plan, ws, 512, out, &flags) == kvq::Status::kInvalidShape);
  // Row buffers the kernels read with 16-byte loads: each one off by one element is refused.
  for (int field = 0; field < 7; ++field) {
    kvq::CacheView<T> cv = v;
    kvq::AttentionBatch<T> ab = a;
    if (field >= 5) {  // attention sinks: the sink rows (the tail of decode reads them)
      cv.sinks = 4;
      cv.sink_k = cv.sink_v = ring;
      REQUIRE(run(cv, ab, plan, ws, 512, out, &flags) == kvq::Status::kSuccess);
    }
    if (field == 0) ab.q = q + 1;
    if (field == 1) ab.new_k = q + 1;
    if (field == 2) ab.new_v = q + 1;
    if (field == 3) cv.hot_k = ring + 1;
    if (field == 4) cv.hot_v = ring + 1;
    if (field == 5) cv.sink_k = ring + 1;
    if (field == 6) cv.sink_v = ring + 1;
    CAPTURE(field);
    CHECK(run(cv, ab, plan, ws, 512, out, &flags) == kvq::Status::kInvalidShape);
  }
}

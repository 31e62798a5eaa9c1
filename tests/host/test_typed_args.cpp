// The erased arguments of kvq::Handle back to typed ones (runtime/typed_args.hpp): every field
// arrives, including the accuracy options (sinks, sink rows, key clipping) that the handle once
// dropped.
#include <doctest/doctest.h>

#include <cstdint>

#include <kvq/numeric/dtype.hpp>
#include <kvq/runtime/typed_args.hpp>

using T = kvq::bf16;

namespace {
template <class P>
P* fake(uintptr_t a) {
  return reinterpret_cast<P*>(a);
}
}  // namespace

TEST_CASE("typed args: a view keeps every field, the accuracy options included") {
  kvq::CacheView<void> c;
  c.cold = fake<uint8_t>(0x1000);
  c.num_pages = 123456789012;
  c.hot_k = fake<void>(0x2000);
  c.hot_v = fake<void>(0x3000);
  c.num_slots = 77;
  c.residual = 256;
  c.num_kv_heads = 8;
  c.block_table = fake<const int32_t>(0x4000);
  c.max_pages_per_seq = 2048;
  c.hot_slot = fake<const int32_t>(0x5000);
  c.sink_k = fake<void>(0x6000);
  c.sink_v = fake<void>(0x7000);
  c.sinks = 4;
  c.key_clip = kvq::KeyClip::kMse;
  const kvq::CacheView<T> v = kvq::typed_view<T>(c);
  CHECK(v.cold == c.cold);
  CHECK(v.num_pages == c.num_pages);
  CHECK(static_cast<void*>(v.hot_k) == c.hot_k);
  CHECK(static_cast<void*>(v.hot_v) == c.hot_v);
  CHECK(v.num_slots == 77);
  CHECK(v.residual == 256);
  CHECK(v.num_kv_heads == 8);
  CHECK(v.block_table == c.block_table);
  CHECK(v.max_pages_per_seq == 2048);
  CHECK(v.hot_slot == c.hot_slot);
  CHECK(static_cast<void*>(v.sink_k) == c.sink_k);
  CHECK(static_cast<void*>(v.sink_v) == c.sink_v);
  CHECK(v.sinks == 4);
  CHECK(v.key_clip == kvq::KeyClip::kMse);
}

TEST_CASE("typed args: append and attention batches keep every field") {
  kvq::AppendBatch<void> a;
  a.batch = 3;
  a.lengths = kvq::SeqLengths{fake<int32_t>(0x10), fake<int32_t>(0x20)};
  a.cu_new = fake<const int32_t>(0x30);
  a.new_k = fake<const void>(0x40);
  a.new_v = fake<const void>(0x50);
  a.cold_out = fake<int32_t>(0x60);
  const kvq::AppendBatch<T> ta = kvq::typed_append<T>(a);
  CHECK(ta.batch == 3);
  CHECK(ta.lengths.len == a.lengths.len);
  CHECK(ta.lengths.cold == a.lengths.cold);
  CHECK(ta.cu_new == a.cu_new);
  CHECK(static_cast<const void*>(ta.new_k) == a.new_k);
  CHECK(static_cast<const void*>(ta.new_v) == a.new_v);
  CHECK(ta.cold_out == a.cold_out);

  kvq::AttentionBatch<void> q;
  q.batch = 5;
  q.num_q_heads = 32;
  q.lengths = a.lengths;
  q.cu_q = fake<const int32_t>(0x70);
  q.q = fake<const void>(0x80);
  q.new_k = fake<const void>(0x90);
  q.new_v = fake<const void>(0xa0);
  q.softmax_scale = 0.125f;
  q.softcap = 30.0f;
  const kvq::AttentionBatch<T> tq = kvq::typed_attention<T>(q);
  CHECK(tq.batch == 5);
  CHECK(tq.num_q_heads == 32);
  CHECK(tq.lengths.len == q.lengths.len);
  CHECK(tq.lengths.cold == q.lengths.cold);
  CHECK(tq.cu_q == q.cu_q);
  CHECK(static_cast<const void*>(tq.q) == q.q);
  CHECK(static_cast<const void*>(tq.new_k) == q.new_k);
  CHECK(static_cast<const void*>(tq.new_v) == q.new_v);
  CHECK(tq.softmax_scale == 0.125f);
  CHECK(tq.softcap == 30.0f);
}

TEST_CASE("typed args: erased_view then typed_view gives the view back") {
  kvq::CacheView<T> t;
  t.cold = fake<uint8_t>(0x1000);
  t.num_pages = 9;
  t.hot_k = fake<T>(0x2000);
  t.hot_v = fake<T>(0x3000);
  t.num_slots = 3;
  t.residual = 128;
  t.num_kv_heads = 2;
  t.block_table = fake<const int32_t>(0x4000);
  t.max_pages_per_seq = 5;
  t.hot_slot = fake<const int32_t>(0x5000);
  t.sink_k = fake<T>(0x6000);
  t.sink_v = fake<T>(0x7000);
  t.sinks = 2;
  t.key_clip = kvq::KeyClip::kMse;
  const kvq::CacheView<T> r = kvq::typed_view<T>(kvq::erased_view(t));
  CHECK(r.cold == t.cold);
  CHECK(r.num_pages == 9);
  CHECK(r.hot_k == t.hot_k);
  CHECK(r.hot_v == t.hot_v);
  CHECK(r.num_slots == 3);
  CHECK(r.residual == 128);
  CHECK(r.num_kv_heads == 2);
  CHECK(r.block_table == t.block_table);
  CHECK(r.max_pages_per_seq == 5);
  CHECK(r.hot_slot == t.hot_slot);
  CHECK(r.sink_k == t.sink_k);
  CHECK(r.sink_v == t.sink_v);
  CHECK(r.sinks == 2);
  CHECK(r.key_clip == kvq::KeyClip::kMse);
}

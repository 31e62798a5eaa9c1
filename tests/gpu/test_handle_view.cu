// kvq::Handle's type erasure keeps every field of the cache view: the accuracy options (attention
// sinks, key clipping) included, so a handle runs the same cache as the typed entry points.
#include <doctest/doctest.h>

#include <kvq/runtime/handle_impl.cuh>

TEST_CASE("handle: the erased cache view converts back with every field (sinks, key clipping)") {
  kvq::bf16 hot[4], sink[4];
  uint8_t cold[16];
  const int32_t table[2] = {0, 1}, slots[1] = {0};
  kvq::CacheView<void> v;
  v.cold = cold;
  v.num_pages = 2;
  v.hot_k = hot;
  v.hot_v = hot + 2;
  v.num_slots = 1;
  v.residual = 64;
  v.num_kv_heads = 3;
  v.block_table = table;
  v.max_pages_per_seq = 2;
  v.hot_slot = slots;
  v.sink_k = sink;
  v.sink_v = sink + 2;
  v.sinks = 4;
  v.key_clip = kvq::KeyClip::kMse;
  const kvq::CacheView<kvq::bf16> t = kvq::detail::typed_view<kvq::bf16>(v);
  CHECK(t.cold == cold);
  CHECK(t.num_pages == 2);
  CHECK(t.hot_k == hot);
  CHECK(t.hot_v == hot + 2);
  CHECK(t.num_slots == 1);
  CHECK(t.residual == 64);
  CHECK(t.num_kv_heads == 3);
  CHECK(t.block_table == table);
  CHECK(t.max_pages_per_seq == 2);
  CHECK(t.hot_slot == slots);
  CHECK(t.sink_k == sink);
  CHECK(t.sink_v == sink + 2);
  CHECK(t.sinks == 4);
  CHECK(t.key_clip == kvq::KeyClip::kMse);
}

// GPU dequantize vs kvq::reference::dequantize_sequence: bit-identical model-dtype outputs for a
// batch of sequences of every kind (empty, all hot, long), several formats, fp16 saturation.
#include <kvq/dequant/dequantize_impl.cuh>
#include <kvq/reference/dequantize.hpp>

#include <cstring>

#include "append_check.cuh"

namespace {

// long_pages: the pages of sequence 2's prompt (40 by default; past kDequantMaxPageCtas the strided
// kernel runs, whose blocks write several pages each). Policy: the kernels' tuning. sinks /
// key_clip: the cache's encoding (page 0 of sequences 2 and 3 is cold: its sink tokens come from
// the sink rows; sequence 0 is empty and 1 may have page 0 hot); the sink buffers start as random bits.
template <class Cfg, class Policy = kvq::DequantizePolicy>
void check_dequantize(uint64_t seed, int long_pages = 40, int sinks = 0, kvq::KeyClip key_clip = kvq::KeyClip::kMinMax) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 2, batch = 4, residual = P * int(1 + rng() % 2), max_pages = long_pages + 24, slots = batch + 1;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = (b + 2) % slots;
  REQUIRE(host.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  for (auto& x : host.sink_k) x.bits = uint16_t(rng());
  for (auto& x : host.sink_v) x.bits = uint16_t(rng());
  kvq_test::DeviceMirror<Cfg> dev;
  dev.upload(host);
  kvq_test::KvGenerator gen(heads, D, seed + 1);
  std::vector<int32_t> prompt{0, int32_t(rng() % (residual + P)), int32_t(long_pages * P + rng() % P), int32_t(7 * P + 5)};
  REQUIRE(kvq_test::step_both(host, dev, prompt, gen, true, "prompt"));
  REQUIRE(kvq_test::step_both(host, dev, {3, 1, 2, 70}, gen, false, "more"));

  std::vector<int32_t> cu(batch + 1, 0);
  int64_t max_len = 0;
  for (int b = 0; b < batch; ++b) {
    cu[size_t(b) + 1] = cu[size_t(b)] + host.len[size_t(b)];
    max_len = std::max<int64_t>(max_len, host.len[size_t(b)]);
  }
  const size_t n = size_t(cu.back()) * heads * D;
  kvq_test::DeviceBuffer<int32_t> d_cu(cu);
  kvq_test::DeviceBuffer<T> d_k(std::max<size_t>(n, 8)), d_v(std::max<size_t>(n, 8));
  KVQ_CUDA_CHECK(cudaMemset(d_k.get(), 0xff, d_k.size() * sizeof(T)));  // poisoned
  KVQ_CUDA_CHECK(cudaMemset(d_v.get(), 0xff, d_v.size() * sizeof(T)));
  kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  REQUIRE(kvq::dequantize<Cfg, Policy>(dev.view(host), kvq::SeqLengths{dev.len.get(), dev.cold_len.get()}, batch, d_cu.get(),
                                       max_len, d_k.get(), d_v.get(), d_flags.get(), nullptr) == kvq::Status::kSuccess);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(d_flags.download()[0] == 0u);
  const std::vector<T> gk = d_k.download(), gv = d_v.download();
  for (int b = 0; b < batch; ++b) {
    const size_t len = size_t(host.len[size_t(b)]);
    std::vector<T> rk(len * heads * D), rv(rk.size());
    REQUIRE(kvq::reference::dequantize_sequence<Cfg>(host.view(), batch, b, host.len[size_t(b)], host.cold_len[size_t(b)],
                                                     rk.data(), rv.data()) == kvq::Status::kSuccess);
    const size_t off = size_t(cu[size_t(b)]) * heads * D;
    const std::vector<T> sk(gk.begin() + long(off), gk.begin() + long(off + rk.size()));
    const std::vector<T> sv(gv.begin() + long(off), gv.begin() + long(off + rv.size()));
    CHECK_MESSAGE(kvq_test::first_difference(sk, rk) == -1, "sequence " << b << " K differs");
    CHECK_MESSAGE(kvq_test::first_difference(sv, rv) == -1, "sequence " << b << " V differs");
    // With sinks and page 0 cold, tokens [0, sinks) are the sink rows, bit for bit.
    if (sinks > 0 && host.cold_len[size_t(b)] > 0) {
      const auto view = host.view();
      for (int t = 0; t < sinks; ++t)
        for (int h = 0; h < heads; ++h) {
          const size_t src = kvq::sink_offset(view.hot_slot[b], t, h, sinks, heads, D);
          const size_t dst = (size_t(t) * heads + h) * D;
          CHECK_MESSAGE(std::memcmp(sk.data() + dst, host.sink_k.data() + src, D * sizeof(T)) == 0,
                        "sequence " << b << " sink token " << t << " K is not the sink row");
          CHECK_MESSAGE(std::memcmp(sv.data() + dst, host.sink_v.data() + src, D * sizeof(T)) == 0,
                        "sequence " << b << " sink token " << t << " V is not the sink row");
        }
    }
  }
  // A sequence with fewer output rows than tokens is skipped and reported; the others are written.
  std::vector<int32_t> short_cu = cu;
  for (int b = 2; b <= batch; ++b) short_cu[size_t(b)] -= 1;  // sequence 1 loses a row
  kvq_test::DeviceBuffer<int32_t> d_short(short_cu);
  kvq_test::DeviceBuffer<uint32_t> d_flags2(std::vector<uint32_t>{0u});
  REQUIRE(kvq::dequantize<Cfg, Policy>(dev.view(host), kvq::SeqLengths{dev.len.get(), dev.cold_len.get()}, batch,
                                       d_short.get(), max_len, d_k.get(), d_v.get(), d_flags2.get(), nullptr) ==
          kvq::Status::kSuccess);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(((d_flags2.download()[0] & kvq::kFlagBadSequence) != 0u) == (host.len[1] > 0));
  // A rejected sequence's rows [first, end) stay poisoned and the flag is set; every other row is
  // what the valid run above wrote. `rows`: the cu_out of the run.
  auto expect_only_skipped = [&](const kvq_test::DeviceBuffer<int32_t>& rows, size_t first, size_t end) {
    kvq_test::DeviceBuffer<uint32_t> fl(std::vector<uint32_t>{0u});
    KVQ_CUDA_CHECK(cudaMemset(d_k.get(), 0xff, d_k.size() * sizeof(T)));
    KVQ_CUDA_CHECK(cudaMemset(d_v.get(), 0xff, d_v.size() * sizeof(T)));
    REQUIRE(kvq::dequantize<Cfg, Policy>(dev.view(host), kvq::SeqLengths{dev.len.get(), dev.cold_len.get()}, batch, rows.get(),
                                         max_len, d_k.get(), d_v.get(), fl.get(), nullptr) == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK((fl.download()[0] & kvq::kFlagBadSequence) != 0u);
    const std::vector<T> k = d_k.download();
    CHECK(kvq_test::count_written(k.begin() + long(first), k.begin() + long(end)) == 0);
    if (first > 0)
      CHECK(kvq_test::first_difference(std::vector<T>(k.begin(), k.begin() + long(first)),
                                       std::vector<T>(gk.begin(), gk.begin() + long(first))) == -1);
    CHECK(kvq_test::first_difference(std::vector<T>(k.begin() + long(end), k.begin() + long(n)),
                                     std::vector<T>(gk.begin() + long(end), gk.begin() + long(n))) == -1);
  };
  // A sequence whose rows start before row 0 (cu_out[0] = -1: sequence 0 gets one row more) is
  // skipped and reported; the others are written where they were.
  std::vector<int32_t> neg_cu = cu;
  neg_cu[0] = -1;
  expect_only_skipped(kvq_test::DeviceBuffer<int32_t>(neg_cu), 0, size_t(cu[1]) * heads * D);
  // A page id outside the pool in sequence 2's last cold page (with the strided kernel, a page its
  // block writes after others): the whole sequence is skipped and reported, the others written.
  const int64_t last = host.cold_len[2] / P - 1;
  REQUIRE(last >= 0);
  std::vector<int32_t> bt = host.block_table;
  bt[size_t(2 * max_pages + last)] = int32_t(host.view().num_pages);
  dev.block_table.upload(bt);
  expect_only_skipped(d_cu, size_t(cu[2]) * heads * D, size_t(cu[3]) * heads * D);
  dev.block_table.upload(host.block_table);
  // Arguments rejected on the host: outputs not 16-byte aligned, null pointers, negative bounds.
  const kvq::SeqLengths lens{dev.len.get(), dev.cold_len.get()};
  CHECK(kvq::dequantize<Cfg, Policy>(dev.view(host), lens, batch, d_cu.get(), max_len, d_k.get() + 1, d_v.get(), d_flags.get(),
                                     nullptr) == kvq::Status::kInvalidShape);
  CHECK(kvq::dequantize<Cfg, Policy>(dev.view(host), lens, batch, d_cu.get(), max_len, d_k.get(), nullptr, d_flags.get(),
                                     nullptr) == kvq::Status::kNullPointer);
  CHECK(kvq::dequantize<Cfg, Policy>(dev.view(host), lens, -1, d_cu.get(), max_len, d_k.get(), d_v.get(), d_flags.get(),
                                     nullptr) == kvq::Status::kInvalidShape);
}

}  // namespace

namespace kvq_test_policy {  // a named namespace: kernels' template arguments (not a function's local type)
// Every member of DequantizePolicy changed: 256 threads, batches of 2 items, the strided kernel at
// 4 blocks a multiprocessor.
struct TunedDequantize : kvq::DequantizePolicy {
  static constexpr int kThreads = 256, kBatch = 2, kStridedMinBlocks = 4;
};
}  // namespace kvq_test_policy

TEST_SUITE("gpu") {
  TEST_CASE("dequantize: bit-identical to the host reference for int2, k4v2, int8, none, k3v2") {
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>(101);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>>(105);  // INT3 keys
    check_dequantize<kvq::CacheConfig<kvq::fp16, 64, 32, kvq::Int4<32>, kvq::Int2<32>>>(102);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 256, 16, kvq::Int8, kvq::Int8>>(103);
    check_dequantize<kvq::CacheConfig<kvq::fp16, 128, 64, kvq::NoQuant, kvq::NoQuant>>(104);
  }
  TEST_CASE("dequantize: attention sinks (page 0's first tokens from the sink rows), bit-identical") {
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>(111, 40, 4, kvq::KeyClip::kMinMax);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>(112, 40, 16, kvq::KeyClip::kMse);
    check_dequantize<kvq::CacheConfig<kvq::fp16, 64, 32, kvq::Int4<32>, kvq::Int2<32>>>(113, 40, 16, kvq::KeyClip::kMse);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 256, 16, kvq::Int8, kvq::Int8>>(114, 40, 15, kvq::KeyClip::kMinMax);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>(115, 40, 1, kvq::KeyClip::kMse);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>>(117, 40, 4, kvq::KeyClip::kMinMax);
    // the strided kernel (page 0 among a block's several pages)
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 32, kvq::Int2<32>, kvq::Int2<32>>>(116, 1100, 8, kvq::KeyClip::kMinMax);
  }
  TEST_CASE("dequantize: attention sinks on a configuration that quantizes nothing are refused, nothing written") {
    using Cfg = kvq::CacheConfig<kvq::fp16, 128, 64, kvq::NoQuant, kvq::NoQuant>;
    using T = Cfg::dtype;
    kvq::reference::HostCache<Cfg> host(1, 8, 2, 0, 4, 1);
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    const std::vector<T> poison(size_t(2) * 4 * 128, T{0x1234});
    kvq_test::DeviceBuffer<T> sk(poison), sv(poison), ko(size_t(64) * 128), vo(size_t(64) * 128);
    kvq_test::DeviceBuffer<int32_t> d_cu(std::vector<int32_t>{0, 64});
    kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    kvq::CacheView<T> v = dev.view(host);
    v.sinks = 4;
    v.sink_k = sk.get();
    v.sink_v = sv.get();
    CHECK(kvq::dequantize<Cfg>(v, kvq::SeqLengths{dev.len.get(), dev.cold_len.get()}, 1, d_cu.get(), 64, ko.get(), vo.get(),
                               d_flags.get(), nullptr) == kvq::Status::kConfigMismatch);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(kvq_test::first_difference(sk.download(), poison) == -1);
    CHECK(d_flags.download()[0] == 0u);
  }
  TEST_CASE("dequantize: past 512 pages a block writes several pages (the strided kernel), bit-identical") {
    check_dequantize<kvq::CacheConfig<kvq::bf16, 128, 32, kvq::Int2<32>, kvq::Int2<32>>>(105, 1100);
    check_dequantize<kvq::CacheConfig<kvq::bf16, 256, 16, kvq::Int8, kvq::Int8>>(106, 600);
  }
  TEST_CASE("dequantize: a DequantizePolicy of other values (its own kernels) is as exact, both kernels") {
    using Cfg = kvq::CacheConfig<kvq::bf16, 128, 32, kvq::Int2<32>, kvq::Int2<32>>;
    check_dequantize<Cfg, kvq_test_policy::TunedDequantize>(107);
    check_dequantize<Cfg, kvq_test_policy::TunedDequantize>(108, 1100);
  }
}

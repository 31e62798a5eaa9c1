// Append kernel cases the random schedules may miss: the ring hazard, arguments rejected on the
// host (nothing written), sequences rejected on the device (only they are left untouched; also
// those a malformed cu_new puts outside the batch's rows), and
// CUDA-graph capture with replays at different lengths.
#include "append_check.cuh"

namespace {

// Not in cmake/kvq_configs.cmake: instantiated implicitly here (INT2 keys, INT4 values).
using Cfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int4<32>>;
using T = kvq::bf16;

kvq::reference::HostCache<Cfg> make_host(int batch, int residual, uint64_t seed) {
  kvq::reference::HostCache<Cfg> h(2, 64 * batch, batch, residual, 64, batch);
  std::mt19937_64 rng(seed);
  for (auto& x : h.cold) x = uint8_t(rng());
  for (auto& x : h.hot_k) x.bits = uint16_t(rng());
  for (auto& x : h.hot_v) x.bits = uint16_t(rng());
  return h;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("append: ring rows being quantized and overwritten in the same launch") {
    auto host = make_host(3, 128, 11);  // P = 64, R = 128, W = 192
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    kvq_test::KvGenerator gen(2, 128, 12);
    // seq 0: 191 hot tokens, then 200 more: pages [0, 256) turn cold (190 tokens from the ring)
    // while new tokens 256.. land in rows 64.. that still hold tokens being quantized.
    REQUIRE(kvq_test::step_both(host, dev, {191, 100, 1}, gen, false, "fill"));
    REQUIRE(kvq_test::step_both(host, dev, {200, 1000, 191}, gen, false, "hazard"));
    REQUIRE(kvq_test::step_both(host, dev, {1, 64, 2}, gen, false, "after"));
    CHECK(host.cold_len[0] == 256);
  }

  TEST_CASE("append: signed zeros and constant groups give the same bytes on host and device") {
    auto host = make_host(2, 0, 51);
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    // Keys and values made of +0, -0 and a few +-1: many groups have a minimum of zero reached
    // by both signs, many are constant.
    std::mt19937_64 rng(52);
    const std::vector<int32_t> counts{130, 200};
    for (int b = 0; b < 2; ++b) REQUIRE(host.reserve(b, counts[size_t(b)]));
    std::vector<int32_t> cu{0, 130, 330};
    std::vector<T> k(330 * 256), v(330 * 256);
    for (auto* data : {&k, &v})
      for (auto& x : *data) {
        const unsigned r = unsigned(rng() % 16);
        x.bits = r < 7 ? 0x0000 : r < 14 ? 0x8000 : r == 14 ? 0x3f80 : 0xbf80;  // +0, -0, 1, -1
      }
    for (size_t i = 0; i < 64 * 256; ++i) k[i].bits = (i & 1) ? 0x8000 : 0x0000;  // constant zero groups
    kvq::AppendBatch<T> a;
    a.batch = 2;
    a.lengths = host.lengths();
    a.cu_new = cu.data();
    a.new_k = k.data();
    a.new_v = v.data();
    REQUIRE(kvq::reference::append<Cfg>(host.view(), a, nullptr) == kvq::Status::kSuccess);
    dev.upload_tables(host);
    kvq_test::DeviceBuffer<int32_t> d_cu(cu);
    kvq_test::DeviceBuffer<T> d_k(k), d_v(v);
    kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    kvq::AppendBatch<T> da = a;
    da.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
    da.cu_new = d_cu.get();
    da.new_k = d_k.get();
    da.new_v = d_v.get();
    REQUIRE(kvq::append<Cfg>(dev.view(host), da, 200, d_flags.get(), nullptr) == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    dev.expect_equal(host, "signed zeros");
  }

  TEST_CASE("append: arguments rejected on the host write nothing") {
    auto host = make_host(2, 64, 21);
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    const std::vector<int32_t> cu{0, 10, 20};
    kvq_test::DeviceBuffer<int32_t> d_cu(cu);
    kvq_test::DeviceBuffer<T> d_k(20 * 2 * 128), d_v(20 * 2 * 128);
    kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    kvq::AppendBatch<T> a;
    a.batch = 2;
    a.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
    a.cu_new = d_cu.get();
    a.new_k = d_k.get();
    a.new_v = d_v.get();
    kvq::CacheView<T> v = dev.view(host);
    CHECK(kvq::append<Cfg>(v, a, 10, nullptr, nullptr) == kvq::Status::kNullPointer);
    CHECK(kvq::append<Cfg>(v, a, -1, d_flags.get(), nullptr) == kvq::Status::kInvalidShape);
    kvq::AppendBatch<T> no_k = a;
    no_k.new_k = nullptr;
    CHECK(kvq::append<Cfg>(v, no_k, 10, d_flags.get(), nullptr) == kvq::Status::kNullPointer);
    kvq::AppendBatch<T> misaligned = a;
    misaligned.new_v = d_v.get() + 1;
    CHECK(kvq::append<Cfg>(v, misaligned, 10, d_flags.get(), nullptr) == kvq::Status::kInvalidShape);
    kvq::CacheView<T> bad_r = v;
    bad_r.residual = 100;  // not a multiple of the page
    CHECK(kvq::append<Cfg>(bad_r, a, 10, d_flags.get(), nullptr) == kvq::Status::kConfigMismatch);
    kvq::CacheView<T> no_table = v;
    no_table.block_table = nullptr;
    CHECK(kvq::append<Cfg>(no_table, a, 10, d_flags.get(), nullptr) == kvq::Status::kNullPointer);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    dev.expect_equal(host, "after rejected calls");
    CHECK(d_flags.download()[0] == 0u);
  }

  TEST_CASE("append: a sequence rejected on the device is left untouched, the others proceed") {
    auto host = make_host(3, 64, 31);
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    kvq_test::KvGenerator gen(2, 128, 32);
    // Host reference: sequence 1 appends nothing. Device: sequence 1 asks for 300 tokens but its
    // block table names a page outside the pool, so the device must skip it entirely.
    const std::vector<int32_t> host_counts{300, 0, 250}, dev_counts{300, 300, 250};
    for (int b = 0; b < 3; ++b) REQUIRE(host.reserve(b, host_counts[size_t(b)]));
    std::vector<int32_t> cu_h{0, 300, 300, 550}, cu_d{0, 300, 600, 850};
    std::vector<T> k = gen.keys<T>(850), val = gen.values<T>(850);
    std::vector<T> k_h(k.begin(), k.begin() + 300 * 256), v_h(val.begin(), val.begin() + 300 * 256);
    k_h.insert(k_h.end(), k.begin() + 600 * 256, k.end());
    v_h.insert(v_h.end(), val.begin() + 600 * 256, val.end());
    kvq::AppendBatch<T> a;
    a.batch = 3;
    a.lengths = host.lengths();
    a.cu_new = cu_h.data();
    a.new_k = k_h.data();
    a.new_v = v_h.data();
    REQUIRE(kvq::reference::append<Cfg>(host.view(), a, nullptr) == kvq::Status::kSuccess);

    std::vector<int32_t> table = host.block_table;
    table[size_t(1) * 64 + 0] = int32_t(host.view().num_pages) + 5;  // sequence 1's first new page
    dev.upload_tables(host);
    dev.block_table.upload(table);
    kvq_test::DeviceBuffer<int32_t> d_cu(cu_d);
    kvq_test::DeviceBuffer<T> d_k(k), d_v(val);
    kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    kvq::AppendBatch<T> da;
    da.batch = 3;
    da.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
    da.cu_new = d_cu.get();
    da.new_k = d_k.get();
    da.new_v = d_v.get();
    REQUIRE(kvq::append<Cfg>(dev.view(host), da, 300, d_flags.get(), nullptr) == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    dev.expect_equal(host, "device-side rejection");
    CHECK((d_flags.download()[0] & kvq::kFlagBadSequence) != 0u);

    // From the host's state, an append of `cu` that the device must reject whole: nothing
    // written, the flag set.
    auto expect_rejected = [&](const std::vector<int32_t>& cu, int max_new, const char* what) {
      kvq_test::DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
      dev.upload(host);
      kvq_test::DeviceBuffer<int32_t> d_cu_r(cu);
      da.cu_new = d_cu_r.get();
      REQUIRE(kvq::append<Cfg>(dev.view(host), da, max_new, flags.get(), nullptr) == kvq::Status::kSuccess);
      KVQ_CUDA_CHECK(cudaDeviceSynchronize());
      dev.expect_equal(host, what);
      CHECK((flags.download()[0] & kvq::kFlagBadSequence) != 0u);
    };
    // A sequence above the max_new_tokens bound is rejected the same way.
    expect_rejected({0, 0, 5, 5}, 4, "above max_new_tokens");
    // A cu_new that puts a sequence's rows past cu_new[batch] (sequence 1: rows 0 .. 4 of 3; a
    // decreasing step, so sequence 2 has -2 rows) rejects both; nothing is written.
    expect_rejected({0, 0, 5, 3}, 8, "rows past cu_new[batch]");
  }

  TEST_CASE("append: attention sinks with the ring rows of page 0 overwritten in the same launch (R = 0)") {
    // W = P = 64: page 0 turns cold while new tokens 64.. land in ring rows 0.. that hold its sink
    // rows; the sink copy must read them first. Sequence 1 does the same from a one-shot prompt.
    for (int sinks : {1, 16}) {
      auto host = make_host(2, 0, 61 + uint64_t(sinks));
      REQUIRE(host.set_encoding(sinks, kvq::KeyClip::kMse) == kvq::Status::kSuccess);
      for (auto& x : host.sink_k) x.bits = 0x7fc1;
      for (auto& x : host.sink_v) x.bits = 0x7fc1;
      kvq_test::DeviceMirror<Cfg> dev;
      dev.upload(host);
      kvq_test::KvGenerator gen(2, 128, 62);
      const std::string where = "sinks " + std::to_string(sinks);
      REQUIRE(kvq_test::step_both(host, dev, {63, 5}, gen, false, where + " fill"));
      REQUIRE(kvq_test::step_both(host, dev, {40, 120}, gen, false, where + " hazard"));
      REQUIRE(kvq_test::step_both(host, dev, {1, 1}, gen, false, where + " after"));
      CHECK(host.cold_len == std::vector<int32_t>{64, 64});
    }
  }

  TEST_CASE("append: attention sink arguments rejected on the host write nothing") {
    auto host = make_host(2, 64, 71);
    REQUIRE(host.set_encoding(4, kvq::KeyClip::kMse) == kvq::Status::kSuccess);
    for (auto& x : host.sink_k) x.bits = 0x1111;
    for (auto& x : host.sink_v) x.bits = 0x2222;
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    const std::vector<int32_t> cu{0, 130, 260};  // both sequences' page 0 would turn cold
    for (int b = 0; b < 2; ++b) REQUIRE(host.reserve(b, 130));
    dev.upload_tables(host);
    kvq_test::DeviceBuffer<int32_t> d_cu(cu);
    kvq_test::DeviceBuffer<T> d_k(260 * 2 * 128), d_v(260 * 2 * 128);
    kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    kvq::AppendBatch<T> a;
    a.batch = 2;
    a.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
    a.cu_new = d_cu.get();
    a.new_k = d_k.get();
    a.new_v = d_v.get();
    const kvq::CacheView<T> v = dev.view(host);
    REQUIRE(v.sinks == 4);
    auto expect = [&](kvq::CacheView<T> bad, kvq::Status want, const char* what) {
      CHECK_MESSAGE(kvq::append<Cfg>(bad, a, 130, d_flags.get(), nullptr) == want, what);
    };
    kvq::CacheView<T> w = v;
    w.sink_k = v.sink_k + 1;  // 2 bytes off: rows are copied 16 bytes at a time
    expect(w, kvq::Status::kInvalidShape, "sink_k misaligned");
    w = v;
    w.sink_v = v.sink_v + 4;
    expect(w, kvq::Status::kInvalidShape, "sink_v misaligned");
    w = v;
    w.sink_k = nullptr;
    expect(w, kvq::Status::kNullPointer, "sink_k null");
    w = v;
    w.sink_v = nullptr;
    expect(w, kvq::Status::kNullPointer, "sink_v null");
    for (int sinks : {-1, 17, 64}) {
      w = v;
      w.sinks = sinks;
      expect(w, kvq::Status::kConfigMismatch, "sinks out of range");
    }
    w = v;
    w.key_clip = static_cast<kvq::KeyClip>(2);
    expect(w, kvq::Status::kConfigMismatch, "key_clip not a KeyClip");
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    dev.expect_equal(host, "after rejected sink arguments");  // pool, rings and sink rows
    CHECK(d_flags.download()[0] == 0u);
    // The same call with the view as it was is accepted and writes the sink rows.
    REQUIRE(kvq::append<Cfg>(v, a, 130, d_flags.get(), nullptr) == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(kvq_test::first_difference(dev.sink_k.download(), host.sink_k) != -1);
  }

  TEST_CASE("append: captured once in a CUDA graph, replayed with different lengths") {
    auto host = make_host(4, 128, 41);
    kvq_test::DeviceMirror<Cfg> dev;
    dev.upload(host);
    kvq_test::KvGenerator gen(2, 128, 42);
    constexpr int kMaxNew = 80, kBatch = 4;
    kvq_test::DeviceBuffer<int32_t> d_cu(kBatch + 1);
    kvq_test::DeviceBuffer<T> d_k(size_t(kMaxNew) * kBatch * 256), d_v(size_t(kMaxNew) * kBatch * 256);
    kvq_test::DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    for (int b = 0; b < kBatch; ++b) REQUIRE(host.reserve(b, 40 * kMaxNew));  // block tables fixed before capture
    dev.upload_tables(host);
    kvq::AppendBatch<T> da;
    da.batch = kBatch;
    da.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
    da.cu_new = d_cu.get();
    da.new_k = d_k.get();
    da.new_v = d_v.get();
    cudaStream_t stream;
    KVQ_CUDA_CHECK(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    KVQ_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const kvq::Status st = kvq::append<Cfg>(dev.view(host), da, kMaxNew, d_flags.get(), stream);
    KVQ_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    REQUIRE(st == kvq::Status::kSuccess);
    cudaGraphExec_t exec;
    KVQ_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::mt19937_64 rng(43);
    for (int replay = 0; replay < 6; ++replay) {
      std::vector<int32_t> cu(kBatch + 1, 0);
      for (int b = 0; b < kBatch; ++b) cu[size_t(b) + 1] = cu[size_t(b)] + int32_t(rng() % (kMaxNew + 1));
      std::vector<T> k = gen.keys<T>(cu.back()), v = gen.values<T>(cu.back());
      kvq::AppendBatch<T> a;
      a.batch = kBatch;
      a.lengths = host.lengths();
      a.cu_new = cu.data();
      a.new_k = k.data();
      a.new_v = v.data();
      REQUIRE(kvq::reference::append<Cfg>(host.view(), a, nullptr) == kvq::Status::kSuccess);
      d_cu.upload(cu);
      KVQ_CUDA_CHECK(cudaMemcpy(d_k.get(), k.data(), k.size() * sizeof(T), cudaMemcpyHostToDevice));
      KVQ_CUDA_CHECK(cudaMemcpy(d_v.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
      dev.len.upload(host.len);
      dev.cold_len.upload(host.cold_len);
      KVQ_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      KVQ_CUDA_CHECK(cudaStreamSynchronize(stream));
      dev.expect_equal(host, "graph replay " + std::to_string(replay));
      for (int b = 0; b < kBatch; ++b) host.commit(b, cu[size_t(b) + 1] - cu[size_t(b)]);
    }
    CHECK(d_flags.download()[0] == 0u);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

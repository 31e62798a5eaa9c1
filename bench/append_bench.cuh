// Append kernel benchmarks for one configuration: a decode step in which every sequence's oldest
// hot page turns cold (the worst decode step), a decode step with no page turning cold, and a
// prefill chunk. Bytes counted: new K/V read, ring rows read for quantized pages, records written,
// ring rows written.
#pragma once

#include <kvq/append/append_impl.cuh>

#include <random>
#include <string>
#include <vector>

#include "bench_util.cuh"

namespace kvq_bench {

template <class Cfg>
struct AppendCase {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, H = 8, R = 128;

  // batch sequences of length len each (cold = what appends alone would leave), + n new tokens.
  static void run(benchmark::State& state, int batch, int64_t len, int n) {
    const int64_t cold = kvq::cold_after(len, 0, R, P);
    const int64_t cold_new = kvq::cold_after(len + n, cold, R, P);
    const int64_t pages_per_seq = cold_new / P + 1;
    const int64_t num_pages = int64_t(batch) * pages_per_seq;
    uint8_t* pool;
    T *hot_k, *hot_v, *new_k, *new_v;
    int32_t *table, *slot, *lens, *colds, *cu;
    uint32_t* flags;
    const size_t ring = size_t(batch) * (R + P) * H * D;
    check(cudaMalloc(&pool, size_t(num_pages) * H * Cfg::record_bytes), "pool");
    check(cudaMalloc(&hot_k, ring * sizeof(T)), "ring");
    check(cudaMalloc(&hot_v, ring * sizeof(T)), "ring");
    check(cudaMalloc(&new_k, size_t(batch) * n * H * D * sizeof(T)), "new");
    check(cudaMalloc(&new_v, size_t(batch) * n * H * D * sizeof(T)), "new");
    std::vector<int32_t> h_table(static_cast<size_t>(num_pages)), h_slot(static_cast<size_t>(batch)),
        h_len(static_cast<size_t>(batch), int32_t(len)), h_cold(static_cast<size_t>(batch), int32_t(cold)),
        h_cu(static_cast<size_t>(batch) + 1);
    for (size_t i = 0; i < h_table.size(); ++i) h_table[i] = int32_t(i);
    for (int b = 0; b < batch; ++b) h_slot[size_t(b)] = b;
    for (int b = 0; b <= batch; ++b) h_cu[size_t(b)] = b * n;
    auto up = [](int32_t** d, const std::vector<int32_t>& h) {
      check(cudaMalloc(d, h.size() * 4), "table");
      check(cudaMemcpy(*d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "upload");
    };
    up(&table, h_table);
    up(&slot, h_slot);
    up(&lens, h_len);
    up(&colds, h_cold);
    up(&cu, h_cu);
    check(cudaMalloc(&flags, 4), "flags");
    // Random finite data (bf16/fp16 bit patterns of N(0,1)-ish values).
    std::vector<T> host(std::max(ring, size_t(batch) * n * H * D));
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (auto& x : host) x = T::from_float(nd(rng));
    check(cudaMemcpy(hot_k, host.data(), ring * sizeof(T), cudaMemcpyHostToDevice), "fill");
    check(cudaMemcpy(hot_v, host.data(), ring * sizeof(T), cudaMemcpyHostToDevice), "fill");
    check(cudaMemcpy(new_k, host.data(), size_t(batch) * n * H * D * sizeof(T), cudaMemcpyHostToDevice), "fill");
    check(cudaMemcpy(new_v, host.data(), size_t(batch) * n * H * D * sizeof(T), cudaMemcpyHostToDevice), "fill");

    kvq::CacheView<T> v;
    v.cold = pool;
    v.num_pages = num_pages;
    v.hot_k = hot_k;
    v.hot_v = hot_v;
    v.num_slots = batch;
    v.residual = R;
    v.num_kv_heads = H;
    v.block_table = table;
    v.max_pages_per_seq = int32_t(pages_per_seq);
    v.hot_slot = slot;
    kvq::AppendBatch<T> a;
    a.batch = batch;
    a.lengths = kvq::SeqLengths{lens, colds};
    a.cu_new = cu;
    a.new_k = new_k;
    a.new_v = new_v;

    const int64_t pages = cold_new / P - cold / P;
    const int64_t ring_tokens_read = std::max<int64_t>(0, std::min(len, cold_new) - cold);
    const int64_t ring_tokens_written = len + n - std::max(len, cold_new);
    const double row = double(H) * D * sizeof(T) * 2;  // K and V of one token, all heads
    const double bytes = double(batch) * (double(n) * row + double(ring_tokens_read) * row +
                                          double(pages) * H * double(Cfg::record_bytes) + double(ring_tokens_written) * row);
    run_timed(state, bytes, [&] {
      if (kvq::append<Cfg>(v, a, n, flags, nullptr) != kvq::Status::kSuccess) state.SkipWithError("append failed");
    });
    state.counters["pages"] = double(batch * pages);
    for (void* p : {(void*)pool, (void*)hot_k, (void*)hot_v, (void*)new_k, (void*)new_v, (void*)table, (void*)slot,
                    (void*)lens, (void*)colds, (void*)cu, (void*)flags})
      cudaFree(p);
  }

  static void register_all(const std::string& name) {
    const int64_t turn = 4096 + R + P - 1;  // L - C = R + P - 1: the next token turns a page cold
    for (int batch : {8, 64})
      benchmark::RegisterBenchmark(("append/" + name + "/decode_page_turn/batch:" + std::to_string(batch)).c_str(),
                                   [=](benchmark::State& s) { run(s, batch, turn, 1); })
          ->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("append/" + name + "/decode_no_turn/batch:64").c_str(),
                                 [=](benchmark::State& s) { run(s, 64, turn - 10, 1); })
        ->UseManualTime()->Unit(benchmark::kMicrosecond);
    for (int n : {2048, 8192})
      benchmark::RegisterBenchmark(("append/" + name + "/prefill/chunk:" + std::to_string(n)).c_str(),
                                   [=](benchmark::State& s) { run(s, 1, 0, n); })
          ->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
};

}  // namespace kvq_bench

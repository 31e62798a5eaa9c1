// Append kernel benchmarks for one configuration: a decode step in which every sequence's oldest
// hot page turns cold (the worst decode step), a decode step with no page turning cold, and a
// prefill chunk. Bytes counted: new K/V read, ring rows read for quantized pages, records written,
// ring rows written.
#pragma once

#include <kvq/append/append_impl.cuh>

#include <string>

#include "bench_cache.cuh"

namespace kvq_bench {

template <class Cfg>
struct AppendCase {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, H = 8, R = 128;

  // batch sequences of length len each (cold = what appends alone would leave), + n new tokens.
  static void run(benchmark::State& state, int batch, int64_t len, int n) {
    BenchCache<Cfg> c(batch, len, n, /*extra_pages*/ n / P + 2);
    const kvq::CacheView<T> v = c.view();
    kvq::AppendBatch<T> a;
    a.batch = batch;
    a.lengths = c.lengths();
    a.cu_new = c.cu_new.ptr;
    a.new_k = c.new_k.ptr;
    a.new_v = c.new_v.ptr;
    const int64_t cold_new = kvq::cold_after(len + n, c.cold, R, P);
    const int64_t pages = cold_new / P - c.cold / P;
    const int64_t ring_tokens_read = std::max<int64_t>(0, std::min(len, cold_new) - c.cold);
    const int64_t ring_tokens_written = len + n - std::max(len, cold_new);
    const double row = c.bytes_per_token_row();
    const double bytes = double(batch) * (double(n) * row + double(ring_tokens_read) * row +
                                          double(pages) * H * double(Cfg::record_bytes) + double(ring_tokens_written) * row);
    run_timed(state, bytes, [&] {
      if (kvq::append<Cfg>(v, a, n, c.flags.ptr, nullptr) != kvq::Status::kSuccess) state.SkipWithError("append failed");
    });
    state.counters["pages"] = double(batch * pages);
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

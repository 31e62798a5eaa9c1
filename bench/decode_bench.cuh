// Decode attention benchmarks for one configuration (issue shape: head dim 128, 32 query heads /
// 8 KV heads, page 64, R 128). Every sequence has `context` tokens after the step: prefix
// len = context - q_len in the cache (cold pages + hot ring, as appends alone leave it), q_len new;
// the decode runs after the step's append (cold length after it), as an engine orders them.
// Bytes counted: what the kernel must read at least (cold records, hot rows, new K/V, q) plus the
// output written.
#pragma once

#include <kvq/decode/decode_impl.cuh>
#include <kvq/dequant/dequantize_impl.cuh>
#include <kvq/reference/append.hpp>

#include <string>
#include <vector>

#include "bench_cache.cuh"

namespace kvq_bench {

// Policy, DequantizePolicy: the kernels' tuning (kvq/decode/policy.hpp, kvq/dequant/policy.hpp);
// other policies than the defaults compile kernels of their own, so a tuning experiment registers
// its cells beside the default's (bench/decode_bench.cu.in).
template <class Cfg, class Policy = kvq::DecodePolicy, class DequantizePolicy = kvq::DequantizePolicy>
struct DecodeCase {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, H = 8, HQ = 32, R = 128;

  static void run(benchmark::State& state, int batch, int64_t context, int q_len, bool dequant = false) {
    const int64_t len = context - q_len;
    BenchCache<Cfg> c(batch, len, q_len, /*extra_pages*/ 1);
    fill_pool(c);
    const int64_t total_q = int64_t(batch) * q_len;
    DeviceArray<T> q(BenchCache<Cfg>::random_rows(size_t(total_q) * HQ * D, 5)), out(size_t(total_q) * HQ * D);
    const kvq::CacheView<T> v = c.view();
    kvq::AttentionBatch<T> a;
    a.batch = batch;
    a.num_q_heads = HQ;
    a.lengths = c.lengths();
    a.cu_q = c.cu_new.ptr;
    a.q = q.ptr;
    a.new_k = c.new_k.ptr;
    a.new_v = c.new_v.ptr;
    a.softmax_scale = 1.0f / std::sqrt(float(D));
    const double row = c.bytes_per_token_row();
    const double prefix_bytes = double(c.cold / P) * H * double(Cfg::record_bytes) + double(len - c.cold) * row;
    if (dequant) {
      // Every prefix token back in the model dtype: records + hot rows read, len rows written.
      DeviceArray<int32_t> cu_out(BenchCache<Cfg>::iota(size_t(batch) + 1, int(len)));
      DeviceArray<T> k_out(size_t(batch) * len * H * D), v_out(size_t(batch) * len * H * D);
      run_timed(state, double(batch) * (prefix_bytes + double(len) * row), [&] {
        if (kvq::dequantize<Cfg, DequantizePolicy>(v, a.lengths, batch, cu_out.ptr, len, k_out.ptr, v_out.ptr, c.flags.ptr,
                                                   nullptr) != kvq::Status::kSuccess)
          state.SkipWithError("dequantize failed");
      });
      // Roofline of the write side: the rows written at the store-only bandwidth.
      state.counters["written"] = double(batch) * double(len) * row;
      state.counters["store_GBps"] = store_bandwidth_gbps();
      return;
    }
    // Decode as an engine runs it: the step's append first (so no page turns cold inside the
    // attention call), then attention over the prefix with the cold length after the append.
    const int64_t cold_after_step = kvq::cold_after(len + q_len, c.cold, R, P);
    DeviceArray<int32_t> colds_after{std::vector<int32_t>(static_cast<size_t>(batch), int32_t(cold_after_step))};
    a.lengths = kvq::SeqLengths{c.lens.ptr, colds_after.ptr};
    const double decode_prefix_bytes =
        double(cold_after_step / P) * H * double(Cfg::record_bytes) + double(len - cold_after_step) * row;
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
    kvq::DecodePlan plan;
    if (kvq::plan_decode<Cfg, Policy>(kvq::DecodeShape{batch, HQ, H, R, context, q_len, total_q, sms}, &plan) !=
        kvq::Status::kSuccess) {
      state.SkipWithError("plan failed");
      return;
    }
    DeviceArray<uint8_t> ws(plan.workspace_bytes);
    const double bytes = double(batch) * (decode_prefix_bytes + double(q_len) * row + 2.0 * q_len * HQ * D * sizeof(T));
    run_timed(state, bytes, [&] {
      if (kvq::decode<Cfg, Policy>(v, a, plan, ws.ptr, plan.workspace_bytes, out.ptr, c.flags.ptr, nullptr) != kvq::Status::kSuccess)
        state.SkipWithError("decode failed");
    });
    state.counters["splits"] = plan.max_splits;
  }

  // One real record per head (random data through the host encoder), replicated over the pool.
  static void fill_pool(BenchCache<Cfg>& c) {
    std::vector<uint8_t> record(size_t(H) * Cfg::record_bytes);
    const std::vector<T> rows = BenchCache<Cfg>::random_rows(size_t(P) * H * D * 2, 11);
    kvq::SeqAppend s{};
    s.len_new = P;
    s.cold_new = P;
    kvq::CacheView<T> none{};
    none.num_kv_heads = H;
    none.residual = R;
    uint32_t f = 0;
    kvq::reference::encode_page<Cfg>(none, rows.data(), rows.data() + size_t(P) * H * D, s, 0, record.data(), f);
    const size_t pages = size_t(c.batch) * size_t(c.pages_per_seq);
    check(cudaMemcpy(c.pool.ptr, record.data(), record.size(), cudaMemcpyHostToDevice), "record");
    for (size_t have = 1; have < pages;) {  // doubling copies
      const size_t n = std::min(have, pages - have);
      check(cudaMemcpy(c.pool.ptr + have * record.size(), c.pool.ptr, n * record.size(), cudaMemcpyDeviceToDevice), "fill");
      have += n;
    }
  }

  static void register_one(const std::string& name, int batch, int64_t ctx, int q_len) {
    benchmark::RegisterBenchmark(("decode/" + name + "/batch:" + std::to_string(batch) + "/context:" + std::to_string(ctx) +
                                  "/q_len:" + std::to_string(q_len))
                                     .c_str(),
                                 [=](benchmark::State& s) { run(s, batch, ctx, q_len); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }

  // name: the format (and for a tuning experiment a tag of its policies: bench/CMakeLists.txt).
  static void register_all(const std::string& name) {
    for (int q_len : {1, 4})
      for (int batch : {1, 8, 32, 64})
        for (int64_t ctx : {4096, 32768, 131072}) register_one(name, batch, ctx, q_len);
    // Beyond the issue's grid: 8 and 16 new tokens (group 4 x 8 / 16 = 32 / 64 query rows a KV
    // head: 2 / 4 row tiles of the records kernel, or one CTA of the many-row kernel for "none").
    for (int q_len : {8, 16})
      for (int batch : {1, 8})
        for (int64_t ctx : {32768, 131072}) register_one(name, batch, ctx, q_len);
    // 512 pages a sequence (one block a page), and 2048 (the strided kernel: 512 blocks of 4 pages).
    for (int64_t ctx : {32768, 131072})
      benchmark::RegisterBenchmark(("dequantize/" + name + "/batch:8/context:" + std::to_string(ctx)).c_str(),
                                   [=](benchmark::State& s) { run(s, 8, ctx, 1, true); })
          ->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
};

}  // namespace kvq_bench

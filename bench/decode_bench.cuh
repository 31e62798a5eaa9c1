// Decode attention benchmarks for one configuration (issue shape: head dim 128, 32 query heads /
// 8 KV heads, page 64, R 128). Every sequence has `context` tokens after the step: prefix
// len = context - q_len in the cache (cold pages + hot ring, as appends alone leave it), q_len new.
// Bytes counted: what the kernel must read at least (cold records, hot rows, new K/V, q) plus the
// output written.
#pragma once

#include <kvq/decode/decode_impl.cuh>
#include <kvq/dequant/dequantize_impl.cuh>
#include <kvq/reference/append.hpp>

#include <random>
#include <string>
#include <vector>

#include "bench_util.cuh"

namespace kvq_bench {

template <class Cfg>
struct DecodeCase {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, H = 8, HQ = 32, R = 128;

  static void run(benchmark::State& state, int batch, int64_t context, int q_len, bool dequant = false) {
    const int64_t len = context - q_len;
    const int64_t cold = kvq::cold_after(len, 0, R, P);
    const int64_t pages_per_seq = cold / P + 1;
    const int64_t num_pages = int64_t(batch) * pages_per_seq;
    // One real record (random data through the host encoder) replicated over the pool.
    std::vector<uint8_t> record(size_t(H) * Cfg::record_bytes);
    {
      std::mt19937 rng(11);
      std::normal_distribution<float> nd;
      std::vector<T> rows(size_t(P) * H * D * 2);
      for (auto& x : rows) x = T::from_float(nd(rng));
      kvq::SeqAppend s{};
      s.len_old = 0;
      s.len_new = P;
      s.cold_new = P;
      kvq::CacheView<T> none{};
      none.num_kv_heads = H;
      none.residual = R;
      uint32_t f = 0;
      kvq::reference::encode_page<Cfg>(none, rows.data(), rows.data() + size_t(P) * H * D, s, 0, record.data(), f);
    }
    uint8_t* pool;
    check(cudaMalloc(&pool, size_t(num_pages) * record.size()), "pool");
    check(cudaMemcpy(pool, record.data(), record.size(), cudaMemcpyHostToDevice), "record");
    for (size_t have = 1; have < size_t(num_pages);) {  // doubling copies
      const size_t n = std::min(have, size_t(num_pages) - have);
      check(cudaMemcpy(pool + have * record.size(), pool, n * record.size(), cudaMemcpyDeviceToDevice), "fill");
      have += n;
    }
    const size_t ring = size_t(batch) * (R + P) * H * D;
    const int64_t total_q = int64_t(batch) * q_len;
    std::vector<T> host(std::max(ring, size_t(total_q) * HQ * D));
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (auto& x : host) x = T::from_float(nd(rng));
    T *hot_k, *hot_v, *q, *nk, *nv, *out;
    auto alloc_fill = [&](T** p, size_t n) {
      check(cudaMalloc(p, n * sizeof(T)), "alloc");
      check(cudaMemcpy(*p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "fill");
    };
    alloc_fill(&hot_k, ring);
    alloc_fill(&hot_v, ring);
    alloc_fill(&q, size_t(total_q) * HQ * D);
    alloc_fill(&nk, size_t(total_q) * H * D);
    alloc_fill(&nv, size_t(total_q) * H * D);
    check(cudaMalloc(&out, size_t(total_q) * HQ * D * sizeof(T)), "out");
    std::vector<int32_t> h_table(static_cast<size_t>(num_pages)), h_slot(static_cast<size_t>(batch)),
        h_len(static_cast<size_t>(batch), int32_t(len)), h_cold(static_cast<size_t>(batch), int32_t(cold)),
        h_cu(static_cast<size_t>(batch) + 1);
    for (size_t i = 0; i < h_table.size(); ++i) h_table[i] = int32_t(i);
    for (int b = 0; b < batch; ++b) h_slot[size_t(b)] = b;
    for (int b = 0; b <= batch; ++b) h_cu[size_t(b)] = b * q_len;
    int32_t *table, *slot, *lens, *colds, *cu;
    auto up = [](int32_t** d, const std::vector<int32_t>& h) {
      check(cudaMalloc(d, h.size() * 4), "table");
      check(cudaMemcpy(*d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "upload");
    };
    up(&table, h_table);
    up(&slot, h_slot);
    up(&lens, h_len);
    up(&colds, h_cold);
    up(&cu, h_cu);
    uint32_t* flags;
    check(cudaMalloc(&flags, 4), "flags");
    check(cudaMemset(flags, 0, 4), "flags");

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
    kvq::AttentionBatch<T> a;
    a.batch = batch;
    a.num_q_heads = HQ;
    a.lengths = kvq::SeqLengths{lens, colds};
    a.cu_q = cu;
    a.q = q;
    a.new_k = nk;
    a.new_v = nv;
    a.softmax_scale = 1.0f / std::sqrt(float(D));
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
    kvq::DecodePlan plan;
    if (kvq::plan_decode(kvq::DecodeShape{batch, HQ, H, R, context, q_len, total_q, sms}, D, P, Cfg::record_bytes, &plan) !=
        kvq::Status::kSuccess) {
      state.SkipWithError("plan failed");
      return;
    }
    void* ws;
    check(cudaMalloc(&ws, plan.workspace_bytes), "workspace");

    const double row = double(H) * D * sizeof(T) * 2;  // K and V of one token, all heads
    if (dequant) {
      // Every prefix token back in the model dtype: records + hot rows read, len rows written.
      T *k_out, *v_out;
      int32_t* cu_out;
      std::vector<int32_t> h_cu_out(static_cast<size_t>(batch) + 1);
      for (int b = 0; b <= batch; ++b) h_cu_out[size_t(b)] = int32_t(b * len);
      up(&cu_out, h_cu_out);
      check(cudaMalloc(&k_out, size_t(batch) * len * H * D * sizeof(T)), "k_out");
      check(cudaMalloc(&v_out, size_t(batch) * len * H * D * sizeof(T)), "v_out");
      const double bytes = double(batch) * (double(cold / P) * H * double(Cfg::record_bytes) + double(len - cold) * row +
                                            double(len) * row);
      run_timed(state, bytes, [&] {
        if (kvq::dequantize<Cfg>(v, a.lengths, batch, cu_out, len, k_out, v_out, flags, nullptr) != kvq::Status::kSuccess)
          state.SkipWithError("dequantize failed");
      });
      for (void* p : {(void*)k_out, (void*)v_out, (void*)cu_out}) cudaFree(p);
    } else {
      const double bytes = double(batch) * (double(cold / P) * H * double(Cfg::record_bytes) + double(len - cold) * row +
                                            double(q_len) * row + 2.0 * q_len * HQ * D * sizeof(T));
      run_timed(state, bytes, [&] {
        if (kvq::decode<Cfg>(v, a, plan, ws, plan.workspace_bytes, out, flags, nullptr) != kvq::Status::kSuccess)
          state.SkipWithError("decode failed");
      });
    }
    state.counters["splits"] = plan.max_splits;
    for (void* p : {(void*)pool, (void*)hot_k, (void*)hot_v, (void*)q, (void*)nk, (void*)nv, (void*)out, (void*)table,
                    (void*)slot, (void*)lens, (void*)colds, (void*)cu, (void*)flags, ws})
      cudaFree(p);
  }

  static void register_all(const std::string& name) {
    for (int batch : {1, 8})
      for (int64_t ctx : {32768, 131072})
        benchmark::RegisterBenchmark(("decode/" + name + "/batch:" + std::to_string(batch) + "/context:" +
                                      std::to_string(ctx) + "/q_len:1").c_str(),
                                     [=](benchmark::State& s) { run(s, batch, ctx, 1); })
            ->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("dequantize/" + name + "/batch:8/context:32768").c_str(),
                                 [=](benchmark::State& s) { run(s, 8, 32768, 1, true); })
        ->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
};

}  // namespace kvq_bench

// A uniform benchmark batch on the device, shared by the append, decode and dequantize benchmarks:
// `batch` sequences of `len` tokens each (cold = what appends alone leave: cold_after(len, 0, R, P)),
// pages numbered in order, sequence b in hot slot b, `n` new rows per sequence, random finite data.
#pragma once

#include <kvq/cache/view.hpp>
#include <kvq/cache/window.hpp>
#include <kvq/quant/formats.hpp>

#include <cstdlib>
#include <random>
#include <vector>

#include "bench_util.cuh"

namespace kvq_bench {

// An owning device array.
template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t size = 0;
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : size(n) { check(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) {
    check(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

template <class Cfg>
struct BenchCache {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, H = 8, R = 128;

  int batch;
  int64_t len, cold, pages_per_seq;
  DeviceArray<uint8_t> pool;
  DeviceArray<T> hot_k, hot_v, new_k, new_v;
  // Attention sinks (cache/view.hpp) for quantized configurations: KVQ_BENCH_SINKS=S in the
  // environment (default 0), so that one binary measures a cache with and without them.
  int sinks;
  DeviceArray<T> sink_k, sink_v;
  DeviceArray<int32_t> table, slot, lens, colds, cu_new;
  DeviceArray<uint32_t> flags;

  // extra_pages: block-table room past the current cold pages (pages an append will turn cold).
  BenchCache(int batch_, int64_t len_, int n, int64_t extra_pages)
      : batch(batch_),
        len(len_),
        cold(kvq::cold_after(len_, 0, R, P)),
        pages_per_seq(cold / P + extra_pages),
        pool(size_t(batch_) * size_t(pages_per_seq) * H * Cfg::record_bytes),
        hot_k(random_rows(size_t(batch_) * (R + P) * H * D, 1)),
        hot_v(random_rows(size_t(batch_) * (R + P) * H * D, 2)),
        sinks(bench_sinks()),
        sink_k(random_rows(size_t(batch_) * size_t(sinks > 0 ? sinks : 1) * H * D, 5)),
        sink_v(random_rows(size_t(batch_) * size_t(sinks > 0 ? sinks : 1) * H * D, 6)),
        new_k(random_rows(size_t(batch_) * n * H * D, 3)),
        new_v(random_rows(size_t(batch_) * n * H * D, 4)),
        table(iota(size_t(batch_) * size_t(pages_per_seq), 1)),
        slot(iota(size_t(batch_), 1)),
        lens(std::vector<int32_t>(size_t(batch_), int32_t(len_))),
        colds(std::vector<int32_t>(size_t(batch_), int32_t(cold))),
        cu_new(iota(size_t(batch_) + 1, n)),
        flags(std::vector<uint32_t>{0u}) {}

  kvq::CacheView<T> view() const {
    kvq::CacheView<T> v;
    v.cold = pool.ptr;
    v.num_pages = int64_t(batch) * pages_per_seq;
    v.hot_k = hot_k.ptr;
    v.hot_v = hot_v.ptr;
    v.num_slots = batch;
    v.residual = R;
    v.num_kv_heads = H;
    v.block_table = table.ptr;
    v.max_pages_per_seq = int32_t(pages_per_seq);
    v.hot_slot = slot.ptr;
    if (sinks > 0) {
      v.sink_k = sink_k.ptr;
      v.sink_v = sink_v.ptr;
      v.sinks = sinks;
    }
    return v;
  }
  kvq::SeqLengths lengths() const { return kvq::SeqLengths{lens.ptr, colds.ptr}; }
  double bytes_per_token_row() const { return double(H) * D * sizeof(T) * 2; }  // K and V, all heads

  static int bench_sinks() {
    constexpr bool quantized = Cfg::k_quant::kind != kvq::QuantKind::kNone || Cfg::v_quant::kind != kvq::QuantKind::kNone;
    const char* e = std::getenv("KVQ_BENCH_SINKS");
    return quantized && e ? std::atoi(e) : 0;
  }
  static std::vector<T> random_rows(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::vector<T> h(n);
    for (auto& x : h) x = T::from_float(nd(rng));
    return h;
  }
  // 0, step, 2*step, ...
  static std::vector<int32_t> iota(size_t n, int step) {
    std::vector<int32_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = int32_t(i) * step;
    return h;
  }
};

}  // namespace kvq_bench

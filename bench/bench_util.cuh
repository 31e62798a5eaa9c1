// Benchmark plumbing shared by kvq's Google Benchmark binaries: CUDA-event timing, an L2 flush
// between iterations, and the device read+write bandwidth measured by a copy kernel in the same
// run (every "% of bandwidth" figure is relative to it, never to a datasheet number).
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvq_bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Reads `bytes` of `buf` (a kernel whose result is never used): L2 then holds clean lines of it.
// The same stream read_bandwidth_gbps times.
void read_through(const void* buf, size_t bytes, cudaStream_t s);

// Overwrites a buffer larger than L2 so no iteration starts with its inputs cached.
// KVQ_BENCH_L2=clean (not the default; no published number uses it) then also reads a second
// buffer of 2x L2, so the memset's dirty lines are written back during the flush, not during the
// timed call: what a kernel costs without the write-back of an earlier kernel's output.
class L2Flusher {
 public:
  L2Flusher() {
    int dev = 0, l2 = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "L2 size");
    bytes_ = size_t(l2) * 4;
    check(cudaMalloc(&buf_, bytes_), "flush buffer");
    const char* mode = std::getenv("KVQ_BENCH_L2");
    if (mode && std::string(mode) == "clean") {
      clean_bytes_ = size_t(l2) * 2;
      check(cudaMalloc(&clean_, clean_bytes_), "clean buffer");
      check(cudaMemset(clean_, 0, clean_bytes_), "clean buffer");
    }
  }
  ~L2Flusher() {
    cudaFree(buf_);
    cudaFree(clean_);
  }
  void flush(cudaStream_t s = nullptr) {
    check(cudaMemsetAsync(buf_, int(++tick_ & 0xff), bytes_, s), "flush");
    if (clean_) read_through(clean_, clean_bytes_, s);
  }

 private:
  void* buf_ = nullptr;
  void* clean_ = nullptr;
  size_t bytes_ = 0, clean_bytes_ = 0;
  unsigned tick_ = 0;
};

// Times fn() with CUDA events after an L2 flush; returns milliseconds.
template <class F>
float time_once(L2Flusher& flusher, F&& fn) {
  static cudaEvent_t start = nullptr, stop = nullptr;
  if (!start) {
    check(cudaEventCreate(&start), "event");
    check(cudaEventCreate(&stop), "event");
  }
  flusher.flush();
  check(cudaEventRecord(start), "record");
  fn();
  check(cudaEventRecord(stop), "record");
  check(cudaEventSynchronize(stop), "sync");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  return ms;
}

// Device bandwidth (bytes read + written per second) of a plain copy kernel with four 16-byte
// loads in flight per thread, over 2 GiB, median of 20 runs. Measured once per process.
// Write-only bandwidth: 16-byte stores over 2 GiB (GB/s), the roofline of a kernel that mostly writes.
double store_bandwidth_gbps();
double copy_bandwidth_gbps();
// Read-only bandwidth over 2 GiB, median of 20 (GB/s): the faster of two read kernels, the copy
// kernel's loads without its stores (grid-stride) and a chunked read (each warp its own contiguous
// run, 8 loads in flight a lane); both are printed to stderr once. The ceiling of a kernel that only
// reads, such as decode: a copy's reads + writes run below it.
double read_bandwidth_gbps();

// Runs fn under Google Benchmark with manual time; sets bytes / GB/s / % of copy bandwidth.
template <class F>
void run_timed(benchmark::State& state, double bytes, F&& fn) {
  static L2Flusher flusher;
  for (int i = 0; i < 3; ++i) fn();  // warm-up
  check(cudaDeviceSynchronize(), "warm-up");
  for (auto _ : state) state.SetIterationTime(double(time_once(flusher, fn)) * 1e-3);
  const double bw = copy_bandwidth_gbps();
  state.counters["read_GBps"] = read_bandwidth_gbps();
  state.counters["bytes"] = bytes;
  state.counters["GBps"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copy_GBps"] = bw;
}

}  // namespace kvq_bench

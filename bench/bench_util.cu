#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_util.cuh"

namespace kvq_bench {
namespace {

__global__ void copy_kernel(const uint4* __restrict__ in, uint4* __restrict__ out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
    out[i] = a;
    out[i + stride] = b;
    out[i + 2 * stride] = c;
    out[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) out[i] = in[i];
}

// The read kernels fold what they load into one word per thread; the never-true store keeps the loads.
__device__ __forceinline__ uint32_t fold(const uint4& a) { return a.x ^ a.y ^ a.z ^ a.w; }
__device__ __forceinline__ void read_sink(uint32_t x, uint32_t* sink) {
  if (x == 0x9e3779b9u) *sink = x;
}

// The read-only stream: the copy kernel's loads (four 16-byte loads in flight per thread, grid-stride)
// without its stores.
__global__ void stream_read_kernel(const uint4* __restrict__ in, size_t n, uint32_t* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t x = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
    x ^= fold(a) ^ fold(b) ^ fold(c) ^ fold(d);
  }
  for (; i < n; i += stride) x ^= fold(in[i]);
  read_sink(x, sink);
}

// The chunked read: each warp reads its own contiguous run (n / warps 16-byte words, whole 4 KB
// steps) with 8 loads in flight per lane, so the GPU's loads at any moment spread over as many runs
// as there are warps instead of sweeping one front across memory; the remainder goes grid-stride.
__global__ void chunk_read_kernel(const uint4* __restrict__ in, size_t n, uint32_t* sink) {
  const size_t threads = size_t(gridDim.x) * blockDim.x, t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t warps = threads / 32, per = n / warps / 256 * 256;
  const uint4* run = in + (t / 32) * per + t % 32;
  uint32_t x = 0;
  for (size_t k = 0; k < per; k += 256) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = run[k + 32 * j];
#pragma unroll
    for (int j = 0; j < 8; ++j) x ^= fold(v[j]);
  }
  for (size_t i = warps * per + t; i < n; i += threads) x ^= fold(in[i]);
  read_sink(x, sink);
}

__global__ void store_kernel(uint4* __restrict__ out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const uint4 v = make_uint4(threadIdx.x, blockIdx.x, 1u, 2u);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = v;
}

// The device word the read kernels' never-true store targets, allocated once (read_through runs
// before every timed call).
uint32_t* sink_word() {
  static uint32_t* sink = nullptr;
  if (!sink) check(cudaMalloc(&sink, 4), "sink");
  return sink;
}

}  // namespace

void read_through(const void* buf, size_t bytes, cudaStream_t s) {
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    check(cudaGetDevice(&dev), "device");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "sms");
  }
  stream_read_kernel<<<sms * 8, 256, 0, s>>>(static_cast<const uint4*>(buf), bytes / sizeof(uint4), sink_word());
  check(cudaGetLastError(), "read_through");
}

namespace {

constexpr size_t kStreamBytes = size_t(2) << 30;

// Median time (ms) of 20 launches of launch(n, sms) after 3 warm-ups, L2 flushed before each.
template <class Launch>
float stream_median_ms(Launch&& launch) {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  L2Flusher flusher;
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    const float t = time_once(flusher, [&] { launch(kStreamBytes / sizeof(uint4), sms); });
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double gbps(double bytes, float ms) { return bytes / (double(ms) * 1e-3) * 1e-9; }

uint4* filled_buffer(const char* what) {
  uint4* p = nullptr;
  check(cudaMalloc(&p, kStreamBytes), what);
  check(cudaMemset(p, 1, kStreamBytes), what);
  return p;
}

}  // namespace

double read_bandwidth_gbps() {
  static double cached = 0.0;
  if (cached > 0.0) return cached;
  uint4* in = filled_buffer("read in");
  const float stream_ms = stream_median_ms([&](size_t n, int) { read_through(in, n * sizeof(uint4), nullptr); });
  const float chunk_ms = stream_median_ms([&](size_t n, int sms) { chunk_read_kernel<<<sms * 8, 256>>>(in, n, sink_word()); });
  cudaFree(in);
  const double stream = gbps(double(kStreamBytes), stream_ms), chunk = gbps(double(kStreamBytes), chunk_ms);
  std::fprintf(stderr, "read bandwidth: grid-stride stream %.0f GB/s, chunked %.0f GB/s\n", stream, chunk);
  return cached = std::max(stream, chunk);
}

double store_bandwidth_gbps() {
  static double cached = 0.0;
  if (cached > 0.0) return cached;
  uint4* out = filled_buffer("store out");
  const float ms = stream_median_ms([&](size_t n, int sms) { store_kernel<<<sms * 8, 256>>>(out, n); });
  cudaFree(out);
  return cached = gbps(double(kStreamBytes), ms);
}

double copy_bandwidth_gbps() {
  static double cached = 0.0;
  if (cached > 0.0) return cached;
  uint4* in = filled_buffer("copy in");
  uint4* out = filled_buffer("copy out");
  const float ms = stream_median_ms([&](size_t n, int sms) { copy_kernel<<<sms * 8, 256>>>(in, out, n); });
  cudaFree(in);
  cudaFree(out);
  return cached = gbps(2.0 * double(kStreamBytes), ms);  // reads + writes
}

}  // namespace kvq_bench

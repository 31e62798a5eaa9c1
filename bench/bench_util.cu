#include <algorithm>
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

__global__ void store_kernel(uint4* __restrict__ out, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const uint4 v = make_uint4(threadIdx.x, blockIdx.x, 1u, 2u);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = v;
}

__global__ void read_kernel(const uint4* __restrict__ in, size_t n, uint32_t* sink) {
  uint32_t x = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = in[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u) *sink = x;  // keeps the loads
}

}  // namespace

void read_through(const void* buf, size_t bytes, cudaStream_t s) {
  static uint32_t* sink = nullptr;  // allocated and sized once: this runs before every timed call
  static int sms = 0;
  if (!sink) {
    int dev = 0;
    check(cudaGetDevice(&dev), "device");
    check(cudaMalloc(&sink, 4), "sink");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "sms");
  }
  read_kernel<<<sms * 8, 256, 0, s>>>(static_cast<const uint4*>(buf), bytes / sizeof(uint4), sink);
  check(cudaGetLastError(), "read_through");
}

double store_bandwidth_gbps() {
  static double cached = 0.0;
  if (cached > 0.0) return cached;
  const size_t bytes = size_t(2) << 30, n = bytes / sizeof(uint4);
  uint4* out = nullptr;
  check(cudaMalloc(&out, bytes), "store out");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  L2Flusher flusher;
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    const float t = time_once(flusher, [&] { store_kernel<<<sms * 8, 256>>>(out, n); });
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(out);
  cached = double(bytes) / (double(ms[ms.size() / 2]) * 1e-3) * 1e-9;
  return cached;
}

double copy_bandwidth_gbps() {
  static double cached = 0.0;
  if (cached > 0.0) return cached;
  const size_t bytes = size_t(2) << 30, n = bytes / sizeof(uint4);
  uint4 *in = nullptr, *out = nullptr;
  check(cudaMalloc(&in, bytes), "copy in");
  check(cudaMalloc(&out, bytes), "copy out");
  check(cudaMemset(in, 1, bytes), "memset");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "sms");
  L2Flusher flusher;
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    const float t = time_once(flusher, [&] { copy_kernel<<<sms * 8, 256>>>(in, out, n); });
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(in);
  cudaFree(out);
  cached = 2.0 * double(bytes) / (double(ms[ms.size() / 2]) * 1e-3) * 1e-9;
  return cached;
}

}  // namespace kvq_bench

// examples/quickstart_gpu.cpp - replay the quickstart's appends on the GPU (see quickstart_gpu.hpp).
//
// A C++ file compiled by the host compiler and linked with the CUDA runtime: the kernels live in
// kvq_engine_instance and are reached through a kvq::Handle from engine::make_handle (the
// kvq_instances.hpp that kvq_add_instances generated), as an engine would.
#include "quickstart_gpu.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "kvq_instances.hpp"

namespace quickstart {
namespace {

// A cudaMalloc'ed buffer freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  cudaError_t allocate(size_t bytes) { return cudaMalloc(&ptr_, bytes ? bytes : 16); }
  template <class U = void>
  U* get() const {
    return static_cast<U*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

template <class V>
size_t bytes_of(const V& v) {
  return v.size() * sizeof(v[0]);
}

uint64_t count_diff(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  uint64_t d = 0;
  for (size_t i = 0; i < n; ++i) d += x[i] != y[i];
  return d;
}

}  // namespace

int gpu_count(std::string* name) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear the error, report none
    return 0;
  }
  if (n > 0 && name) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
      *name = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  }
  return n;
}

GpuOutcome gpu_replay(const Replay& r) {
  GpuOutcome out;
  kvq::Handle handle;
  if (!engine::supports(r.key)) {
    // Ask anyway, to show what an engine gets for a format it did not compile.
    out.status = engine::make_handle(r.key, &handle);
    out.instantiated = false;
    return out;
  }
  out.status = engine::make_handle(r.key, &handle);
  if (out.status != kvq::Status::kSuccess) return out;
  cudaError_t err = cudaSuccess;
  auto cuda = [&](cudaError_t e) {
    if (err == cudaSuccess && e != cudaSuccess) err = e;
    return e == cudaSuccess;
  };
  auto fail = [&](kvq::Status s) {
    out.status = s;
    if (err != cudaSuccess) out.error = cudaGetErrorString(err);
    return out;
  };

  // Buffers sized for the largest step.
  size_t max_tokens = 0;
  for (const ReplayStep& s : *r.steps) max_tokens = std::max(max_tokens, size_t(s.cu_new.back()));
  const size_t row_bytes = size_t(r.num_kv_heads) * size_t(r.key.head_dim) * sizeof(kvq::bf16);
  DeviceBuffer cold, hot_k, hot_v, table, slots, len, cold_len, cu_new, new_k, new_v, cold_out, flags;
  cuda(cold.allocate(bytes_of(*r.cold)));
  cuda(hot_k.allocate(bytes_of(*r.hot_k)));
  cuda(hot_v.allocate(bytes_of(*r.hot_v)));
  cuda(table.allocate(bytes_of(*r.block_table)));
  cuda(slots.allocate(bytes_of(*r.hot_slot)));
  cuda(len.allocate(sizeof(int32_t) * size_t(r.batch)));
  cuda(cold_len.allocate(sizeof(int32_t) * size_t(r.batch)));
  cuda(cu_new.allocate(sizeof(int32_t) * size_t(r.batch + 1)));
  cuda(new_k.allocate(max_tokens * row_bytes));
  cuda(new_v.allocate(max_tokens * row_bytes));
  cuda(cold_out.allocate(sizeof(int32_t) * size_t(r.batch)));
  cuda(flags.allocate(sizeof(uint32_t)));
  if (err != cudaSuccess) return fail(kvq::Status::kCudaError);

  cudaStream_t stream = nullptr;
  if (!cuda(cudaStreamCreate(&stream))) return fail(kvq::Status::kCudaError);
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } guard{stream};

  // The same initial state as the host cache.
  cuda(cudaMemsetAsync(cold.get(), r.cold_fill, bytes_of(*r.cold), stream));
  cuda(cudaMemsetAsync(hot_k.get(), 0, bytes_of(*r.hot_k), stream));
  cuda(cudaMemsetAsync(hot_v.get(), 0, bytes_of(*r.hot_v), stream));
  cuda(cudaMemsetAsync(flags.get(), 0, sizeof(uint32_t), stream));
  cuda(cudaMemcpyAsync(table.get(), r.block_table->data(), bytes_of(*r.block_table), cudaMemcpyHostToDevice, stream));
  cuda(cudaMemcpyAsync(slots.get(), r.hot_slot->data(), bytes_of(*r.hot_slot), cudaMemcpyHostToDevice, stream));

  kvq::CacheView<void> cache;  // the model dtype is the handle's (bf16 here)
  cache.cold = cold.get<uint8_t>();
  cache.num_pages = r.num_pages;
  cache.hot_k = hot_k.get();
  cache.hot_v = hot_v.get();
  cache.num_slots = r.num_slots;
  cache.residual = r.residual;
  cache.num_kv_heads = r.num_kv_heads;
  cache.block_table = table.get<int32_t>();
  cache.max_pages_per_seq = r.max_pages_per_seq;
  cache.hot_slot = slots.get<int32_t>();

  kvq::AppendBatch<void> args;
  args.batch = r.batch;
  args.lengths = kvq::SeqLengths{len.get<int32_t>(), cold_len.get<int32_t>()};
  args.cu_new = cu_new.get<int32_t>();
  args.new_k = new_k.get();
  args.new_v = new_v.get();
  args.cold_out = cold_out.get<int32_t>();

  std::vector<int32_t> reported(size_t(r.batch));
  for (const ReplayStep& s : *r.steps) {
    const size_t tokens = size_t(s.cu_new.back());
    // The example syncs once per step to read cold_out back; an engine keeps lengths on the device
    // and never syncs (the append itself does no host synchronisation).
    cuda(cudaMemcpyAsync(len.get(), s.len.data(), bytes_of(s.len), cudaMemcpyHostToDevice, stream));
    cuda(cudaMemcpyAsync(cold_len.get(), s.cold.data(), bytes_of(s.cold), cudaMemcpyHostToDevice, stream));
    cuda(cudaMemcpyAsync(cu_new.get(), s.cu_new.data(), bytes_of(s.cu_new), cudaMemcpyHostToDevice, stream));
    cuda(cudaMemcpyAsync(new_k.get(), s.new_k, tokens * row_bytes, cudaMemcpyHostToDevice, stream));
    cuda(cudaMemcpyAsync(new_v.get(), s.new_v, tokens * row_bytes, cudaMemcpyHostToDevice, stream));
    if (err != cudaSuccess) return fail(kvq::Status::kCudaError);
    const kvq::Status st = handle.append(cache, args, s.max_new, flags.get<uint32_t>(), stream);
    if (st != kvq::Status::kSuccess) {
      if (st == kvq::Status::kCudaError) err = static_cast<cudaError_t>(kvq::last_cuda_error());
      return fail(st);
    }
    cuda(cudaMemcpyAsync(reported.data(), cold_out.get(), bytes_of(reported), cudaMemcpyDeviceToHost, stream));
    if (!cuda(cudaStreamSynchronize(stream))) return fail(kvq::Status::kCudaError);
    for (int b = 0; b < r.batch; ++b) out.cold_len_mismatch += reported[size_t(b)] != s.cold_after[size_t(b)];
  }

  std::vector<uint8_t> got_cold(r.cold->size());
  std::vector<kvq::bf16> got_k(r.hot_k->size()), got_v(r.hot_v->size());
  cuda(cudaMemcpy(got_cold.data(), cold.get(), bytes_of(got_cold), cudaMemcpyDeviceToHost));
  cuda(cudaMemcpy(got_k.data(), hot_k.get(), bytes_of(got_k), cudaMemcpyDeviceToHost));
  cuda(cudaMemcpy(got_v.data(), hot_v.get(), bytes_of(got_v), cudaMemcpyDeviceToHost));
  cuda(cudaMemcpy(&out.flags, flags.get(), sizeof(uint32_t), cudaMemcpyDeviceToHost));
  if (err != cudaSuccess) return fail(kvq::Status::kCudaError);

  out.cold_mismatch = count_diff(got_cold.data(), r.cold->data(), bytes_of(got_cold));
  out.hot_mismatch = count_diff(got_k.data(), r.hot_k->data(), bytes_of(got_k)) +
                     count_diff(got_v.data(), r.hot_v->data(), bytes_of(got_v));
  return out;
}

}  // namespace quickstart

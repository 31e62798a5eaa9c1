// kvq's launchers report only their own CUDA errors (core/launch.cuh, core/status.hpp): an error
// the engine caused before a kvq call (a launch with an invalid configuration, still pending in
// the runtime's last-error state) is neither reported by kvq nor cleared, and a failure of kvq's
// own launch is kCudaError with its cudaError_t in kvq::last_cuda_error(). The documented
// exception, the first call that raises a kernel's shared memory limit (cudaFuncSetAttribute
// clears a pending error inside the runtime), is made before the engine's error here: each
// operation runs once before its checked call.
#include <kvq/append/append.hpp>
#include <kvq/append/rollback.cuh>
#include <kvq/core/launch.cuh>
#include <kvq/decode/decode.hpp>
#include <kvq/dequant/dequantize_impl.cuh>
#include <kvq/prefill/prefill.hpp>
#include <kvq/reference/host_cache.hpp>

#include <string>
#include <vector>

#include "gpu_util.cuh"

namespace {

// bf16_d128_p64_int2 of cmake/kvq_configs.cmake: its append, decode and prefill are instantiated
// by the per-configuration translation units (only the declarations are included here).
using Cfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using T = kvq::bf16;
using kvq::Status;
constexpr int D = Cfg::head_dim, R = 64, kTokens = 10;

__global__ void engine_kernel(int* p) {
  if (p) *p = 1;
}

// The engine's mistake: a block of 4096 threads (at most 1024); the launch fails at once and leaves
// a non-sticky error pending (cudaErrorInvalidConfiguration, or cudaErrorInvalidValue with the
// CUDA 13 runtime on an H100). Returns that error.
cudaError_t provoke_engine_error() {
  engine_kernel<<<1, 4096>>>(nullptr);
  const cudaError_t e = cudaPeekAtLastError();
  REQUIRE(e != cudaSuccess);
  return e;
}

// After the kvq call: the engine still finds its own error (and this clears it).
void expect_engine_error_kept(cudaError_t engine_error, const char* what) {
  CHECK_MESSAGE(cudaGetLastError() == engine_error, std::string(what) << ": the engine's pending error was lost");
  CHECK(cudaGetLastError() == cudaSuccess);
}

std::vector<T> rows(int n, int salt) {
  std::vector<T> r(size_t(n) * D);
  for (size_t i = 0; i < r.size(); ++i) r[i] = T::from_float(float(int(i * 7 + salt) % 17 - 8) * 0.25f);
  return r;
}

// One layer on the device: 1 KV head, R 64, one sequence, a pool of 4 pages.
struct Layer {
  kvq::reference::HostCache<Cfg> host{1, 4, 1, R, 4, 1};
  kvq_test::DeviceBuffer<uint8_t> cold{host.cold};
  kvq_test::DeviceBuffer<T> hot_k{host.hot_k}, hot_v{host.hot_v};
  kvq_test::DeviceBuffer<int32_t> table{host.block_table}, slot{host.hot_slot};
  kvq::CacheView<T> view() {
    kvq::CacheView<T> v = host.view();
    v.cold = cold.get();
    v.hot_k = hot_k.get();
    v.hot_v = hot_v.get();
    v.block_table = table.get();
    v.hot_slot = slot.get();
    return v;
  }
};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("cuda errors: an engine's pending launch error is neither reported nor cleared by kvq's launchers") {
    (void)cudaGetLastError();  // start clean
    kvq_test::DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});

    // rollback: sequence 0 from 10 tokens back to 7
    kvq_test::DeviceBuffer<int32_t> len(std::vector<int32_t>{10}), cold(std::vector<int32_t>{0}), accepted(std::vector<int32_t>{7});
    cudaError_t engine_error = provoke_engine_error();
    CHECK(kvq::rollback(len.get(), cold.get(), accepted.get(), 1, flags.get(), nullptr) == Status::kSuccess);
    expect_engine_error_kept(engine_error, "rollback");
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(len.download() == std::vector<int32_t>{7});

    // append: 10 tokens into an empty sequence (all hot: R + P = 128 rows)
    Layer layer;
    REQUIRE(layer.host.status() == Status::kSuccess);
    const std::vector<T> k = rows(kTokens, 1), v = rows(kTokens, 5);
    kvq_test::DeviceBuffer<T> d_k(k), d_v(v);
    kvq_test::DeviceBuffer<int32_t> d_len(std::vector<int32_t>{0}), d_cold(std::vector<int32_t>{0});
    kvq_test::DeviceBuffer<int32_t> cu(std::vector<int32_t>{0, kTokens});
    kvq::AppendBatch<T> a;
    a.batch = 1;
    a.lengths = kvq::SeqLengths{d_len.get(), d_cold.get()};
    a.cu_new = cu.get();
    a.new_k = d_k.get();
    a.new_v = d_v.get();
    engine_error = provoke_engine_error();
    CHECK(kvq::append<Cfg>(layer.view(), a, kTokens, flags.get(), nullptr) == Status::kSuccess);
    expect_engine_error_kept(engine_error, "append");
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    d_len.upload(std::vector<int32_t>{kTokens});

    // dequantize: the 10 hot tokens come back bit for bit
    kvq_test::DeviceBuffer<T> k_out(size_t(kTokens) * D), v_out(size_t(kTokens) * D);
    engine_error = provoke_engine_error();
    CHECK(kvq::dequantize<Cfg>(layer.view(), kvq::SeqLengths{d_len.get(), d_cold.get()}, 1, cu.get(), kTokens, k_out.get(),
                               v_out.get(), flags.get(), nullptr) == Status::kSuccess);
    expect_engine_error_kept(engine_error, "dequantize");
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(kvq_test::first_difference(k_out.download(), k) == -1);
    CHECK(kvq_test::first_difference(v_out.download(), v) == -1);

    // decode and prefill of one query token on the 10-token prefix (plans made after the error too)
    const std::vector<T> q = rows(1, 9), nk = rows(1, 11), nv = rows(1, 13);
    kvq_test::DeviceBuffer<T> d_q(q), d_nk(nk), d_nv(nv), out{size_t(D)};
    kvq_test::DeviceBuffer<int32_t> cu_q(std::vector<int32_t>{0, 1});
    kvq::AttentionBatch<T> att;
    att.batch = 1;
    att.num_q_heads = 1;
    att.lengths = kvq::SeqLengths{d_len.get(), d_cold.get()};
    att.cu_q = cu_q.get();
    att.q = d_q.get();
    att.new_k = d_nk.get();
    att.new_v = d_nv.get();
    att.softmax_scale = 0.125f;
    int sms = 0;
    KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

    // A first plan and run of each (the calls that raise the kernels' shared memory limits, the
    // documented exception) and the workspaces (cudaMalloc: the engine's call) come before the
    // engine's error is provoked; then both are planned and run again after it.
    const kvq::DecodeShape dshape{1, 1, 1, R, 2 * R, 1, 1, sms};
    const kvq::PrefillShape pshape{1, 1, 1, R, 2 * R, 1, 1};
    kvq::DecodePlan plan{};
    kvq::PrefillPlan pplan{};
    REQUIRE(kvq::plan_decode<Cfg>(dshape, &plan) == Status::kSuccess);
    REQUIRE(kvq::plan_prefill<Cfg>(pshape, &pplan) == Status::kSuccess);
    kvq_test::DeviceBuffer<uint8_t> ws(plan.workspace_bytes), pws(pplan.workspace_bytes);
    REQUIRE(kvq::decode<Cfg>(layer.view(), att, plan, ws.get(), plan.workspace_bytes, out.get(), flags.get(), nullptr) ==
            Status::kSuccess);
    REQUIRE(kvq::prefill<Cfg>(layer.view(), att, pplan, pws.get(), pplan.workspace_bytes, out.get(), flags.get(), nullptr) ==
            Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());

    engine_error = provoke_engine_error();
    REQUIRE(kvq::plan_decode<Cfg>(dshape, &plan) == Status::kSuccess);
    CHECK(kvq::decode<Cfg>(layer.view(), att, plan, ws.get(), plan.workspace_bytes, out.get(), flags.get(), nullptr) ==
          Status::kSuccess);
    expect_engine_error_kept(engine_error, "plan_decode + decode");

    engine_error = provoke_engine_error();
    REQUIRE(kvq::plan_prefill<Cfg>(pshape, &pplan) == Status::kSuccess);
    CHECK(kvq::prefill<Cfg>(layer.view(), att, pplan, pws.get(), pplan.workspace_bytes, out.get(), flags.get(), nullptr) ==
          Status::kSuccess);
    expect_engine_error_kept(engine_error, "plan_prefill + prefill");

    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(flags.download()[0] == 0u);  // every call ran on valid arguments
  }

  TEST_CASE("cuda errors: kvq's own failed launch is kCudaError, its cudaError_t in last_cuda_error()") {
    (void)cudaGetLastError();
    // the helper every launcher uses
    CHECK(kvq::detail::cuda_status(cudaErrorInvalidValue) == Status::kCudaError);
    CHECK(kvq::last_cuda_error() == int(cudaErrorInvalidValue));
    CHECK(kvq::detail::cuda_status(cudaSuccess) == Status::kSuccess);
    CHECK(kvq::last_cuda_error() == int(cudaErrorInvalidValue));  // kept until the next failure

    // A real launch failure: while a blocking stream captures in global mode, work on the legacy
    // default stream is refused (it would depend on the capturing stream).
    kvq_test::DeviceBuffer<int32_t> len(std::vector<int32_t>{10}), cold(std::vector<int32_t>{0}), accepted(std::vector<int32_t>{7});
    kvq_test::DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
    cudaStream_t s = nullptr;
    KVQ_CUDA_CHECK(cudaStreamCreate(&s));
    KVQ_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const Status st = kvq::rollback(len.get(), cold.get(), accepted.get(), 1, flags.get(), nullptr);
    const int kvq_error = kvq::last_cuda_error();
    const cudaError_t runtime_error = cudaGetLastError();  // the runtime records the failure too
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(s, &graph);  // the capture was invalidated
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    KVQ_CUDA_CHECK(cudaStreamDestroy(s));
    CHECK(st == Status::kCudaError);
    CHECK(runtime_error != cudaSuccess);
    CHECK_MESSAGE(kvq_error == int(runtime_error), "kvq " << cudaGetErrorString(static_cast<cudaError_t>(kvq_error)) << ", runtime "
                                                          << cudaGetErrorString(runtime_error));
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(len.download() == std::vector<int32_t>{10});  // the refused launch did nothing
  }
}

// Checks the decode and prefill special cases share (test_decode_special.cu,
// test_prefill_special.cu): the call arguments every attention entry point checks alike, and one
// call captured once in a CUDA graph, then replayed with new lengths within its plan.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "decode_check.cuh"

namespace kvq_test {

// The arguments decode and prefill check alike: `call(workspace, bytes, out, flags)` (a call on
// valid inputs and plan) succeeds; a null output, flags word or workspace is kNullPointer; a
// workspace one byte short of the plan's `plan_bytes` is kWorkspaceTooSmall, one at an offset of
// 16 bytes kInvalidShape. ws: at least plan_bytes + 16 bytes.
template <class T, class Call>
void check_call_arguments(Call&& call, DeviceBuffer<uint8_t>& ws, size_t plan_bytes, T* out, uint32_t* flags) {
  CHECK(call(ws.get(), ws.size(), out, flags) == kvq::Status::kSuccess);
  CHECK(call(ws.get(), ws.size(), nullptr, flags) == kvq::Status::kNullPointer);
  CHECK(call(ws.get(), ws.size(), out, nullptr) == kvq::Status::kNullPointer);
  CHECK(call(nullptr, ws.size(), out, flags) == kvq::Status::kNullPointer);
  CHECK(call(ws.get(), plan_bytes - 1, out, flags) == kvq::Status::kWorkspaceTooSmall);
  CHECK(call(ws.get() + 16, plan_bytes, out, flags) == kvq::Status::kInvalidShape);
}

// Captures `launch(da, out, flags, stream)` (one kvq attention call on device buffers sized for
// `batch` x `max_q` new tokens; `da` points at them) once, then replays the graph `replays` times:
// each replay draws 1 .. max_q new tokens a sequence (rng seeded with `seed`), makes their inputs
// with `make_inputs(counts)` (host q/k/v, cu and the host AttentionBatch a), uploads them into the
// captured buffers, poisons the output and compares it with the host reference (relative L2, the
// relative max where `check_rel_max`, and the FA3 bound against fp64). Odd replays run after the
// step's append of those tokens (host and device), even ones before it. The block tables must be
// reserved for every replay's appends before the call (they are captured). `host`, `dev`: the
// cache and its device mirror; heads, group: KV heads and query heads a KV head; D 128.
template <class Cfg, class MakeInputs, class Launch>
void check_graph_replays(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev, int batch, int max_q, int heads,
                         int group, int replays, uint64_t seed, bool check_rel_max, MakeInputs&& make_inputs,
                         Launch&& launch) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  const size_t q_elems = size_t(batch) * max_q * heads * group * D, kv_elems = size_t(batch) * max_q * heads * D;
  DeviceBuffer<int32_t> d_cu{size_t(batch) + 1}, d_prefix{size_t(batch)};
  DeviceBuffer<T> d_q(q_elems), d_k(kv_elems), d_v(kv_elems), d_out(q_elems);
  DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
  kvq::AttentionBatch<T> da;
  da.batch = batch;
  da.num_q_heads = heads * group;
  da.lengths = kvq::SeqLengths{d_prefix.get(), dev.cold_len.get()};
  da.cu_q = d_cu.get();
  da.q = d_q.get();
  da.new_k = d_k.get();
  da.new_v = d_v.get();
  da.softmax_scale = 1.0f / std::sqrt(float(D));
  cudaStream_t stream;
  KVQ_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  KVQ_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const kvq::Status st = launch(da, d_out.get(), flags.get(), stream);
  KVQ_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  REQUIRE(st == kvq::Status::kSuccess);
  cudaGraphExec_t exec;
  KVQ_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::mt19937_64 rng(seed);
  for (int replay = 0; replay < replays; ++replay) {
    std::vector<int32_t> counts(static_cast<size_t>(batch));
    for (auto& c : counts) c = 1 + int32_t(rng() % uint64_t(max_q));
    const auto in = make_inputs(counts);
    std::vector<float> ref(in.q.size());
    REQUIRE(kvq::reference::attention<Cfg>(host.view(), in.a, ref.data()) == kvq::Status::kSuccess);
    const Fp64Attention f64 = fp64_attention<Cfg>(host.view(), in.a);
    const std::vector<int32_t> prefix = host.len;
    if (replay % 2) REQUIRE(step_both_with(host, dev, counts, in.k, in.v, "graph replay"));
    d_cu.upload(in.cu);
    d_prefix.upload(prefix);
    KVQ_CUDA_CHECK(cudaMemcpy(d_q.get(), in.q.data(), in.q.size() * sizeof(T), cudaMemcpyHostToDevice));
    KVQ_CUDA_CHECK(cudaMemcpy(d_k.get(), in.k.data(), in.k.size() * sizeof(T), cudaMemcpyHostToDevice));
    KVQ_CUDA_CHECK(cudaMemcpy(d_v.get(), in.v.data(), in.v.size() * sizeof(T), cudaMemcpyHostToDevice));
    KVQ_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.size() * sizeof(T)));
    KVQ_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    KVQ_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<T> got = d_out.download();
    got.resize(ref.size());
    const OutputError e = output_error(got, ref);
    CHECK_MESSAGE(e.rel_l2 < kRelL2Bound, "replay " << replay << ": rel L2 " << e.rel_l2);
    if (check_rel_max) CHECK_MESSAGE(e.rel_max < kRelMaxBound, "replay " << replay << ": rel max " << e.rel_max);
    check_fa3(got, f64, "replay " + std::to_string(replay));
    if (replay % 2 == 0) REQUIRE(step_both_with(host, dev, counts, in.k, in.v, "graph replay"));
  }
  CHECK(flags.download()[0] == 0u);
  KVQ_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KVQ_CUDA_CHECK(cudaGraphDestroy(graph));
  KVQ_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace kvq_test

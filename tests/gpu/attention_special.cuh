// What the decode and prefill special cases share (test_decode_special.cu,
// test_prefill_special.cu): their fixture and inputs, the call arguments every attention entry
// point checks alike, sequences rejected on the device, and one call captured once in a CUDA
// graph, then replayed with new lengths within its plan.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "decode_check.cuh"

namespace kvq_test {

// A cache of `heads` KV heads whose sequences (one a prompt length) hold their prompts, on the
// host and on the device: block-table rows of `row_pages` pages, `hot_rows` hot rows a sequence,
// hot slots in sequence order or reversed.
template <class Cfg>
struct SpecialFixture {
  kvq::reference::HostCache<Cfg> host;
  DeviceMirror<Cfg> dev;
  KvGenerator gen;
  SpecialFixture(int heads, int row_pages, int hot_rows, const std::vector<int32_t>& prompt, uint64_t seed, bool reversed_slots)
      : host(heads, int64_t(prompt.size()) * row_pages, int(prompt.size()), hot_rows, row_pages, int(prompt.size())),
        gen(heads, Cfg::head_dim, seed) {
    const int batch = int(prompt.size());
    for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = reversed_slots ? batch - 1 - b : b;
    dev.upload(host);
    REQUIRE(step_both(host, dev, prompt, gen, false, "prompt"));
  }
};

// One call's host inputs for `counts` new tokens a sequence (queries, then keys and values, from
// the generator), for `heads` KV heads of `group` query heads each.
template <class T>
struct SpecialInputs {
  std::vector<int32_t> cu;
  std::vector<T> q, k, v;
  kvq::AttentionBatch<T> a;
  template <class Cfg>
  SpecialInputs(kvq::reference::HostCache<Cfg>& host, KvGenerator& gen, const std::vector<int32_t>& counts, int heads,
                int group) {
    cu.assign(counts.size() + 1, 0);
    for (size_t b = 0; b < counts.size(); ++b) cu[b + 1] = cu[b] + counts[b];
    q = make_queries<T>(gen, cu.back(), group);
    k = gen.keys<T>(cu.back());
    v = gen.values<T>(cu.back());
    a = host_attention_batch(host.lengths(), heads * group, cu, q, k, v, Cfg::head_dim);
  }
};

// Runs `call(out, flags)` (one attention call on d's inputs) into poisoned output (0xff bytes):
// the output and the flags word.
template <class T, class Call>
std::pair<std::vector<T>, uint32_t> run_into_poison(DeviceAttention<T>& d, Call&& call) {
  DeviceBuffer<uint32_t> flags(std::vector<uint32_t>{0u});
  KVQ_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, d.out.size() * sizeof(T)));
  REQUIRE(call(d.out.get(), flags.get()) == kvq::Status::kSuccess);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  return {d.out.download(), flags.download()[0]};
}

// Sequences rejected on the device keep their poisoned output, the others are computed. f: four
// sequences; in: their inputs, where sequence 1 asks for more new tokens than the plan allows (the
// caller's). Here sequence 2's first page id is put outside the pool and sequence 3 claims a
// length one page beyond its block-table row (`row_pages`). `call(d, max_tokens, out, flags)`
// plans for max_tokens and runs one call on d. Only sequence 0 is served: its rows must match
// the host reference, no output of the others may be written, and the flags word says so.
template <class Cfg, class Call>
void check_device_rejections(SpecialFixture<Cfg>& f, const SpecialInputs<typename Cfg::dtype>& in, int row_pages,
                             Call&& call) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page;
  REQUIRE(in.cu.size() == 5);
  for (int b = 0; b < 4; ++b) REQUIRE(f.host.reserve(b, in.cu[size_t(b) + 1] - in.cu[size_t(b)]));
  std::vector<float> ref(in.q.size());
  REQUIRE(kvq::reference::attention<Cfg>(f.host.view(), in.a, ref.data()) == kvq::Status::kSuccess);
  f.dev.upload_tables(f.host);
  std::vector<int32_t> table = f.host.block_table;
  table[size_t(2) * row_pages] = int32_t(f.host.view().num_pages) + 3;
  f.dev.block_table.upload(table);
  std::vector<int32_t> lens = f.host.len, colds = f.host.cold_len;
  lens[3] = (row_pages + 1) * P + 5;
  colds[3] = (row_pages + 1) * P;
  DeviceBuffer<int32_t> d_colds(colds);
  DeviceAttention<T> d(in.a, in.cu, in.q, in.k, in.v, d_colds.get());
  d.prefix.upload(lens);
  const int64_t max_tokens = (row_pages + 1) * P + 16;
  const auto [got, flags] = run_into_poison(d, [&](T* out, uint32_t* fl) { return call(d, max_tokens, out, fl); });
  CHECK((flags & kvq::kFlagBadSequence) != 0u);
  const size_t ok_rows = size_t(in.cu[1]) * size_t(in.a.num_q_heads) * Cfg::head_dim;
  const OutputError e =
      output_error(std::vector<T>(got.begin(), got.begin() + std::ptrdiff_t(ok_rows)),
                   std::vector<float>(ref.begin(), ref.begin() + std::ptrdiff_t(ok_rows)));
  CHECK_MESSAGE(e.rel_l2 < kRelL2Bound, "valid sequence 0: rel L2 " << e.rel_l2);
  const size_t written = count_written(got.begin() + std::ptrdiff_t(ok_rows), got.end());
  CHECK_MESSAGE(written == 0, written << " outputs of rejected sequences were written");
}

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

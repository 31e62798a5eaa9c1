// GPU decode attention vs the host reference: random batches (prefixes of every kind: empty,
// inside the window, long), q_len 1..max_q, GQA groups of several sizes, the decode run both
// before the step's append (pages turning cold are quantized on the fly) and after it.
#pragma once

#include <kvq/decode/decode_impl.cuh>
#include <kvq/reference/attention.hpp>

#include <cmath>

#include "append_check.cuh"

namespace kvq_test {

// ||got - ref|| / ||ref|| and max |got - ref| / max |ref| over all outputs.
struct OutputError {
  double rel_l2 = 0, rel_max = 0;
};

template <class T>
OutputError output_error(const std::vector<T>& got, const std::vector<float>& ref) {
  double num = 0, den = 0, mx = 0, refmax = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i].to_float()) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    mx = std::max(mx, std::fabs(d));
    refmax = std::max(refmax, double(std::fabs(ref[i])));
  }
  return OutputError{std::sqrt(num / std::max(den, 1e-30)), mx / std::max(refmax, 1e-30)};
}

template <class Cfg>
void check_decode_random(uint64_t seed, int max_q = 4, int steps = 3) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1 + int(rng() % 2);
  const int groups[] = {1, 2, 3, 4, 5, 8};
  const int group = groups[rng() % 6];
  const int q_heads = heads * group;
  const int residual = P * int(rng() % 3);
  const int batch = 4, max_pages = (D == 256 ? 2048 : 4096) / P + 4, slots = batch + 1;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = (b + 1) % slots;
  KvGenerator gen(heads, D, seed * 31 + 7);
  // Prompts: empty, inside the window, just past it, long.
  const int64_t longest = D == 256 ? 1500 : 3000;
  std::vector<int32_t> prompt{0, int32_t(rng() % (residual + P)), int32_t(residual + P + rng() % (2 * P)),
                              int32_t(longest / 2 + rng() % (longest / 2))};
  std::shuffle(prompt.begin(), prompt.end(), rng);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both(host, dev, prompt, gen, false, "prompt seed " + std::to_string(seed)));

  int sms = 0;
  KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> cu(batch + 1, 0);
    for (int b = 0; b < batch; ++b) cu[size_t(b) + 1] = cu[size_t(b)] + 1 + int32_t(rng() % max_q);
    const int64_t total = cu.back();
    std::vector<T> q = gen.keys<T>(total * group);  // [total][q_heads][D] (same element count)
    std::vector<T> nk = gen.keys<T>(total), nv = gen.values<T>(total);
    q.resize(size_t(total) * q_heads * D);
    for (auto& x : q) x = T::from_float(x.to_float() * 0.1f);
    for (int b = 0; b < batch; ++b) REQUIRE(host.reserve(b, cu[size_t(b) + 1] - cu[size_t(b)]));
    dev.upload_tables(host);

    kvq::AttentionBatch<T> a;
    a.batch = batch;
    a.num_q_heads = q_heads;
    a.lengths = host.lengths();
    a.cu_q = cu.data();
    a.q = q.data();
    a.new_k = nk.data();
    a.new_v = nv.data();
    a.softmax_scale = 1.0f / std::sqrt(float(D));
    a.softcap = (step == 1) ? 30.0f : 0.0f;
    std::vector<float> ref(size_t(total) * q_heads * D);
    REQUIRE(kvq::reference::attention<Cfg>(host.view(), a, ref.data()) == kvq::Status::kSuccess);

    int64_t max_tokens = 0;
    for (int b = 0; b < batch; ++b) max_tokens = std::max<int64_t>(max_tokens, host.len[size_t(b)] + cu[size_t(b) + 1] - cu[size_t(b)]);
    kvq::DecodePlan plan;
    const kvq::DecodeShape shape{batch, q_heads, heads, residual, max_tokens, max_q, total, sms};
    REQUIRE(kvq::plan_decode(shape, D, P, Cfg::record_bytes, &plan) == kvq::Status::kSuccess);
    DeviceBuffer<uint8_t> ws(plan.workspace_bytes);
    DeviceBuffer<int32_t> d_cu(cu);
    DeviceBuffer<T> d_q(q), d_k(nk), d_v(nv), d_out(ref.size());
    DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
    kvq::AttentionBatch<T> da = a;
    da.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
    da.cu_q = d_cu.get();
    da.q = d_q.get();
    da.new_k = d_k.get();
    da.new_v = d_v.get();
    const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step) + " group " +
                              std::to_string(group) + " R " + std::to_string(residual) + " splits " +
                              std::to_string(plan.max_splits);
    // Poisoned output, decode before the append (pages turning cold are quantized on the fly).
    KVQ_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, ref.size() * sizeof(T)));
    REQUIRE(kvq::decode<Cfg>(dev.view(host), da, plan, ws.get(), ws.size(), d_out.get(), d_flags.get(), nullptr) ==
            kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    const OutputError before = output_error(d_out.download(), ref);
    CHECK_MESSAGE(before.rel_l2 < 5e-3, where << " (before append): rel L2 " << before.rel_l2);
    CHECK_MESSAGE(before.rel_max < 2e-2, where << " (before append): rel max " << before.rel_max);

    // The step's append on both sides, then decode again with the new cold lengths: same result.
    std::vector<int32_t> counts(batch);
    for (int b = 0; b < batch; ++b) counts[size_t(b)] = cu[size_t(b) + 1] - cu[size_t(b)];
    std::vector<int32_t> prefix = host.len;
    REQUIRE(step_both_with(host, dev, counts, nk, nv, where));
    DeviceBuffer<int32_t> d_prefix(prefix);
    da.lengths = kvq::SeqLengths{d_prefix.get(), dev.cold_len.get()};
    KVQ_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, ref.size() * sizeof(T)));
    REQUIRE(kvq::decode<Cfg>(dev.view(host), da, plan, ws.get(), ws.size(), d_out.get(), d_flags.get(), nullptr) ==
            kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    const OutputError after = output_error(d_out.download(), ref);
    CHECK_MESSAGE(after.rel_l2 < 5e-3, where << " (after append): rel L2 " << after.rel_l2);
    CHECK_MESSAGE(after.rel_max < 2e-2, where << " (after append): rel max " << after.rel_max);
    CHECK(d_flags.download()[0] == 0u);
  }
}

}  // namespace kvq_test

// Chunked-prefill attention benchmarks for one configuration (issue shape: head dim 128, 32 query
// heads / 8 KV heads, page 64, R 128, batch 1): a chunk of `chunk` new tokens over a prefix of
// `prefix` tokens held by the cache (cold pages + hot ring, as appends alone leave it). The
// attention runs after the chunk's append (cold length after it), as an engine orders them.
// FLOPs counted as the issue defines them: 4 chunk prefix D Hq + 2 chunk^2 D Hq (causal chunk).
#pragma once

#include <kvq/prefill/prefill_impl.cuh>

#include <string>
#include <vector>

#include "bench_cache.cuh"
#include "decode_bench.cuh"

namespace kvq_bench {

// Policy: the kernels' tuning (kvq/prefill/policy.hpp); another policy than the default
// compiles kernels of its own, so a tuning experiment registers its cells beside the default's.
template <class Cfg, class Policy = kvq::PrefillPolicy>
struct PrefillCase {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page, H = 8, HQ = 32, R = 128;

  static double flops(int64_t chunk, int64_t prefix) {
    return 4.0 * double(chunk) * double(prefix) * D * HQ + 2.0 * double(chunk) * double(chunk) * D * HQ;
  }

  // choice: the kernel (detail::plan_prefill_with; {}: the library's choice).
  static void run(benchmark::State& state, int64_t chunk, int64_t prefix, kvq::detail::PrefillChoice choice) {
    const int batch = 1;
    BenchCache<Cfg> c(batch, prefix, int(chunk), chunk / P + 2);
    DecodeCase<Cfg>::fill_pool(c);
    DeviceArray<T> q(BenchCache<Cfg>::random_rows(size_t(chunk) * HQ * D, 5)), out(size_t(chunk) * HQ * D);
    const int64_t cold_after_step = kvq::cold_after(prefix + chunk, c.cold, R, P);
    DeviceArray<int32_t> colds_after{std::vector<int32_t>(size_t(batch), int32_t(cold_after_step))};
    kvq::AttentionBatch<T> a;
    a.batch = batch;
    a.num_q_heads = HQ;
    a.lengths = kvq::SeqLengths{c.lens.ptr, colds_after.ptr};
    a.cu_q = c.cu_new.ptr;
    a.q = q.ptr;
    a.new_k = c.new_k.ptr;
    a.new_v = c.new_v.ptr;
    a.softmax_scale = 1.0f / std::sqrt(float(D));
    kvq::PrefillPlan plan;
    if (kvq::detail::plan_prefill_with<Cfg>(kvq::PrefillShape{batch, HQ, H, R, prefix + chunk, int32_t(chunk), chunk}, &plan,
                                            choice) != kvq::Status::kSuccess) {
      state.SkipWithError("plan failed");
      return;
    }
    DeviceArray<uint8_t> ws(plan.workspace_bytes);
    const int64_t rec_end = std::min<int64_t>(cold_after_step, prefix);
    const double bytes = double(rec_end / P) * H * double(Cfg::record_bytes) +
                         double(prefix - rec_end + chunk) * c.bytes_per_token_row() + 2.0 * chunk * HQ * D * sizeof(T);
    run_timed(state, bytes, [&] {
      if (kvq::prefill<Cfg, Policy>(c.view(), a, plan, ws.ptr, plan.workspace_bytes, out.ptr, c.flags.ptr, nullptr) !=
          kvq::Status::kSuccess)
        state.SkipWithError("prefill failed");
    });
    state.counters["rows_per_cta"] = plan.rows_per_cta;
    state.counters["wgmma"] = plan.kernel == kvq::PrefillKernel::kMmaSync ? 0 : 1;
    state.counters["kernel"] = int(plan.kernel);  // 0 mma.sync, 2 wgmma warp-specialized
    state.counters["tile_tokens"] = plan.tile_tokens;
    state.counters["flops"] = flops(chunk, prefix);
    state.counters["TFLOPs"] = benchmark::Counter(flops(chunk, prefix) * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  }

  // "prefill/": the library's choice (on an sm_90a build with a Hopper GPU the warp-specialized
  // wgmma kernel); where that is the wgmma kernel with tiles of other than 64 tokens ("none"),
  // "prefill_ws64/" runs it with 64-token tiles; "prefill_alt/": the mma.sync kernel (the sm_80
  // path) at the CTA height the library would give it, or where mma.sync is the default, at the
  // other height. name: the format (and for a tuning experiment a tag of its policy:
  // bench/CMakeLists.txt).
  static void register_all(const std::string& name) {
    kvq::PrefillPlan def;
    if (kvq::plan_prefill<Cfg>(kvq::PrefillShape{1, HQ, H, R, 1, 1, 1}, &def) != kvq::Status::kSuccess) return;
    struct Variant {
      const char* prefix;
      kvq::detail::PrefillChoice choice;
    };
    std::vector<Variant> variants{{"prefill/", {}}};
    if (def.kernel != kvq::PrefillKernel::kMmaSync) {
      if (def.tile_tokens != 64) variants.push_back({"prefill_ws64/", {kvq::PrefillKernel::kWgmmaWs, 0, 64}});
      variants.push_back({"prefill_alt/", {kvq::PrefillKernel::kMmaSync, 0, 0}});
    } else {
      variants.push_back({"prefill_alt/", {kvq::PrefillKernel::kMmaSync,
                                           def.rows_per_cta == kvq::kPrefillRowsSmall ? kvq::kPrefillRowsLarge : kvq::kPrefillRowsSmall,
                                           0}});
    }
    for (const Variant& var : variants)
      for (int64_t chunk : {2048, 8192})
        for (int64_t prefix : {0, 30720, 122880})
          benchmark::RegisterBenchmark((std::string(var.prefix) + name + "/chunk:" + std::to_string(chunk) + "/prefix:" +
                                        std::to_string(prefix))
                                           .c_str(),
                                       [=](benchmark::State& s) { run(s, chunk, prefix, var.choice); })
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
  }
};

}  // namespace kvq_bench

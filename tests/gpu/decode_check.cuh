// GPU decode attention vs the host reference: random batches (prefixes of every kind: empty,
// inside the window, long), q_len 1..max_q, GQA groups of several sizes, the decode run both
// before the step's append (pages turning cold are quantized on the fly) and after it, then a
// speculative rollback to a random accepted length (kvq::rollback on the device, HostCache on the
// host). Error judged two ways: against the fp32 host reference (fixed tolerances) and as
// FlashAttention-3 does (against fp64, at most 2x a naive same-precision attention's error, 3x
// with a softcap, plus the model dtype's rounding at the outputs' size).
// Also: constant-key / one-hot-value isolation tests and 128K+ contexts.
#pragma once

#include <kvq/append/rollback.cuh>
#include <kvq/decode/decode_impl.cuh>
#include <kvq/reference/attention.hpp>

#include <cmath>
#include <utility>

#include "append_check.cuh"

namespace kvq_test {

// Sanity bounds against the fp32 host reference. The kernels round P and V to the model dtype
// (as FlashAttention does), so on these outlier-heavy inputs (logits of ~100) a bf16 result is
// ~1e-2 away from fp32; accuracy proper is judged by check_fa3 below.
constexpr double kRelL2Bound = 2e-2, kRelMaxBound = 5e-2;

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

// x rounded to the model dtype T, back in fp32.
template <class T>
float round_to(float x) {
  return T::from_float(x).to_float();
}

// The same attention on the operands the contract defines (reference::attention_operands):
// `exact` in fp64; `naive` in the model dtype T the way a plain implementation computes it
// (K, V, logits and probabilities rounded to T; fp32 sums; output rounded to T).
struct Fp64Attention {
  std::vector<double> exact;
  std::vector<float> naive;
  bool softcapped = false;
};

template <class Cfg>
Fp64Attention fp64_attention(const kvq::CacheView<typename Cfg::dtype>& v, const kvq::AttentionBatch<typename Cfg::dtype>& a) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  auto r = round_to<T>;
  const int group = a.num_q_heads / v.num_kv_heads;
  Fp64Attention out;
  out.softcapped = a.softcap > 0;
  out.exact.assign(size_t(a.cu_q[a.batch]) * a.num_q_heads * D, 0.0);
  out.naive.assign(out.exact.size(), 0.0f);
  std::vector<float> k, val;
  for (int b = 0; b < a.batch; ++b) {
    const kvq::SeqAttention s = kvq::resolve_attention(v, a, b, P);
    for (int h = 0; h < v.num_kv_heads; ++h) {
      kvq::reference::attention_operands<Cfg>(v, a, b, h, k, val);
      std::vector<float> kr(k.size()), vr(val.size());
      for (size_t x = 0; x < k.size(); ++x) {
        kr[x] = r(k[x]);
        vr[x] = r(val[x]);
      }
      for (int j = 0; j < s.q_len; ++j)
        for (int hq = h * group; hq < (h + 1) * group; ++hq) {
          const size_t row = size_t(s.q0 + j) * a.num_q_heads + hq;
          const T* q = a.q + row * D;
          const int64_t n = s.len + j + 1;
          std::vector<double> le(static_cast<size_t>(n));
          std::vector<float> ln(static_cast<size_t>(n));
          double me = -INFINITY;
          float mn = -INFINITY;
          for (int64_t t = 0; t < n; ++t) {
            double de = 0;
            float dn = 0;
            for (int c = 0; c < D; ++c) {
              de += double(q[c].to_float()) * k[size_t(t) * D + c];
              dn += q[c].to_float() * kr[size_t(t) * D + c];
            }
            de *= a.softmax_scale;
            float xn = r(dn) * a.softmax_scale;
            if (a.softcap > 0) {
              de = a.softcap * std::tanh(de / a.softcap);
              xn = a.softcap * std::tanh(xn / a.softcap);
            }
            le[size_t(t)] = de;
            ln[size_t(t)] = xn;
            me = std::max(me, de);
            mn = std::max(mn, xn);
          }
          std::vector<double> oe(D, 0.0);
          std::vector<float> on(D, 0.0f);
          double se = 0;
          float sn = 0;
          for (int64_t t = 0; t < n; ++t) {
            const double pe = std::exp(le[size_t(t)] - me);
            const float pn = r(std::exp(ln[size_t(t)] - mn));
            se += pe;
            sn += pn;
            for (int c = 0; c < D; ++c) {
              oe[size_t(c)] += pe * val[size_t(t) * D + c];
              on[size_t(c)] += pn * vr[size_t(t) * D + c];
            }
          }
          for (int c = 0; c < D; ++c) {
            out.exact[row * D + c] = oe[size_t(c)] / se;
            out.naive[row * D + c] = r(on[size_t(c)] / sn);
          }
        }
    }
  }
  return out;
}

// FlashAttention-3's criterion, as the FlashAttention repository's tests apply it (hopper/ and
// cute/ test_flash_attn.py): the max error against the reference at most rtol times the naive
// same-precision attention's (rtol 2; 3 with a softcap), plus fwd_atol = 2 max |(ref + 0.3 - 0.3) -
// ref| computed in the model dtype, the rounding any arithmetic on outputs of that size costs.
// The reference here is fp64 and not rounded to T (FA3 rounds its fp32 reference to T), so the
// bound is a little tighter than FA3's. Why the rounding allowance matters: on a few hundred
// outputs the naive error is a noisy statistic: in one single-token INT2 prefill case (512
// outputs, softcap 30) the kernels' max error was 2.7x the naive attention's, all of it from
// rounding the dequantized keys to bf16 as designed, while over 706 emulated cases of that
// configuration the median ratio is 0.2x.
template <class T>
void check_fa3(const std::vector<T>& got, const Fp64Attention& f, const std::string& where) {
  auto r = round_to<T>;
  double e_got = 0, e_naive = 0, mx = 0, atol = 0;
  for (size_t x = 0; x < f.exact.size(); ++x) {
    e_got = std::max(e_got, std::fabs(double(got[x].to_float()) - f.exact[x]));
    e_naive = std::max(e_naive, std::fabs(double(f.naive[x]) - f.exact[x]));
    mx = std::max(mx, std::fabs(f.exact[x]));
    const float ref = r(float(f.exact[x]));
    atol = std::max(atol, 2.0 * std::fabs(double(r(r(r(ref + 0.3f) - 0.3f) - ref))));
  }
  const double rtol = f.softcapped ? 3.0 : 2.0;
  CHECK_MESSAGE(e_got <= rtol * e_naive + atol,
                where << ": max error vs fp64 " << e_got << ", naive " << std::string(T::name()) << " " << e_naive << " (x"
                      << rtol << "), rounding allowance " << atol << ", max |out| " << mx);
}

// A host-side attention call over the given host arrays (the softmax scale is 1/sqrt(D)).
template <class T>
kvq::AttentionBatch<T> host_attention_batch(const kvq::SeqLengths& lengths, int q_heads, const std::vector<int32_t>& cu,
                                            const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
                                            int head_dim, float softcap = 0.0f) {
  kvq::AttentionBatch<T> a;
  a.batch = int(cu.size()) - 1;
  a.num_q_heads = q_heads;
  a.lengths = lengths;
  a.cu_q = cu.data();
  a.q = q.data();
  a.new_k = k.data();
  a.new_v = v.data();
  a.softmax_scale = 1.0f / std::sqrt(float(head_dim));
  a.softcap = softcap;
  return a;
}

// Device copies of one attention call's inputs.
template <class T>
struct DeviceAttention {
  DeviceBuffer<int32_t> cu, prefix;
  DeviceBuffer<T> q, k, v, out;
  kvq::AttentionBatch<T> a;

  DeviceAttention(const kvq::AttentionBatch<T>& host_a, const std::vector<int32_t>& cu_h, const std::vector<T>& q_h,
                  const std::vector<T>& k_h, const std::vector<T>& v_h, const int32_t* cold_dev)
      : cu(cu_h), prefix(std::vector<int32_t>(host_a.lengths.len, host_a.lengths.len + host_a.batch)), q(q_h), k(k_h), v(v_h),
        out(q_h.size()), a(host_a) {
    a.lengths = kvq::SeqLengths{prefix.get(), cold_dev};
    a.cu_q = cu.get();
    a.q = q.get();
    a.new_k = k.get();
    a.new_v = v.get();
  }
};

// Runs `launch(workspace, bytes)` (a kvq attention call on d) into poisoned output, twice: the
// result must not change between runs.
template <class T, class Launch>
std::vector<T> run_poisoned_twice(DeviceAttention<T>& d, size_t workspace_bytes, const std::string& where, Launch&& launch) {
  DeviceBuffer<uint8_t> ws(workspace_bytes);
  std::vector<T> first;
  for (int run = 0; run < 2; ++run) {
    KVQ_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, d.out.size() * sizeof(T)));
    REQUIRE(launch(ws.get(), ws.size()) == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    if (run == 0) {
      first = d.out.download();
    } else {
      CHECK_MESSAGE(first_difference(first, d.out.download()) == -1, where << ": a second run gives different bits");
    }
  }
  return first;
}

template <class Cfg, class Policy = kvq::DecodePolicy>
std::vector<typename Cfg::dtype> run_decode(const kvq::CacheView<typename Cfg::dtype>& view, DeviceAttention<typename Cfg::dtype>& d,
                                            const kvq::DecodePlan& plan, uint32_t* flags, const std::string& where) {
  return run_poisoned_twice(d, plan.workspace_bytes, where, [&](void* ws, size_t bytes) {
    return kvq::decode<Cfg, Policy>(view, d.a, plan, ws, bytes, d.out.get(), flags, nullptr);
  });
}

inline int num_sms() {
  int sms = 0;
  KVQ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// Rolls every sequence back to prefix + accepted (a random accepted count, never below the cold
// length) on host and device; then checks the device lengths equal the host's, and that a
// rollback below the cold length is refused on both sides without changing anything.
template <class Cfg>
void rollback_both(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev, const std::vector<int32_t>& prefix,
                   std::mt19937_64& rng, const std::string& where) {
  const int batch = int(prefix.size());
  std::vector<int32_t> want(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    const int32_t len = host.len[size_t(b)], drafted = len - prefix[size_t(b)];
    int32_t accepted = drafted > 0 ? int32_t(rng() % uint64_t(drafted + 1)) : 0;
    want[size_t(b)] = std::max(prefix[size_t(b)] + accepted, host.cold_len[size_t(b)]);
    REQUIRE(host.rollback(b, want[size_t(b)]));
  }
  DeviceBuffer<int32_t> d_want(want);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  REQUIRE(kvq::rollback(dev.len.get(), dev.cold_len.get(), d_want.get(), batch, d_flags.get(), nullptr) == kvq::Status::kSuccess);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK_MESSAGE(dev.len.download() == host.len, where << ": device lengths differ from the host's after rollback");
  CHECK(d_flags.download()[0] == 0u);
  // Below the cold length: refused, nothing changes.
  for (int b = 0; b < batch; ++b) {
    const int32_t cold = host.cold_len[size_t(b)];
    if (cold == 0) continue;
    CHECK_FALSE(host.rollback(b, cold - 1));
    std::vector<int32_t> bad(size_t(batch), -1);
    bad[size_t(b)] = cold - 1;
    DeviceBuffer<int32_t> d_bad(bad);
    REQUIRE(kvq::rollback(dev.len.get(), dev.cold_len.get(), d_bad.get(), batch, d_flags.get(), nullptr) == kvq::Status::kSuccess);
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(dev.len.download() == host.len);
    CHECK(d_flags.download()[0] == uint32_t(kvq::kFlagBadSequence));
    break;
  }
}

// Queries of `rows` tokens x `group` heads per KV head: the key generator's outlier-heavy rows / 10.
template <class T>
std::vector<T> make_queries(KvGenerator& gen, int64_t rows, int group) {
  std::vector<T> q = gen.keys<T>(rows * group);  // [rows][heads * group][D] (same element count)
  for (auto& x : q) x = T::from_float(x.to_float() * 0.1f);
  return q;
}

// One attention step of `counts` new tokens for every sequence of host/dev: `run(view, d, where)`
// runs the kernel under test on the device inputs d; it is checked against the host reference
// before the step's append and after it (same expected result). Returns the outputs.
template <class Cfg, class Run>
std::vector<typename Cfg::dtype> attention_step_and_check(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev,
                                                          const std::vector<int32_t>& counts, int group, float softcap,
                                                          const std::vector<typename Cfg::dtype>& q,
                                                          const std::vector<typename Cfg::dtype>& nk,
                                                          const std::vector<typename Cfg::dtype>& nv, int heads,
                                                          const std::string& where, Run&& run) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  const int batch = int(counts.size()), q_heads = heads * group;
  std::vector<int32_t> cu(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) cu[size_t(b) + 1] = cu[size_t(b)] + counts[size_t(b)];
  const int64_t total = cu.back();
  for (int b = 0; b < batch; ++b) REQUIRE(host.reserve(b, counts[size_t(b)]));
  dev.upload_tables(host);

  const kvq::AttentionBatch<T> a = host_attention_batch(host.lengths(), q_heads, cu, q, nk, nv, D, softcap);
  std::vector<float> ref(size_t(total) * q_heads * D);
  REQUIRE(kvq::reference::attention<Cfg>(host.view(), a, ref.data()) == kvq::Status::kSuccess);
  const Fp64Attention f64 = fp64_attention<Cfg>(host.view(), a);
  DeviceAttention<T> d(a, cu, q, nk, nv, dev.cold_len.get());

  // Sanity bounds: the fixed ones, or twice what the naive same-precision attention misses by
  // (long chunks of outlier-heavy rows put single bf16 outputs further from fp32).
  std::vector<T> naive_t(f64.naive.size());
  for (size_t x = 0; x < naive_t.size(); ++x) naive_t[x] = T::from_float(f64.naive[x]);
  const OutputError en = output_error(naive_t, ref);
  const double l2_bound = std::max(kRelL2Bound, 2 * en.rel_l2), max_bound = std::max(kRelMaxBound, 2 * en.rel_max);
  auto judge = [&](const std::vector<T>& got, const std::string& w) {
    const OutputError e = output_error(got, ref);
    CHECK_MESSAGE(e.rel_l2 < l2_bound, w << ": rel L2 " << e.rel_l2 << " (naive " << en.rel_l2 << ")");
    CHECK_MESSAGE(e.rel_max < max_bound, w << ": rel max " << e.rel_max << " (naive " << en.rel_max << ")");
    check_fa3(got, f64, w);
  };
  // Before the append (pages turning cold are quantized on the fly).
  judge(run(dev.view(host), d, where + " (before append)"), where + " (before append)");
  // The step's append on both sides, then again with the new cold lengths: same result.
  REQUIRE(step_both_with(host, dev, counts, nk, nv, where));
  const std::vector<T> after = run(dev.view(host), d, where + " (after append)");
  judge(after, where + " (after append)");
  return after;
}

// One decode step of `counts` new tokens for every sequence of host/dev, checked before and
// after the append; the draft is then partially rejected (rollback). Policy: the decode's tuning.
template <class Cfg, class Policy = kvq::DecodePolicy>
void decode_step_and_check(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev, KvGenerator& gen,
                           const std::vector<int32_t>& counts, int group, int max_q, float softcap, std::mt19937_64& rng,
                           const std::string& where_base, const std::vector<typename Cfg::dtype>* k_rows = nullptr,
                           const std::vector<typename Cfg::dtype>* v_rows = nullptr, int plan_sms = 0,
                           int64_t plan_tokens = 0) {
  using T = typename Cfg::dtype;
  const int batch = int(counts.size()), heads = gen.heads, q_heads = heads * group;
  int64_t total = 0, max_tokens = 0;
  for (int b = 0; b < batch; ++b) {
    total += counts[size_t(b)];
    max_tokens = std::max<int64_t>(max_tokens, host.len[size_t(b)] + counts[size_t(b)]);
  }
  const std::vector<T> q = make_queries<T>(gen, total, group);
  const std::vector<T> nk = k_rows ? *k_rows : gen.keys<T>(total), nv = v_rows ? *v_rows : gen.values<T>(total);
  kvq::DecodePlan plan;
  // plan_tokens: a looser bound on len + q_len to plan for (a plan serves any batch within its bounds).
  const kvq::DecodeShape shape{batch, q_heads, heads, host.view().residual, std::max(max_tokens, plan_tokens), max_q, total,
                               plan_sms > 0 ? plan_sms : num_sms()};
  REQUIRE(kvq::plan_decode<Cfg, Policy>(shape, &plan) == kvq::Status::kSuccess);
  // Half the steps run the tail beside the records kernel in a few CTAs (its dependent launch,
  // plan.hpp) whatever the planner chose, so both tail modes meet the reference; and half the steps
  // give a tail slot a random span of chunks (fewer slots than planned: the workspace holds them).
  if (plan.tail_ctas == 0 && rng() % 2) plan.tail_ctas = 1 + int32_t(rng() % 7);
  if (rng() % 2) {
    plan.tail_span = std::max<int32_t>(plan.tail_span, 1 + int32_t(rng() % uint32_t(plan.tail_chunks)));
    plan.tail_slots = (plan.tail_chunks + plan.tail_span - 1) / plan.tail_span;
  }
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  const std::string where = where_base + " group " + std::to_string(group) + " max_q " + std::to_string(max_q) +
                            " rows_per_cta " + std::to_string(plan.rows_per_cta) + " splits " + std::to_string(plan.max_splits) +
                            " split_tokens " + std::to_string(plan.split_tokens) +
                            " tail_ctas " + std::to_string(plan.tail_ctas) + " tail_span " + std::to_string(plan.tail_span);
  const std::vector<int32_t> prefix = host.len;
  attention_step_and_check<Cfg>(host, dev, counts, group, softcap, q, nk, nv, heads, where,
                                [&](const kvq::CacheView<T>& view, DeviceAttention<T>& d, const std::string& w) {
                                  return run_decode<Cfg, Policy>(view, d, plan, d_flags.get(), w);
                                });
  CHECK(d_flags.download()[0] == 0u);
  rollback_both(host, dev, prefix, rng, where);
}

template <class Cfg, class Policy = kvq::DecodePolicy>
void check_decode_random(uint64_t seed, int max_q = 4, int steps = 3) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1 + int(rng() % 2);
  const int groups[] = {1, 2, 3, 4, 5, 8, 16};
  const int group = groups[rng() % 7];
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
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> counts(batch);
    for (int b = 0; b < batch; ++b) counts[size_t(b)] = 1 + int32_t(rng() % max_q);
    // Odd steps plan for up to 131,072 tokens a sequence (most splits empty; with more than 16
    // rows "none" then takes the many-row kernel).
    decode_step_and_check<Cfg, Policy>(host, dev, gen, counts, group, max_q, step == 1 ? 30.0f : 0.0f, rng,
                                       "seed " + std::to_string(seed) + " step " + std::to_string(step) + " R " +
                                           std::to_string(residual),
                                       nullptr, nullptr, 0, step % 2 ? kvq::kDecodeManyRowsMinTokens : 0);
  }
}

// 128K+ context: one sequence of 131,072 + 517 tokens beside a short one; q_len up to `max_q`.
template <class Cfg>
void check_decode_long(uint64_t seed, int group, int max_q) {
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1, residual = 2 * P, batch = 2;
  const int32_t long_len = 131072 + 517;
  const int max_pages = long_len / P + 8;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, batch, residual, max_pages, batch);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = b;
  KvGenerator gen(heads, D, seed);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both(host, dev, {long_len, 1000}, gen, false, "long prompt"));
  for (int step = 0; step < 2; ++step)
    decode_step_and_check<Cfg>(host, dev, gen, {step == 0 ? max_q : 1, 1 + int32_t(rng() % max_q)}, group, max_q, 0.0f, rng,
                               "long context step " + std::to_string(step));
}

// Over 1M tokens: one sequence of 2^20 + 777 tokens in a batch with an empty prefix and a short
// one (the issue's "batches mixing lengths from 0 to over 1M tokens"); q_len up to 16 with a GQA
// group of 2 (up to 32 rows: two row tiles), before and after the append, then rollback.
template <class Cfg>
void check_decode_million(uint64_t seed) {
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1, group = 2, residual = 2 * P, batch = 3;
  const int32_t long_len = (1 << 20) + 777;
  const int max_pages = long_len / P + 8;
  const int64_t pool_pages = max_pages + 3000 / P + 16;  // the long sequence's pages and the short one's
  kvq::reference::HostCache<Cfg> host(heads, pool_pages, batch, residual, max_pages, batch);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = (b + 2) % batch;
  KvGenerator gen(heads, D, seed);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both(host, dev, {0, long_len, 3000}, gen, false, "1M prompt"));
  decode_step_and_check<Cfg>(host, dev, gen, {16, 16, 1}, group, 16, 0.0f, rng, "1M context step 0");
  decode_step_and_check<Cfg>(host, dev, gen, {1, 1 + int32_t(rng() % 16), 5}, group, 16, 0.0f, rng, "1M context step 1");
}

// Many slots per query row: one sequence of 300,000 tokens, one KV head, planned as if for a
// 300-multiprocessor GPU so that the split count (1,172 splits of kDecodeSplitMinPages pages at
// page 64) takes the merge kernel many passes (kMergeBatch slots a thread), whatever GPU runs it.
template <class Cfg>
void check_decode_many_slots(uint64_t seed) {
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1, residual = P, batch = 1;
  const int32_t len = 300000;
  const int max_pages = len / P + 8;
  kvq::reference::HostCache<Cfg> host(heads, max_pages, batch, residual, max_pages, batch);
  host.hot_slot[0] = 0;
  KvGenerator gen(heads, D, seed);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both(host, dev, {len}, gen, false, "many-slots prompt"));
  decode_step_and_check<Cfg>(host, dev, gen, {2}, 2, 2, 0.0f, rng, "many slots", nullptr, nullptr, 300);
}

// Query row qr's softmax attention over operand rows [0, n) of k and val (the reference's fp32
// operands, [n][D]), added into o in fp64 and into on as a plain same-precision attention computes
// it (probabilities and values rounded to T, the output rounded to T). The isolation tests of
// decode and prefill (prefill_check.cuh) share it.
template <class T>
void attend_row(const T* qr, const std::vector<float>& k, const std::vector<float>& val, int64_t n, int D, float softmax_scale,
                double* o, double* on) {
  auto rt = [](double x) { return double(T::from_float(float(x)).to_float()); };
  std::vector<double> lg(static_cast<size_t>(n));
  double mx = -INFINITY, sum = 0, sum_naive = 0;
  for (int64_t t = 0; t < n; ++t) {
    double dot = 0;
    for (int c = 0; c < D; ++c) dot += double(qr[c].to_float()) * k[size_t(t) * D + c];
    lg[size_t(t)] = dot * softmax_scale;
    mx = std::max(mx, lg[size_t(t)]);
  }
  for (int64_t t = 0; t < n; ++t) {
    sum += std::exp(lg[size_t(t)] - mx);
    sum_naive += rt(std::exp(lg[size_t(t)] - mx));
  }
  for (int64_t t = 0; t < n; ++t)
    for (int c = 0; c < D; ++c) {
      o[c] += std::exp(lg[size_t(t)] - mx) / sum * val[size_t(t) * D + c];
      on[c] += rt(std::exp(lg[size_t(t)] - mx)) * rt(val[size_t(t) * D + c]);
    }
  for (int c = 0; c < D; ++c) on[c] = rt(on[c] / sum_naive);
}

// The largest |want| and the largest error of the naive attention against it.
inline std::pair<double, double> largest_output_and_naive_error(const std::vector<double>& want, const std::vector<double>& naive) {
  double mx = 0, e_naive = 0;
  for (size_t x = 0; x < want.size(); ++x) {
    mx = std::max(mx, std::fabs(want[x]));
    e_naive = std::max(e_naive, std::fabs(naive[x] - want[x]));
  }
  return {mx, e_naive};
}

// Isolation of the two halves of the kernel (prompt then one decode step of q_len 1..max_q, GQA
// group 4: max_q 4 keeps the rows within the records kernel's 16; max_q 16 takes the many-row kernel where
// the configuration has one ("none" in both roles), else 4 or 8 row tiles of the records kernel):
//  constant keys: every logit is equal, so the output must be the mean of the values as the cache
//    holds them (tests the value path alone);
//  one-hot values: token t's value is e_(7t mod D), so output channel c is the sum of the
//    probabilities of the tokens pointing at c (tests the key path and the softmax alone).
// Expected outputs are computed directly from those definitions in fp64; error per element
// at most 1 % of the expected value plus 0.2 % of the largest output.
enum class Isolation { kConstantKeys, kOneHotValues };

template <class Cfg>
void check_decode_isolation(uint64_t seed, Isolation kind, int max_q = 4) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1, group = 4, residual = P, batch = 2;
  const int max_pages = 2048 / P + 4;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, batch, residual, max_pages, batch);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = b;
  KvGenerator gen(heads, D, seed);
  std::vector<float> kconst(D);
  for (auto& x : kconst) x = (rng() & 1) ? 0.5f : -0.5f;  // exact in every format
  int64_t next_t = 0;
  auto rows = [&](int64_t n, bool key) {
    std::vector<T> out = key ? gen.keys<T>(n) : gen.values<T>(n);
    for (int64_t r = 0; r < n; ++r, next_t += key ? 0 : 1)
      for (int c = 0; c < D; ++c) {
        if (key && kind == Isolation::kConstantKeys) out[size_t(r) * D + c] = T::from_float(kconst[size_t(c)]);
        if (!key && kind == Isolation::kOneHotValues) out[size_t(r) * D + c] = T::from_float(c == (7 * next_t) % D ? 1.0f : 0.0f);
      }
    return out;
  };
  // Values of consecutive rows get consecutive t: prompt rows of sequence 0 then 1, then the step's.
  const std::vector<int32_t> prompt{int32_t(700 + rng() % P), 37};
  std::vector<T> pk = rows(prompt[0] + prompt[1], true), pv = rows(prompt[0] + prompt[1], false);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both_with(host, dev, prompt, pk, pv, "isolation prompt"));
  const std::vector<int32_t> counts{1 + int32_t(rng() % max_q), 1 + int32_t(rng() % max_q)};
  const int64_t total = counts[0] + counts[1];
  const std::vector<T> nk = rows(total, true), nv = rows(total, false);

  std::vector<int32_t> cu{0, counts[0], counts[0] + counts[1]};
  // Gaussian queries (no outlier channels): logits of order 10, so probabilities are spread.
  std::vector<T> q = gen.values<T>(total * group);
  for (auto& x : q) x = T::from_float(x.to_float() * 0.5f);
  for (int b = 0; b < batch; ++b) REQUIRE(host.reserve(b, counts[size_t(b)]));
  dev.upload_tables(host);
  const kvq::AttentionBatch<T> a = host_attention_batch(host.lengths(), group, cu, q, nk, nv, D);

  // Expected, from the definitions; `naive` is the same in the model dtype (values and
  // probabilities rounded to T, fp32 sums), as a plain same-precision attention computes it.
  auto rt = [](double x) { return double(T::from_float(float(x)).to_float()); };
  std::vector<double> want(size_t(total) * group * D, 0.0), naive(want.size(), 0.0);
  std::vector<float> k, val;
  for (int b = 0; b < batch; ++b) {
    kvq::reference::attention_operands<Cfg>(host.view(), a, b, 0, k, val);
    for (int j = 0; j < counts[size_t(b)]; ++j)
      for (int hq = 0; hq < group; ++hq) {
        const int64_t n = host.len[size_t(b)] + j + 1;
        double* o = &want[(size_t(cu[size_t(b)] + j) * group + hq) * D];
        double* on = &naive[(size_t(cu[size_t(b)] + j) * group + hq) * D];
        if (kind == Isolation::kConstantKeys) {
          for (int64_t t = 0; t < n; ++t)
            for (int c = 0; c < D; ++c) {
              o[c] += double(val[size_t(t) * D + c]) / double(n);
              on[c] += float(rt(val[size_t(t) * D + c]));
            }
          for (int c = 0; c < D; ++c) on[c] = rt(float(on[c]) / float(n));
        } else {
          // val: the dequantized one-hot rows (exact zeros elsewhere)
          attend_row(&q[(size_t(cu[size_t(b)] + j) * group + hq) * D], k, val, n, D, a.softmax_scale, o, on);
        }
      }
  }
  // max_q 16 plans for up to 131,072 tokens a sequence (an upper bound: most splits are empty), so
  // that "none" takes the many-row kernel (decode_rows_per_cta).
  const int64_t plan_tokens = max_q > 4 ? std::max<int64_t>(host.len[0] + max_q, kvq::kDecodeManyRowsMinTokens) : host.len[0] + max_q;
  kvq::DecodePlan plan;
  REQUIRE(kvq::plan_decode<Cfg>(kvq::DecodeShape{batch, group, heads, residual, plan_tokens, max_q, total, num_sms()}, &plan) ==
          kvq::Status::kSuccess);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  DeviceAttention<T> d(a, cu, q, nk, nv, dev.cold_len.get());
  const std::string where = std::string(kind == Isolation::kConstantKeys ? "constant keys" : "one-hot values") + ", q_len " +
                            std::to_string(counts[0]) + " and " + std::to_string(counts[1]);
  const std::vector<T> got = run_decode<Cfg>(dev.view(host), d, plan, d_flags.get(), where);
  // Allowed per output: 1 % of the expected value + 0.2 % of the largest output + twice the
  // naive same-precision attention's largest error (the kernel rounds V and P to T as it does).
  const std::pair<double, double> scale = largest_output_and_naive_error(want, naive);
  const double mx = scale.first, e_naive = scale.second;
  size_t bad = 0, first_bad = 0;
  for (size_t x = 0; x < want.size(); ++x)
    if (std::fabs(got[x].to_float() - want[x]) > 0.01 * std::fabs(want[x]) + 2e-3 * mx + 2 * e_naive && bad++ == 0)
      first_bad = x;
  CHECK_MESSAGE(bad == 0, where << ": " << bad << " of " << want.size() << " outputs off; first at " << first_bad << ": "
                                << got[first_bad].to_float() << " vs " << want[first_bad] << " (naive " << std::string(T::name())
                                << " " << naive[first_bad] << ", its largest error " << e_naive << ", max |out| " << mx << ")");
  CHECK(d_flags.download()[0] == 0u);
}

// ---- attention sinks (CacheView::sinks: tokens [0, sinks) never read from a record) ----

// Whether a configuration takes sinks ("none" in both roles refuses them: check_sinks).
template <class Cfg>
constexpr bool sinks_allowed() {
  return !(Cfg::k_quant::kind == kvq::QuantKind::kNone && Cfg::v_quant::kind == kvq::QuantKind::kNone);
}
// The most sinks a view of Cfg keeps: 16, fewer than the page.
template <class Cfg>
constexpr int most_sinks() {
  return Cfg::page - 1 < kvq::kMaxSinks ? Cfg::page - 1 : kvq::kMaxSinks;
}

// Random decode steps of a cache keeping `sinks` sink tokens (key groups by `clip`), R =
// `residual_pages` pages, against the host reference (decode_step_and_check: before and after the
// step's append, both tail modes, then a rollback). Six sequences in permuted hot slots (so sink
// rows too): an empty prefix; one inside the window that gets no cold page in the first step
// (its sink tokens are ring rows); R + P - 1 tokens, so that page 0 turns cold inside the first
// call (sink tokens read from the ring before the append, from the sink rows after it); one of
// fewer than `sinks` tokens (with R 0 at page 16, whose page 0 then turns cold in the first call:
// records_end below sinks, every record token a sink); one past the window (page 0 cold: sink
// rows); one long (many splits). q_len 1..max_q; the second step with a softcap.
template <class Cfg>
void check_decode_sinks(uint64_t seed, int sinks, kvq::KeyClip clip, int max_q, int residual_pages, int steps = 2) {
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 2;
  const int groups[] = {1, 2, 4, 8};
  const int group = groups[rng() % 4];
  const int residual = P * residual_pages, window = residual + P;
  const int batch = 6, max_pages = 2048 / P + 4, slots = batch + 2;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, clip) == kvq::Status::kSuccess);
  std::vector<int32_t> perm(static_cast<size_t>(slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = perm[size_t(b)];
  KvGenerator gen(heads, D, seed * 31 + 11);
  const int inside = window / 2;  // + at most window - 1 - inside new tokens in the first step: no cold page
  const std::vector<int32_t> prompt{0,
                                    inside,
                                    window - 1,
                                    sinks / 2,
                                    int32_t(window + 1 + rng() % (2 * P)),
                                    int32_t(700 + rng() % (3 * P))};
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  const std::string base = "sinks " + std::to_string(sinks) + (clip == kvq::KeyClip::kMse ? " mse" : " minmax") + " seed " +
                           std::to_string(seed) + " R " + std::to_string(residual);
  REQUIRE(step_both(host, dev, prompt, gen, false, base + " prompt"));
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> counts(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) counts[size_t(b)] = 1 + int32_t(rng() % max_q);
    if (step == 0) {
      counts[1] = 1 + int32_t(rng() % std::min(max_q, window - 1 - inside));
      const int32_t turn = window - prompt[3];  // page 0 of the short sequence turns cold in this call
      if (turn <= max_q) counts[3] = turn;
    }
    decode_step_and_check<Cfg>(host, dev, gen, counts, group, max_q, step == 1 ? 30.0f : 0.0f, rng,
                               base + " step " + std::to_string(step));
  }
}

// Isolation with sinks (prompt, then one call of q_len 1..max_q per sequence, GQA group 4, two KV
// heads, R = P, hot slots rotated; every prompt at least `sinks` tokens: one inside the window
// (no cold page), R + P - 1 (page 0 turning cold in the call), one past the window and a long
// one), run before and after the step's append, each output compared bit for bit:
//  kSpike: the last sink token's key is 32 x the (shared) query direction, every other key a
//    constant +-0.5 pattern: its logit exceeds the others by more than 240, every other weight
//    underflows to 0, so each output row is that token's value as stored (random values), exactly;
//  kCount: zero queries (every logit 0, every weight exactly 1), small integer values on the sink
//    tokens and zeros elsewhere: each output is (sum of the sink values) / tokens seen, exactly,
//    which holds only if every sink token is counted once, at its unquantized value.
// The host reference must give the same (a check of the construction).
enum class DecodeSinkIsolation { kSpike, kCount };

template <class Cfg>
void check_decode_sink_isolation(uint64_t seed, int sinks, kvq::KeyClip clip, int max_q, DecodeSinkIsolation kind) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 2, group = 4, residual = P, window = residual + P, batch = 4, slots = batch + 1;
  const int max_pages = 2048 / P + 4;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, clip) == kvq::Status::kSuccess);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = (b + 2) % slots;
  KvGenerator gen(heads, D, seed);
  const int spike = sinks - 1;
  std::vector<float> qdir(D), kconst(D);
  for (int c = 0; c < D; ++c) {
    qdir[size_t(c)] = kind == DecodeSinkIsolation::kSpike ? ((rng() & 1) ? 1.0f : -1.0f) : 0.0f;
    kconst[size_t(c)] = (rng() & 1) ? 0.5f : -0.5f;
  }
  const std::vector<int32_t> prompt{int32_t(sinks + rng() % (window - max_q - sinks)), window - 1,
                                    int32_t(window + 3 + rng() % P), int32_t(600 + rng() % P)};
  const std::vector<int32_t> counts{1 + int32_t(rng() % max_q), 1 + int32_t(rng() % max_q), 1 + int32_t(rng() % max_q),
                                    1 + int32_t(rng() % max_q)};
  // Rows of `n` tokens of one sequence from token t0 on: [n][heads][D] keys and values.
  auto make_rows = [&](int64_t t0, int64_t n, std::vector<T>& k, std::vector<T>& v) {
    const std::vector<T> gk = gen.keys<T>(n), gv = gen.values<T>(n);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = t0 + r;
      for (int h = 0; h < heads; ++h)
        for (int c = 0; c < D; ++c) {
          const size_t x = (size_t(r) * heads + size_t(h)) * D + size_t(c);
          float key = gk[x].to_float(), value = gv[x].to_float();
          if (kind == DecodeSinkIsolation::kSpike) {
            key = t == spike ? 32.0f * qdir[size_t(c)] : kconst[size_t(c)];
          } else {
            value = t < sinks ? float(int((t * 7 + c * 3 + h) % 9) - 4) : 0.0f;
          }
          k.push_back(T::from_float(key));
          v.push_back(T::from_float(value));
        }
    }
  };
  std::vector<T> pk, pv, nk, nv;
  for (int b = 0; b < batch; ++b) make_rows(0, prompt[size_t(b)], pk, pv);
  for (int b = 0; b < batch; ++b) make_rows(prompt[size_t(b)], counts[size_t(b)], nk, nv);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both_with(host, dev, prompt, pk, pv, "sink isolation prompt"));

  std::vector<int32_t> cu{0}, pcu{0};
  for (int b = 0; b < batch; ++b) {
    cu.push_back(cu.back() + counts[size_t(b)]);
    pcu.push_back(pcu.back() + prompt[size_t(b)]);
  }
  const int64_t total = cu.back();
  std::vector<T> q(size_t(total) * heads * group * D);
  for (size_t x = 0; x < q.size(); ++x) q[x] = T::from_float(qdir[x % D]);
  for (int b = 0; b < batch; ++b) REQUIRE(host.reserve(b, counts[size_t(b)]));
  dev.upload_tables(host);
  const kvq::AttentionBatch<T> a = host_attention_batch(host.lengths(), heads * group, cu, q, nk, nv, D);

  // Expected outputs, in the model dtype.
  std::vector<T> want(q.size());
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < counts[size_t(b)]; ++j)
      for (int hq = 0; hq < heads * group; ++hq) {
        const int h = hq / group;
        const int64_t seen = prompt[size_t(b)] + j + 1;
        for (int c = 0; c < D; ++c) {
          float x = 0.0f;
          if (kind == DecodeSinkIsolation::kSpike) {
            x = pv[(size_t(pcu[size_t(b)] + spike) * heads + size_t(h)) * D + size_t(c)].to_float();
          } else {
            float sum = 0.0f;
            for (int t = 0; t < sinks; ++t) sum += pv[(size_t(pcu[size_t(b)] + t) * heads + size_t(h)) * D + size_t(c)].to_float();
            x = sum / float(seen);
          }
          want[(size_t(cu[size_t(b)] + j) * heads * group + size_t(hq)) * D + size_t(c)] = T::from_float(x);
        }
      }
  const std::string where = std::string(kind == DecodeSinkIsolation::kSpike ? "sink spike" : "sink count") + ", sinks " +
                            std::to_string(sinks) + ", q_len up to " + std::to_string(max_q);
  auto compare = [&](const std::vector<T>& got, const std::string& w) {
    size_t bad = 0, first_bad = 0;
    for (size_t x = 0; x < want.size(); ++x)
      if (got[x].bits != want[x].bits && bad++ == 0) first_bad = x;
    CHECK_MESSAGE(bad == 0, w << ": " << bad << " of " << want.size() << " outputs differ; first at " << first_bad << " (row "
                              << first_bad / D << "): " << got[first_bad].to_float() << " vs " << want[first_bad].to_float());
  };
  std::vector<float> ref(want.size());
  REQUIRE(kvq::reference::attention<Cfg>(host.view(), a, ref.data()) == kvq::Status::kSuccess);
  std::vector<T> ref_t(ref.size());
  for (size_t x = 0; x < ref.size(); ++x) ref_t[x] = T::from_float(ref[x]);
  compare(ref_t, where + " (host reference)");

  kvq::DecodePlan plan;
  REQUIRE(kvq::plan_decode<Cfg>(kvq::DecodeShape{batch, heads * group, heads, residual, prompt.back() + max_q, max_q, total,
                                                 num_sms()},
                                &plan) == kvq::Status::kSuccess);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  DeviceAttention<T> d(a, cu, q, nk, nv, dev.cold_len.get());
  compare(run_decode<Cfg>(dev.view(host), d, plan, d_flags.get(), where), where + " (before append)");
  REQUIRE(step_both_with(host, dev, counts, nk, nv, where));
  compare(run_decode<Cfg>(dev.view(host), d, plan, d_flags.get(), where), where + " (after append)");
  CHECK(d_flags.download()[0] == 0u);
}

}  // namespace kvq_test

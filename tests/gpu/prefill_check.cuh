// GPU chunked-prefill attention vs the host reference: prompts split into random chunks (chunks
// of 1 token, chunks that start and end inside pages, prefixes of 0 tokens and of 64K+), GQA
// groups of several sizes, each chunk checked before and after its append (FlashAttention-3
// criterion against fp64, sanity bounds against the fp32 host reference, identical bits on a
// second run into poisoned output). After the schedule the device cache must equal, byte for
// byte, the cache of a one-shot prefill of the same prompts.
#pragma once

#include <kvq/prefill/prefill_impl.cuh>

#include "decode_check.cuh"

namespace kvq_test {

// The prefill kernel the checks plan for (kAuto: the library's choice, the wgmma kernel on an
// sm_90a build with a Hopper GPU); a test case that covers another one sets it for its scope.
inline kvq::detail::PrefillChoice& prefill_choice() {
  static kvq::detail::PrefillChoice c;
  return c;
}
struct ScopedPrefillChoice {
  kvq::detail::PrefillChoice saved;
  ScopedPrefillChoice(kvq::PrefillKernel kernel, int tile_tokens) : saved(prefill_choice()) {
    prefill_choice() = kvq::detail::PrefillChoice{kernel, 0, tile_tokens};
  }
  ~ScopedPrefillChoice() { prefill_choice() = saved; }
};
template <class Cfg>
kvq::Status plan_prefill_as_chosen(const kvq::PrefillShape& shape, kvq::PrefillPlan* plan) {
  return kvq::detail::plan_prefill_with<Cfg>(shape, plan, prefill_choice());
}

// Runs kvq::prefill into poisoned output, twice (the same bits both times).
template <class Cfg, class Policy = kvq::PrefillPolicy>
std::vector<typename Cfg::dtype> run_prefill(const kvq::CacheView<typename Cfg::dtype>& view, DeviceAttention<typename Cfg::dtype>& d,
                                             const kvq::PrefillPlan& plan, uint32_t* flags, const std::string& where) {
  return run_poisoned_twice(d, plan.workspace_bytes, where, [&](void* ws, size_t bytes) {
    return kvq::prefill<Cfg, Policy>(view, d.a, plan, ws, bytes, d.out.get(), flags, nullptr);
  });
}

// One chunk per sequence (counts[b] tokens, rows taken from each prompt at offset done[b]).
template <class Cfg, class Policy = kvq::PrefillPolicy>
std::vector<typename Cfg::dtype> prefill_step_and_check(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev,
                                                        const std::vector<std::vector<typename Cfg::dtype>>& pk,
                                                        const std::vector<std::vector<typename Cfg::dtype>>& pv,
                                                        const std::vector<int64_t>& done, const std::vector<int32_t>& counts,
                                                        const std::vector<typename Cfg::dtype>& q, int heads, int group,
                                                        float softcap, const std::string& where_base) {
  using T = typename Cfg::dtype;
  const size_t row = size_t(heads) * Cfg::head_dim;
  const int batch = int(counts.size());
  std::vector<T> nk, nv;
  int64_t total = 0, max_tokens = 0;
  int32_t max_q = 1;
  for (int b = 0; b < batch; ++b) {
    const size_t at = size_t(done[size_t(b)]) * row, n = size_t(counts[size_t(b)]) * row;
    nk.insert(nk.end(), pk[size_t(b)].begin() + at, pk[size_t(b)].begin() + at + n);
    nv.insert(nv.end(), pv[size_t(b)].begin() + at, pv[size_t(b)].begin() + at + n);
    total += counts[size_t(b)];
    max_q = std::max(max_q, counts[size_t(b)]);
    max_tokens = std::max<int64_t>(max_tokens, host.len[size_t(b)] + counts[size_t(b)]);
  }
  kvq::PrefillPlan plan;
  const kvq::PrefillShape shape{batch, heads * group, heads, host.view().residual, max_tokens, max_q, total};
  REQUIRE(plan_prefill_as_chosen<Cfg>(shape, &plan) == kvq::Status::kSuccess);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  const std::string where = where_base + " group " + std::to_string(group) + " max chunk " + std::to_string(max_q);
  std::vector<T> out = attention_step_and_check<Cfg>(host, dev, counts, group, softcap, q, nk, nv, heads, where,
                                                     [&](const kvq::CacheView<T>& view, DeviceAttention<T>& d, const std::string& w) {
                                                       return run_prefill<Cfg, Policy>(view, d, plan, d_flags.get(), w);
                                                     });
  CHECK(d_flags.download()[0] == 0u);
  return out;
}

// A random chunk schedule over 3 prompts (one inside the window, one of one to four pages, one
// long), then the comparisons with a one-shot prefill (cache bytes, outputs). Policy: the
// prefill's tuning. sinks / key_clip: the caches' encoding (HostCache::set_encoding; attention
// sinks need a quantized configuration).
template <class Cfg, class Policy = kvq::PrefillPolicy>
void check_prefill_schedule(uint64_t seed, int sinks = 0, kvq::KeyClip key_clip = kvq::KeyClip::kMinMax) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  std::mt19937_64 rng(seed);
  const int heads = 1 + int(rng() % 2);
  const int groups[] = {1, 2, 3, 4, 5, 8, 16};
  const int group = groups[rng() % 7];
  const int residual = P * int(rng() % 3);
  const int batch = 3, longest = D == 256 ? 700 : 1400;
  const int max_pages = longest / P + 8, slots = batch + 1;
  std::vector<int64_t> prompt{int64_t(1 + rng() % (residual + P)), int64_t(P + 1 + rng() % (3 * P)),
                              int64_t(longest / 2 + rng() % (longest / 2))};
  std::shuffle(prompt.begin(), prompt.end(), rng);
  KvGenerator gen(heads, D, seed * 131 + 5);
  std::vector<std::vector<T>> pk(batch), pv(batch);
  for (int b = 0; b < batch; ++b) {
    pk[size_t(b)] = gen.keys<T>(prompt[size_t(b)]);
    pv[size_t(b)] = gen.values<T>(prompt[size_t(b)]);
  }
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = (b + 2) % slots;
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  const std::string base = "seed " + std::to_string(seed) + " R " + std::to_string(residual) + " heads " + std::to_string(heads) +
                           (sinks ? " sinks " + std::to_string(sinks) : std::string()) +
                           (key_clip == kvq::KeyClip::kMse ? " key clip MSE" : "");

  // Chunked: each step gives every sequence a chunk of 1 token, up to a page, up to 3 pages or
  // up to 500 tokens (the first step of sequence 0 is always a single token).
  std::vector<int64_t> done(batch, 0);
  std::vector<std::vector<T>> chunked(batch), queries(batch);  // outputs and queries per sequence, in token order
  const float softcap = seed % 2 ? 30.0f : 0.0f;
  for (int step = 0; done != prompt; ++step) {
    std::vector<int32_t> counts(batch);
    for (int b = 0; b < batch; ++b) {
      const int kind = step == 0 && b == 0 ? 0 : int(rng() % 4);
      const int64_t want = kind == 0 ? 1 : kind == 1 ? 1 + rng() % P : kind == 2 ? 1 + rng() % (3 * P) : 1 + rng() % 500;
      counts[size_t(b)] = int32_t(std::min(want, prompt[size_t(b)] - done[size_t(b)]));
    }
    int64_t total = 0;
    for (int32_t c : counts) total += c;
    const std::vector<T> q = make_queries<T>(gen, total, group);
    const std::vector<T> out = prefill_step_and_check<Cfg, Policy>(host, dev, pk, pv, done, counts, q, heads, group, softcap,
                                                                   base + " step " + std::to_string(step));
    size_t at = 0;
    for (int b = 0; b < batch; ++b) {
      const size_t n = size_t(counts[size_t(b)]) * heads * group * D;
      chunked[size_t(b)].insert(chunked[size_t(b)].end(), out.begin() + at, out.begin() + at + n);
      queries[size_t(b)].insert(queries[size_t(b)].end(), q.begin() + at, q.begin() + at + n);
      at += n;
      done[size_t(b)] += counts[size_t(b)];
    }
  }

  // One-shot prefill of the same prompts: the cache bytes must be identical.
  kvq::reference::HostCache<Cfg> once(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(once.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  once.hot_slot = host.hot_slot;
  std::vector<T> all_k, all_v;
  std::vector<int32_t> counts(batch);
  for (int b = 0; b < batch; ++b) {
    all_k.insert(all_k.end(), pk[size_t(b)].begin(), pk[size_t(b)].end());
    all_v.insert(all_v.end(), pv[size_t(b)].begin(), pv[size_t(b)].end());
    counts[size_t(b)] = int32_t(prompt[size_t(b)]);
  }
  DeviceMirror<Cfg> dev_once;
  dev_once.upload(once);
  REQUIRE(step_both_with(once, dev_once, counts, all_k, all_v, base + " one-shot"));
  // Page ids may differ between the two histories: compare records page by page via the tables.
  for (int b = 0; b < batch; ++b) {
    REQUIRE(host.cold_len[size_t(b)] == once.cold_len[size_t(b)]);
    REQUIRE(host.len[size_t(b)] == once.len[size_t(b)]);
  }
  const std::vector<uint8_t> chunked_pool = dev.cold.download();
  const std::vector<T> chunked_hot_k = dev.hot_k.download(), chunked_hot_v = dev.hot_v.download();
  size_t bad_records = 0;
  for (int b = 0; b < batch; ++b)
    for (int64_t pg = 0; pg < host.cold_len[size_t(b)] / P; ++pg) {
      const int32_t a = host.block_table[size_t(b) * max_pages + size_t(pg)], o = once.block_table[size_t(b) * max_pages + size_t(pg)];
      const size_t bytes = size_t(heads) * Cfg::record_bytes;
      bad_records += !std::equal(chunked_pool.begin() + size_t(a) * bytes, chunked_pool.begin() + size_t(a + 1) * bytes,
                                 once.cold.begin() + size_t(o) * bytes);
    }
  CHECK_MESSAGE(bad_records == 0, base << ": " << bad_records << " cold pages of the chunked prefill differ from the one-shot's");
  CHECK_MESSAGE(first_difference(dev.sink_k.download(), once.sink_k) == -1, base << ": sink K rows differ from the one-shot's");
  CHECK_MESSAGE(first_difference(dev.sink_v.download(), once.sink_v) == -1, base << ": sink V rows differ from the one-shot's");
  // Ring rows of the hot tokens [cold, len) (the other rows are free: a one-shot prefill never
  // writes the rows of tokens it quantizes straight from its input).
  const int window = residual + P;
  size_t bad_rows = 0;
  for (int b = 0; b < batch; ++b)
    for (int64_t t = host.cold_len[size_t(b)]; t < host.len[size_t(b)]; ++t)
      for (int h = 0; h < heads; ++h) {
        const size_t at = kvq::hot_offset(host.hot_slot[size_t(b)], kvq::ring_row(t, window), h, window, heads, D);
        for (int c = 0; c < D; ++c)
          bad_rows += chunked_hot_k[at + c].bits != once.hot_k[at + c].bits || chunked_hot_v[at + c].bits != once.hot_v[at + c].bits;
      }
  CHECK_MESSAGE(bad_rows == 0, base << ": " << bad_rows << " hot ring elements differ from the one-shot prefill's");

  // Outputs vs a one-shot prefill attention of the whole prompts on an empty cache (which sees
  // every prompt token unquantized): equal within rounding for "none" and close for INT8; the
  // INT4 / INT2 formats differ by what quantizing the earlier chunks costs (reported).
  std::vector<T> all_q, chunked_out;
  for (int b = 0; b < batch; ++b) {
    all_q.insert(all_q.end(), queries[size_t(b)].begin(), queries[size_t(b)].end());
    chunked_out.insert(chunked_out.end(), chunked[size_t(b)].begin(), chunked[size_t(b)].end());
  }
  kvq::reference::HostCache<Cfg> fresh(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(fresh.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  fresh.hot_slot = host.hot_slot;
  for (int b = 0; b < batch; ++b) REQUIRE(fresh.reserve(b, counts[size_t(b)]));
  DeviceMirror<Cfg> dev_fresh;
  dev_fresh.upload(fresh);
  std::vector<int32_t> cu(size_t(batch) + 1, 0);
  int32_t max_q = 1;
  for (int b = 0; b < batch; ++b) {
    cu[size_t(b) + 1] = cu[size_t(b)] + counts[size_t(b)];
    max_q = std::max(max_q, counts[size_t(b)]);
  }
  const kvq::AttentionBatch<T> a = host_attention_batch(fresh.lengths(), heads * group, cu, all_q, all_k, all_v, D, softcap);
  DeviceAttention<T> d(a, cu, all_q, all_k, all_v, dev_fresh.cold_len.get());
  kvq::PrefillPlan plan;
  REQUIRE(plan_prefill_as_chosen<Cfg>(kvq::PrefillShape{batch, heads * group, heads, residual, max_q, max_q, cu.back()}, &plan) ==
          kvq::Status::kSuccess);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  const std::vector<T> one_shot =
      run_prefill<Cfg, Policy>(dev_fresh.view(fresh), d, plan, d_flags.get(), base + " one-shot attention");
  std::vector<float> one_shot_f(one_shot.size());
  for (size_t x = 0; x < one_shot.size(); ++x) one_shot_f[x] = one_shot[x].to_float();
  const OutputError e = output_error(chunked_out, one_shot_f);
  MESSAGE(base << ": chunked vs one-shot prefill outputs, rel L2 " << e.rel_l2 << ", rel max " << e.rel_max);
  if constexpr (Cfg::k_quant::kind == kvq::QuantKind::kNone && Cfg::v_quant::kind == kvq::QuantKind::kNone)
    CHECK_MESSAGE(e.rel_l2 < 1e-2, base << ": chunked vs one-shot rel L2 " << e.rel_l2);
  if constexpr (Cfg::k_quant::kind == kvq::QuantKind::kInt8 && Cfg::v_quant::kind == kvq::QuantKind::kInt8)
    CHECK_MESSAGE(e.rel_l2 < 5e-2, base << ": chunked vs one-shot rel L2 " << e.rel_l2);
}

// A 64K+ prefix (65,573 tokens, not a page multiple, beside a short sequence), then chunks of
// 97 and 1 tokens with GQA 4.
template <class Cfg>
void check_prefill_long(uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  const int heads = 1, group = 4, residual = 2 * P, batch = 2;
  const std::vector<int32_t> prompt{65536 + 37, 300};
  const int max_pages = prompt[0] / P + 8;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, batch, residual, max_pages, batch);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = 1 - b;
  KvGenerator gen(heads, D, seed);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both(host, dev, prompt, gen, false, "long prefix"));
  for (int32_t chunk : {97, 1}) {
    const std::vector<int32_t> counts{chunk, 1 + chunk / 2};
    std::vector<std::vector<T>> pk(batch), pv(batch);
    for (int b = 0; b < batch; ++b) {
      pk[size_t(b)] = gen.keys<T>(counts[size_t(b)]);
      pv[size_t(b)] = gen.values<T>(counts[size_t(b)]);
    }
    const std::vector<T> q = make_queries<T>(gen, counts[0] + counts[1], group);
    prefill_step_and_check<Cfg>(host, dev, pk, pv, {0, 0}, counts, q, heads, group, 0.0f,
                                "64K prefix, chunk " + std::to_string(chunk));
  }
}

// Attention sinks (CacheView::sinks; tokens [0, sinks) never read from a record) in chosen
// situations, four sequences in hot slots that are not their batch indices, GQA 3, two KV heads:
//   0: a prefix of 5 tokens, then a chunk of R + P + 37: page 0 turns cold inside the call, its
//      sink tokens partly prefix (ring rows) and, for sinks > 5, partly the chunk's own;
//   1: a prefix of R + P - 1 (the most that stays hot), then a chunk of 50 (150 rows: two row
//      tiles): page 0 turns cold inside the call with every sink token a ring row;
//   2: a long prefix (page 0 cold since its prompt: the sink rows), then a chunk of 97;
//   3: 3 tokens, then 2: shorter than R + P, no sinks in effect;
// then a second step (page 0 now cold for 0, 1 and 2). Each step is checked before its append
// (pages turning cold quantized on the fly) and after it, against the host reference. The first
// 16 key rows of every sequence are doubled so that the sink tokens carry much of the attention.
template <class Cfg>
void check_prefill_sinks(uint64_t seed, int sinks, kvq::KeyClip key_clip) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  static_assert(Cfg::k_quant::kind != kvq::QuantKind::kNone || Cfg::v_quant::kind != kvq::QuantKind::kNone,
                "attention sinks need a quantized role");
  REQUIRE(sinks < P);
  const int heads = 2, group = 3, batch = 4, slots = 6, residual = P * int(seed % 2);
  const std::vector<int32_t> prefix{5, residual + P - 1, 4 * P + 13, 3};
  const std::vector<std::vector<int32_t>> steps{{residual + P + 37, 50, 97, 2}, {1, P, 130, P / 2}};
  const int max_pages = (4 * P + 13 + 400) / P + 8;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  const int32_t slot_of[] = {4, 1, 5, 2};
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = slot_of[b];
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  KvGenerator gen(heads, D, seed * 977 + 3);
  // Every sequence's rows in token order, prefix then steps; key rows t < 16 doubled.
  std::vector<std::vector<T>> pk(batch), pv(batch);
  const size_t row = size_t(heads) * D;
  for (int b = 0; b < batch; ++b) {
    int64_t n = prefix[size_t(b)];
    for (const auto& counts : steps) n += counts[size_t(b)];
    pk[size_t(b)] = gen.keys<T>(n);
    pv[size_t(b)] = gen.values<T>(n);
    for (size_t x = 0; x < std::min<size_t>(size_t(n), 16) * row; ++x)
      pk[size_t(b)][x] = T::from_float(2.0f * pk[size_t(b)][x].to_float());
  }
  std::vector<T> k0, v0;
  for (int b = 0; b < batch; ++b) {
    k0.insert(k0.end(), pk[size_t(b)].begin(), pk[size_t(b)].begin() + prefix[size_t(b)] * row);
    v0.insert(v0.end(), pv[size_t(b)].begin(), pv[size_t(b)].begin() + prefix[size_t(b)] * row);
  }
  const std::string base = "sinks " + std::to_string(sinks) + (key_clip == kvq::KeyClip::kMse ? " key clip MSE" : "") +
                           " seed " + std::to_string(seed) + " R " + std::to_string(residual);
  REQUIRE(step_both_with(host, dev, prefix, k0, v0, base + " prefix"));
  std::vector<int64_t> done(prefix.begin(), prefix.end());
  for (size_t st = 0; st < steps.size(); ++st) {
    int64_t total = 0;
    for (int32_t c : steps[st]) total += c;
    const std::vector<T> q = make_queries<T>(gen, total, group);
    prefill_step_and_check<Cfg>(host, dev, pk, pv, done, steps[st], q, heads, group, st == 1 && seed % 3 == 0 ? 30.0f : 0.0f,
                                base + " step " + std::to_string(st));
    for (int b = 0; b < batch; ++b) done[size_t(b)] += steps[st][size_t(b)];
  }
  for (int b = 0; b < 3; ++b) CHECK(host.cold_len[size_t(b)] >= P);  // page 0 cold: the sink rows served the last step
  CHECK(host.cold_len[3] == 0);
}

// Isolation of the sink rows, four sequences of one KV head, GQA 4, R = P (sequence 0: a long
// prefix, page 0 cold; 1: a prefix of 5 and a chunk across page 0's transition; 2: a prefix of
// R + P - 1, all hot, and a chunk of 3 that turns page 0 cold; 3: a short one, no sinks in
// effect), run before and after the chunk's append:
//  kSinkValues: constant keys (every logit equal) and values zero but for tokens t < sinks, whose
//    rows are random model-dtype values no format stores exactly; so output row j of a sequence is
//    sum_{t < min(sinks, n)} v_t / n (n = its position + 1), from the prompt rows themselves:
//    the sink values must come through as given (a record's row would give zeros: the encoder
//    stores token `sinks`' zero row in their place);
//  kOneHotValues: random keys (the first 16 of each sequence doubled), token t's value e_(7t mod D):
//    output channel c is the probability of the tokens pointing at c (the key path of the sinks),
//    expected from the attention's operands (reference::attention_operands) in fp64.
// Error per element at most 1 % of the expected value plus 0.2 % of the largest output plus twice
// the naive same-precision attention's largest error.
enum class PrefillSinkIsolation { kSinkValues, kOneHotValues };

template <class Cfg>
void check_prefill_sink_isolation(uint64_t seed, int sinks, PrefillSinkIsolation kind) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  REQUIRE(sinks > 0);
  REQUIRE(sinks < P);
  std::mt19937_64 rng(seed);
  const int heads = 1, group = 4, residual = P, batch = 4, slots = 5;
  const std::vector<int32_t> prefix{int32_t(700 + rng() % P), 5, residual + P - 1, 3}, counts{37, residual + P + 20, 3, 4};
  const int max_pages = 1000 / P + 8;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, rng() % 2 ? kvq::KeyClip::kMse : kvq::KeyClip::kMinMax) == kvq::Status::kSuccess);
  const int32_t slot_of[] = {3, 0, 4, 1};
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = slot_of[b];
  KvGenerator gen(heads, D, seed);
  std::vector<float> kconst(D);
  for (auto& x : kconst) x = (rng() & 1) ? 0.5f : -0.5f;  // exact in every format
  // Sequence b's rows [first, first + n) (token positions), keys and values by `kind`.
  int64_t onehot = 0;  // one-hot values: a running token count over all rows made
  auto rows = [&](int64_t first, int64_t n, bool key) {
    std::vector<T> out = key ? gen.keys<T>(n) : gen.values<T>(n);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = first + r;
      for (int c = 0; c < D; ++c) {
        T& x = out[size_t(r) * D + c];
        if (kind == PrefillSinkIsolation::kSinkValues)
          x = key ? T::from_float(kconst[size_t(c)]) : t < sinks ? x : T::from_float(0.0f);
        else if (key)
          x = t < 16 ? T::from_float(2.0f * x.to_float()) : x;
        else
          x = T::from_float(c == (7 * (onehot + r)) % D ? 1.0f : 0.0f);
      }
    }
    if (!key) onehot += n;
    return out;
  };
  std::vector<std::vector<T>> seq_k(batch), seq_v(batch);  // every row of every sequence, in token order
  for (int b = 0; b < batch; ++b) {
    seq_k[size_t(b)] = rows(0, prefix[size_t(b)] + counts[size_t(b)], true);
    seq_v[size_t(b)] = rows(0, prefix[size_t(b)] + counts[size_t(b)], false);
  }
  std::vector<T> pk, pv, nk, nv;
  for (int b = 0; b < batch; ++b) {
    pk.insert(pk.end(), seq_k[size_t(b)].begin(), seq_k[size_t(b)].begin() + size_t(prefix[size_t(b)]) * D);
    pv.insert(pv.end(), seq_v[size_t(b)].begin(), seq_v[size_t(b)].begin() + size_t(prefix[size_t(b)]) * D);
    nk.insert(nk.end(), seq_k[size_t(b)].begin() + size_t(prefix[size_t(b)]) * D, seq_k[size_t(b)].end());
    nv.insert(nv.end(), seq_v[size_t(b)].begin() + size_t(prefix[size_t(b)]) * D, seq_v[size_t(b)].end());
  }
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  REQUIRE(step_both_with(host, dev, prefix, pk, pv, "sink isolation prompt"));
  std::vector<int32_t> cu(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) cu[size_t(b) + 1] = cu[size_t(b)] + counts[size_t(b)];
  const int64_t total = cu.back();
  // Gaussian queries (no outlier channels): logits of order 10, so probabilities are spread.
  std::vector<T> q = gen.values<T>(total * group);
  for (auto& x : q) x = T::from_float(x.to_float() * 0.5f);
  for (int b = 0; b < batch; ++b) REQUIRE(host.reserve(b, counts[size_t(b)]));
  dev.upload_tables(host);
  const kvq::AttentionBatch<T> a = host_attention_batch(host.lengths(), group, cu, q, nk, nv, D);

  // Expected from the definitions, in fp64; `naive` the same in the model dtype.
  auto rt = [](double x) { return double(T::from_float(float(x)).to_float()); };
  std::vector<double> want(size_t(total) * group * D, 0.0), naive(want.size(), 0.0);
  std::vector<float> k, val;
  for (int b = 0; b < batch; ++b) {
    kvq::reference::attention_operands<Cfg>(host.view(), a, b, 0, k, val);
    // The sink rows the attention takes are the prompt's own (sink_k / sink_v for sequence 0, the
    // ring for 1 and 2; sequence 3's are hot anyway), never a record's.
    for (int64_t t = 0; t < std::min<int64_t>(sinks, host.len[size_t(b)]); ++t)
      for (int c = 0; c < D; ++c) {
        REQUIRE(k[size_t(t) * D + c] == seq_k[size_t(b)][size_t(t) * D + c].to_float());
        REQUIRE(val[size_t(t) * D + c] == seq_v[size_t(b)][size_t(t) * D + c].to_float());
      }
    for (int j = 0; j < counts[size_t(b)]; ++j)
      for (int hq = 0; hq < group; ++hq) {
        const int64_t n = host.len[size_t(b)] + j + 1;
        double* o = &want[(size_t(cu[size_t(b)] + j) * group + hq) * D];
        double* on = &naive[(size_t(cu[size_t(b)] + j) * group + hq) * D];
        if (kind == PrefillSinkIsolation::kSinkValues) {
          for (int64_t t = 0; t < std::min<int64_t>(sinks, n); ++t)
            for (int c = 0; c < D; ++c) {
              o[c] += double(seq_v[size_t(b)][size_t(t) * D + c].to_float()) / double(n);
              on[c] += seq_v[size_t(b)][size_t(t) * D + c].to_float();
            }
          for (int c = 0; c < D; ++c) on[c] = rt(float(on[c]) / float(n));
        } else {
          attend_row(&q[(size_t(cu[size_t(b)] + j) * group + hq) * D], k, val, n, D, a.softmax_scale, o, on);
        }
      }
  }
  const std::pair<double, double> scale = largest_output_and_naive_error(want, naive);
  const double mx = scale.first, e_naive = scale.second;
  kvq::PrefillPlan plan;
  REQUIRE(plan_prefill_as_chosen<Cfg>(kvq::PrefillShape{batch, group, heads, residual, host.len[0] + 64, residual + P + 20, total},
                                      &plan) == kvq::Status::kSuccess);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  DeviceAttention<T> d(a, cu, q, nk, nv, dev.cold_len.get());
  const std::string where = std::string(kind == PrefillSinkIsolation::kSinkValues ? "sink values" : "one-hot values") + ", sinks " +
                            std::to_string(sinks) + ", kernel " + std::to_string(int(plan.kernel)) + " tile " +
                            std::to_string(plan.tile_tokens);
  auto judge = [&](const std::vector<T>& got, const std::string& w) {
    size_t bad = 0, first_bad = 0;
    for (size_t x = 0; x < want.size(); ++x)
      if (!(std::fabs(got[x].to_float() - want[x]) <= 0.01 * std::fabs(want[x]) + 2e-3 * mx + 2 * e_naive) && bad++ == 0)
        first_bad = x;
    CHECK_MESSAGE(bad == 0, w << ": " << bad << " of " << want.size() << " outputs off; first at " << first_bad << " (row "
                              << first_bad / D / group << "): " << got[first_bad].to_float() << " vs " << want[first_bad]
                              << " (naive " << naive[first_bad] << ", its largest error " << e_naive << ", max |out| " << mx
                              << ")");
  };
  // Before the append (page 0 of sequences 1 and 2 turns cold inside the call), then after it.
  judge(run_prefill<Cfg>(dev.view(host), d, plan, d_flags.get(), where + " (before append)"), where + " (before append)");
  REQUIRE(step_both_with(host, dev, counts, nk, nv, where));
  for (int b = 0; b < 3; ++b) REQUIRE(host.cold_len[size_t(b)] >= P);
  judge(run_prefill<Cfg>(dev.view(host), d, plan, d_flags.get(), where + " (after append)"), where + " (after append)");
  CHECK(d_flags.download()[0] == 0u);
}

}  // namespace kvq_test

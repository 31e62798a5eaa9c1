// examples/quickstart.cpp - kvq in one file.
//
// 1. Synthetic K/V for a few sequences of a small Llama-like layer (2 KV heads x GQA 4, head dim
//    128, page 64, hot window R = 128): keys with a few outlier channels 10-30x larger than the
//    rest and per-channel offsets, values roughly gaussian.
// 2. The prompts go into a kvq::reference::HostCache in uneven chunks (700, 13, 1029, ... tokens:
//    no alignment to pages), then decode tokens, one of the steps speculative (3 draft tokens,
//    the rejected ones rolled back). The same appends run for every format: none, int8, int4,
//    int2 and k4v2 (INT4 keys, INT2 values).
// 3. Per format: bytes per token and capacity from kvq's planner for a Llama-3-8B shape, and the
//    error of the host reference attention (a decode step, and a 4-token chunk) against "none".
// 4. Where a GPU is present, the GPU append replays the same appends through the engine's
//    dispatcher (examples/engine_instance) and its cache must be byte-identical to the host's.
//
// Exit code: 0 when every call succeeded and every check held, 1 otherwise.
#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <kvq/kvq.hpp>

#include "quickstart_gpu.hpp"

namespace {

using T = kvq::bf16;

// ---- the workload -------------------------------------------------------------------------------
constexpr int kBatch = 4;
constexpr int kKvHeads = 2, kGqa = 4, kQHeads = kKvHeads * kGqa;
constexpr int kD = 128, kP = 64, kR = 128;
constexpr int kNumSlots = 6;          // more hot slots than sequences: slots are the engine's choice
constexpr int64_t kNumPages = 128;    // the cold pool (the run needs 108 pages)
constexpr int kMaxPagesPerSeq = 48;   // block-table row: up to 48 cold pages (3,072 tokens) each
const std::array<int32_t, kBatch> kHotSlot = {3, 0, 5, 1};  // not the batch position

// Each prompt in chunks of any length (chunked prefill needs no page alignment).
const std::array<std::vector<int>, kBatch> kPromptChunks = {{{700, 13, 1029, 1158},  // 2,900 tokens
                                                             {1000},                 // 1,000
                                                             {64, 1, 127, 1855},     // 2,047
                                                             {13, 700, 830}}};       // 1,543
constexpr int kOutliersPerHead = 4;
constexpr int kNeedles = 4;          // past tokens each query head attends to strongly (token 0 is one)
constexpr double kNeedlePull = 7.0;  // their logits stand ~8 above the crowd's spread of ~1
constexpr int kDecodeSteps = 8;
constexpr int kSpecStep = 4;                              // this decode step appends 3 draft tokens
constexpr int kDrafts = 3;
const std::array<int, kBatch> kAccepted = {1, 3, 0, 2};  // ... and keeps this many of them

using CfgNone = kvq::CacheConfig<T, kD, kP, kvq::NoQuant, kvq::NoQuant>;
using CfgInt8 = kvq::CacheConfig<T, kD, kP, kvq::Int8, kvq::Int8>;
using CfgInt4 = kvq::CacheConfig<T, kD, kP, kvq::Int4<32>, kvq::Int4<32>>;
using CfgInt2 = kvq::CacheConfig<T, kD, kP, kvq::Int2<32>, kvq::Int2<32>>;
using CfgK4V2 = kvq::CacheConfig<T, kD, kP, kvq::Int4<32>, kvq::Int2<32>>;

// ---- the capacity question ----------------------------------------------------------------------
constexpr kvq::ModelShape kLlama3_8B{32, 8, 128};  // all 32 layers, 8 KV heads, head dim 128
constexpr int64_t kContext = 131072;
constexpr int64_t kSequences = 96;
constexpr uint64_t kBudgetGiB = 100;

// ---- deterministic synthetic data ---------------------------------------------------------------
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {                                               // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// Per layer and KV head, fixed for all sequences: each key channel has its own offset and spread;
// a few channels are outliers whose magnitude is 10-30x the others' (mostly a large offset, with a
// larger spread too), as in real models' keys. Values: gaussian, unit variance.
struct KeyProfile {
  std::vector<float> mean, spread;  // [kKvHeads][kD]
};

KeyProfile make_profile(Rng& rng) {
  KeyProfile p;
  p.mean.resize(size_t(kKvHeads) * kD);
  p.spread.resize(p.mean.size());
  for (size_t i = 0; i < p.mean.size(); ++i) {
    p.mean[i] = float(0.5 * rng.normal());
    p.spread[i] = float(0.6 + 0.8 * rng.uniform());
  }
  for (int h = 0; h < kKvHeads; ++h)
    for (int n = 0; n < kOutliersPerHead;) {
      const size_t c = size_t(h) * kD + size_t(rng.next() % kD);
      if (p.spread[c] > 1.5f) continue;  // already an outlier
      const double magnitude = 10.0 + 20.0 * rng.uniform();
      p.mean[c] = float(rng.uniform() < 0.5 ? -magnitude : magnitude);
      p.spread[c] = float(2.0 + 2.0 * rng.uniform());
      ++n;
    }
  return p;
}

// Appends n tokens' K and V rows ([n][kKvHeads][kD] each).
void make_tokens(Rng& rng, const KeyProfile& p, int n, std::vector<T>& k, std::vector<T>& v) {
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < kKvHeads * kD; ++i) {
      k.push_back(T::from_float(p.mean[size_t(i)] + p.spread[size_t(i)] * float(rng.normal())));
      v.push_back(T::from_float(float(rng.normal())));
    }
}

struct Step {
  std::string what;
  std::vector<int32_t> cu_new;    // [kBatch + 1]
  std::vector<T> k, v;            // [cu_new[kBatch]][kKvHeads][kD]
  std::vector<int32_t> rollback;  // tokens each sequence drops after the step (rejected drafts)
};

// New query tokens with their fresh K/V (the attention contract reads them unquantized).
struct Queries {
  std::vector<int32_t> cu_q;
  std::vector<T> q, k, v;
};

struct Workload {
  std::vector<Step> steps;
  Queries decode, chunk;  // q_len 1 and q_len 4 per sequence, after all steps
};

Workload make_workload() {
  Rng seed(2025);
  const KeyProfile profile = make_profile(seed);
  std::vector<Rng> token_rng;
  for (int b = 0; b < kBatch; ++b) token_rng.emplace_back(seed.next());
  std::array<std::vector<T>, kBatch> live_k;  // K rows of each sequence's tokens (for the queries)
  Workload w;
  auto add_step = [&](std::string what, const std::array<int, kBatch>& n, const std::array<int, kBatch>& drop) {
    Step s;
    s.what = std::move(what);
    s.cu_new.push_back(0);
    for (int b = 0; b < kBatch; ++b) {
      make_tokens(token_rng[size_t(b)], profile, n[size_t(b)], s.k, s.v);
      live_k[size_t(b)].insert(live_k[size_t(b)].end(), s.k.begin() + ptrdiff_t(s.cu_new.back()) * kKvHeads * kD, s.k.end());
      live_k[size_t(b)].resize(live_k[size_t(b)].size() - size_t(drop[size_t(b)]) * kKvHeads * kD);
      s.cu_new.push_back(s.cu_new.back() + n[size_t(b)]);
      s.rollback.push_back(drop[size_t(b)]);
    }
    w.steps.push_back(std::move(s));
  };
  size_t chunks = 0;
  for (const auto& c : kPromptChunks) chunks = std::max(chunks, c.size());
  for (size_t i = 0; i < chunks; ++i) {
    std::array<int, kBatch> n{};
    for (int b = 0; b < kBatch; ++b) n[size_t(b)] = i < kPromptChunks[size_t(b)].size() ? kPromptChunks[size_t(b)][i] : 0;
    add_step("prefill chunk", n, {});
  }
  for (int d = 0; d < kDecodeSteps; ++d) {
    if (d == kSpecStep) {
      std::array<int, kBatch> drop{};
      for (int b = 0; b < kBatch; ++b) drop[size_t(b)] = kDrafts - kAccepted[size_t(b)];
      add_step("speculative decode", {kDrafts, kDrafts, kDrafts, kDrafts}, drop);
    } else {
      add_step("decode", {1, 1, 1, 1}, {});
    }
  }
  // Queries: gaussian, plus a pull towards a few past tokens ("needles": token 0, as an attention
  // sink, and random earlier positions), so that attention is peaked as in retrieval heads rather
  // than spread evenly over thousands of random keys.
  auto make_queries = [&](int q_len, Queries& q) {
    Rng qrng(seed.next());
    q.cu_q.push_back(0);
    for (int b = 0; b < kBatch; ++b) {
      Rng fork(token_rng[size_t(b)].next());  // the chunk's own tokens continue the sequence
      make_tokens(fork, profile, q_len, q.k, q.v);
      q.cu_q.push_back(q.cu_q.back() + q_len);
      const int64_t len = int64_t(live_k[size_t(b)].size()) / (kKvHeads * kD);
      for (int i = 0; i < q_len; ++i)
        for (int hq = 0; hq < kQHeads; ++hq) {
          const int h = hq / kGqa;
          std::vector<float> x(kD);
          for (float& c : x) c = float(qrng.normal());
          for (int n = 0; n < kNeedles; ++n) {
            const int64_t t = n == 0 ? 0 : int64_t(qrng.next() % uint64_t(len));
            const T* k = live_k[size_t(b)].data() + (size_t(t) * kKvHeads + size_t(h)) * kD;
            std::vector<float> d(kD);
            double norm = 0.0;
            for (int c = 0; c < kD; ++c) {
              d[size_t(c)] = k[c].to_float() - profile.mean[size_t(h) * kD + size_t(c)];
              norm += double(d[size_t(c)]) * d[size_t(c)];
            }
            for (int c = 0; c < kD; ++c) x[size_t(c)] += float(kNeedlePull * d[size_t(c)] / std::sqrt(norm));
          }
          for (float c : x) q.q.push_back(T::from_float(c));
        }
    }
  };
  make_queries(1, w.decode);
  make_queries(4, w.chunk);
  return w;
}

// ---- one format, host reference -----------------------------------------------------------------
struct HostRun {
  kvq::Status status = kvq::Status::kSuccess;
  std::string failure;  // what went wrong, empty when all is well
  uint32_t flags = 0;
  std::vector<float> out_decode, out_chunk;
  // What the GPU replay needs: the appends as they ran and the final cache.
  std::vector<quickstart::ReplayStep> replay;
  std::vector<uint8_t> cold;
  std::vector<T> hot_k, hot_v;
  std::vector<int32_t> block_table, hot_slot, len, cold_len;
  int64_t pages_used = 0;
};

template <class Cfg>
HostRun run_host(const Workload& w) {
  HostRun r;
  auto fail = [&](kvq::Status st, std::string what) {
    r.status = st;
    r.failure = std::move(what) + ": " + kvq::to_string(st);
    return std::move(r);
  };
  kvq::reference::HostCache<Cfg> cache(kKvHeads, kNumPages, kNumSlots, kR, kMaxPagesPerSeq, kBatch);
  std::copy(kHotSlot.begin(), kHotSlot.end(), cache.hot_slot.begin());
  std::vector<int32_t> cold_out(size_t(kBatch), -1);
  for (const Step& s : w.steps) {
    quickstart::ReplayStep rs;
    rs.len = cache.len;
    rs.cold = cache.cold_len;
    rs.cu_new = s.cu_new;
    rs.new_k = s.k.data();
    rs.new_v = s.v.data();
    // The engine's part: cold page ids for the pages this append turns cold.
    for (int b = 0; b < kBatch; ++b) {
      const int n = s.cu_new[size_t(b) + 1] - s.cu_new[size_t(b)];
      rs.max_new = std::max(rs.max_new, n);
      if (!cache.reserve(b, n)) return fail(kvq::Status::kBlockTableOverflow, "reserving pages");
    }
    kvq::AppendBatch<T> a;
    a.batch = kBatch;
    a.lengths = cache.lengths();
    a.cu_new = s.cu_new.data();
    a.new_k = s.k.data();
    a.new_v = s.v.data();
    a.cold_out = cold_out.data();
    const kvq::Status st = kvq::reference::append<Cfg>(cache.view(), a, &r.flags);
    if (st != kvq::Status::kSuccess) return fail(st, s.what + " append");
    for (int b = 0; b < kBatch; ++b) {
      cache.commit(b, s.cu_new[size_t(b) + 1] - s.cu_new[size_t(b)]);
      if (cold_out[size_t(b)] != cache.cold_len[size_t(b)])
        return fail(kvq::Status::kInvalidLength, "cold_out disagrees with the planner");
    }
    rs.cold_after = cache.cold_len;
    for (int b = 0; b < kBatch; ++b)  // speculative decoding: drop the rejected drafts, O(1)
      if (s.rollback[size_t(b)] > 0 && !cache.rollback(b, cache.len[size_t(b)] - s.rollback[size_t(b)]))
        return fail(kvq::Status::kInvalidLength, "rollback");
    r.replay.push_back(std::move(rs));
  }
  auto attend = [&](const Queries& q, std::vector<float>& out) {
    kvq::AttentionBatch<T> a;
    a.batch = kBatch;
    a.num_q_heads = kQHeads;
    a.lengths = cache.lengths();
    a.cu_q = q.cu_q.data();
    a.q = q.q.data();
    a.new_k = q.k.data();
    a.new_v = q.v.data();
    a.softmax_scale = 1.0f / std::sqrt(float(kD));
    out.assign(size_t(q.cu_q.back()) * kQHeads * kD, 0.0f);
    return kvq::reference::attention<Cfg>(cache.view(), a, out.data());
  };
  kvq::Status st = attend(w.decode, r.out_decode);
  if (st != kvq::Status::kSuccess) return fail(st, "decode attention");
  st = attend(w.chunk, r.out_chunk);
  if (st != kvq::Status::kSuccess) return fail(st, "chunk attention");
  if (r.flags != 0) return fail(kvq::Status::kSuccess, "unexpected kFlag bits on finite, in-range data");
  for (int32_t c : cache.cold_len) r.pages_used += c / kP;
  r.cold = std::move(cache.cold);
  r.hot_k = std::move(cache.hot_k);
  r.hot_v = std::move(cache.hot_v);
  r.block_table = std::move(cache.block_table);
  r.hot_slot = std::move(cache.hot_slot);
  r.len = std::move(cache.len);
  r.cold_len = std::move(cache.cold_len);
  return r;
}

// ---- reporting ----------------------------------------------------------------------------------
std::string format_name(const kvq::QuantDesc& q, kvq::DType dtype) {
  switch (q.kind) {
    case kvq::QuantKind::kNone: return dtype == kvq::DType::kBF16 ? "bf16" : "fp16";
    case kvq::QuantKind::kInt8: return "int8";
    case kvq::QuantKind::kAsym: return "int" + std::to_string(q.bits) + "/g" + std::to_string(q.group);
  }
  return "?";
}

// ||a - ref|| / ||ref|| over every output element.
double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(a[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

struct Format {
  const char* name;
  kvq::ConfigKey key;
  HostRun (*run)(const Workload&);
};

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  int failures = 0;

  const Workload w = make_workload();
  std::printf("kvq %d.%d.%d quickstart (cold-record format v%d)\n", KVQ_VERSION_MAJOR, KVQ_VERSION_MINOR,
              KVQ_VERSION_PATCH, KVQ_FORMAT_VERSION);
  std::printf("layer: %d KV heads x GQA %d (%d query heads), head dim %d, page %d, hot window R %d, bf16\n", kKvHeads,
              kGqa, kQHeads, kD, kP, kR);
  for (int b = 0; b < kBatch; ++b) {
    std::string chunks;
    int total = 0;
    for (int c : kPromptChunks[size_t(b)]) {
      chunks += (chunks.empty() ? "" : " + ") + std::to_string(c);
      total += c;
    }
    std::printf("  seq %d (hot slot %d): prompt %5d = %s\n", b, kHotSlot[size_t(b)], total, chunks.c_str());
  }
  std::printf("  then %d decode steps, step %d speculative: %d drafts, accepted", kDecodeSteps, kSpecStep + 1, kDrafts);
  for (int b = 0; b < kBatch; ++b) std::printf(" %d", kAccepted[size_t(b)]);
  std::printf(" (rest rolled back)\n");
  std::printf("  keys: per-channel offsets, %d outlier channels per head at 10-30x magnitude; values: gaussian\n",
              kOutliersPerHead);
  std::printf("  attention: one decode token and one 4-token chunk per sequence, queries pulled towards\n"
              "  %d past tokens each (token 0 and random ones), compared with the \"none\" cache\n\n", kNeedles);

  const Format formats[] = {
      {"none", kvq::key_of<CfgNone>(), &run_host<CfgNone>}, {"int8", kvq::key_of<CfgInt8>(), &run_host<CfgInt8>},
      {"int4", kvq::key_of<CfgInt4>(), &run_host<CfgInt4>}, {"int2", kvq::key_of<CfgInt2>(), &run_host<CfgInt2>},
      {"k4v2", kvq::key_of<CfgK4V2>(), &run_host<CfgK4V2>},
  };
  constexpr int kFormats = int(sizeof(formats) / sizeof(formats[0]));
  std::vector<HostRun> runs;
  for (const Format& f : formats) {
    runs.push_back(f.run(w));
    if (!runs.back().failure.empty()) {
      std::printf("FAILED: %s: %s\n", f.name, runs.back().failure.c_str());
      ++failures;
    }
  }
  if (failures) return 1;
  std::printf("final lengths (cold + hot):");
  for (int b = 0; b < kBatch; ++b)
    std::printf(" %d (%d + %d)", runs[0].len[size_t(b)], runs[0].cold_len[size_t(b)],
                runs[0].len[size_t(b)] - runs[0].cold_len[size_t(b)]);
  std::printf("; %" PRId64 " of %" PRId64 " pool pages used\n\n", runs[0].pages_used, kNumPages);

  // ---- the table ----
  const uint64_t budget = kBudgetGiB << 30;
  const double gib = double(1ull << 30);
  std::printf("capacity: Llama-3-8B shape (%d layers x %d KV heads x head dim %d, every layer), P %d, R %d;\n",
              kLlama3_8B.layers, kLlama3_8B.kv_heads, kLlama3_8B.head_dim, kP, kR);
  std::printf("          deployment %s sequences x %s tokens, cache budget %" PRIu64 " GiB (hot rings included)\n\n",
              with_commas(kSequences).c_str(), with_commas(kContext).c_str(), kBudgetGiB);
  const std::string in_budget = "in " + std::to_string(kBudgetGiB) + " GiB:";
  const std::string deployment = std::to_string(kSequences) + " x " + with_commas(kContext);
  std::printf("%-6s  %-19s  %11s  %7s  %12s  %13s  %13s  %9s  %9s\n", "", "", "bytes/token", "smaller", "GiB for",
              in_budget.c_str(), in_budget.c_str(), "attn err", "attn err");
  std::printf("%-6s  %-19s  %11s  %7s  %12s  %13s  %13s  %9s  %9s\n", "format", "K / V", "(cold)", "vs bf16",
              deployment.c_str(), (with_commas(kContext) + "-token").c_str(), "tokens/seq,", "decode", "q_len 4");
  std::printf("%-6s  %-19s  %11s  %7s  %12s  %13s  %13s  %9s  %9s\n", "", "", "", "", "", "sequences",
              (std::to_string(kSequences) + " sequences").c_str(), "(rel L2)", "(rel L2)");
  std::printf("%s\n", std::string(6 + 2 + 19 + 2 + 11 + 2 + 7 + 2 + 12 + 2 + 13 + 2 + 13 + 2 + 9 + 2 + 9, '-').c_str());
  for (int i = 0; i < kFormats; ++i) {
    const Format& f = formats[i];
    const kvq::CacheFormat cf{f.key.k, f.key.v, f.key.page, kR};
    const kvq::Status st = kvq::validate(kLlama3_8B, cf);
    if (st != kvq::Status::kSuccess) {
      std::printf("FAILED: %s: planner: %s\n", f.name, kvq::to_string(st));
      ++failures;
      continue;
    }
    const double bpt = kvq::bytes_per_token(kLlama3_8B, cf);
    const double ratio = kvq::bytes_per_token_dense(kLlama3_8B) / bpt;
    const double need = double(kvq::bytes_for_sequence(kContext, kLlama3_8B, cf)) * double(kSequences) / gib;
    const int64_t seqs = kvq::sequences_that_fit(budget, kContext, kLlama3_8B, cf);
    const int64_t tokens = kvq::tokens_that_fit(budget, kSequences, kLlama3_8B, cf);
    const std::string kv = format_name(f.key.k, f.key.dtype) + " / " + format_name(f.key.v, f.key.dtype);
    std::printf("%-6s  %-19s  %11s  %6.2fx  %12.1f  %13s  %13s  %8.3f%%  %8.3f%%\n", f.name, kv.c_str(),
                with_commas(int64_t(bpt)).c_str(), ratio, need, with_commas(seqs).c_str(), with_commas(tokens).c_str(),
                100.0 * rel_l2(runs[size_t(i)].out_decode, runs[0].out_decode),
                100.0 * rel_l2(runs[size_t(i)].out_chunk, runs[0].out_chunk));
  }
  const kvq::CacheFormat dense{kvq::kDescNone, kvq::kDescNone, kP, kR};
  std::printf("\nbytes/token: cold pages, all %d layers; each sequence also holds a hot ring of %.1f MiB (R + P rows).\n",
              kLlama3_8B.layers, double(kvq::hot_bytes_per_sequence(kLlama3_8B, dense)) / (1 << 20));
  std::printf("attn err: ||o - o_none|| / ||o_none|| of the host reference attention (fp32) over every query\n"
              "          head and token of the batch; synthetic data, so compare formats, not absolute values.\n\n");

  // ---- the GPU append, byte for byte against the host ----
  std::string device;
#if defined(KVQ_EXAMPLE_HAVE_CUDA)
  const int gpus = quickstart::gpu_count(&device);
#else
  const int gpus = 0;
  std::printf("(this build has no CUDA: the GPU append is not compiled in)\n");
#endif
  if (gpus == 0) {
    std::printf("GPU append: skipped (no GPU)\n");
  } else {
#if defined(KVQ_EXAMPLE_HAVE_CUDA)
    std::printf("GPU append on %s, through kvq_engine_instance (runtime key -> kvq::Handle):\n", device.c_str());
    uint64_t mismatches = 0;
    int compared = 0;
    for (int i = 0; i < kFormats; ++i) {
      const HostRun& h = runs[size_t(i)];
      quickstart::Replay r;
      r.key = formats[i].key;
      r.batch = kBatch;
      r.num_kv_heads = kKvHeads;
      r.num_slots = kNumSlots;
      r.residual = kR;
      r.max_pages_per_seq = kMaxPagesPerSeq;
      r.num_pages = kNumPages;
      r.cold_fill = 0xA5;  // HostCache's initial pool byte
      r.block_table = &h.block_table;
      r.hot_slot = &h.hot_slot;
      r.steps = &h.replay;
      r.cold = &h.cold;
      r.hot_k = &h.hot_k;
      r.hot_v = &h.hot_v;
      const quickstart::GpuOutcome g = quickstart::gpu_replay(r);
      if (!g.instantiated) {
        const bool ok = g.status == kvq::Status::kNotInstantiated;
        std::printf("  %-5s not in the engine's instantiation set: %s%s\n", formats[i].name, kvq::to_string(g.status),
                    ok ? " (as expected)" : " -- FAILED, expected kNotInstantiated");
        failures += !ok;
        continue;
      }
      if (g.status != kvq::Status::kSuccess) {
        std::printf("  %-5s FAILED: %s%s%s\n", formats[i].name, kvq::to_string(g.status), g.error.empty() ? "" : ": ",
                    g.error.c_str());
        ++failures;
        continue;
      }
      ++compared;
      const uint64_t bad = g.cold_mismatch + g.hot_mismatch;
      mismatches += bad;
      std::printf("  %-5s %zu appends: cold pool %.1f MiB, hot rings %.1f MiB: %s", formats[i].name, h.replay.size(),
                  double(h.cold.size()) / (1 << 20), double(2 * h.hot_k.size() * sizeof(T)) / (1 << 20),
                  bad ? "" : "identical");
      if (bad) std::printf("%" PRIu64 " cold + %" PRIu64 " hot bytes differ", g.cold_mismatch, g.hot_mismatch);
      if (g.cold_len_mismatch) std::printf(", %" PRIu64 " cold_out values differ", g.cold_len_mismatch);
      if (g.flags != h.flags) std::printf(", flags 0x%x (host 0x%x)", g.flags, h.flags);
      std::printf("\n");
      failures += bad != 0 || g.cold_len_mismatch != 0 || g.flags != h.flags;
    }
    if (compared == 0) {
      std::printf("GPU append: FAILED, no configuration compared\n");
      ++failures;
    } else if (mismatches == 0) {
      std::printf("GPU append: bytes identical\n");
    } else {
      std::printf("GPU append: %" PRIu64 " bytes differ\n", mismatches);
    }
#endif
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n%s in %.1f s\n", failures ? "FAILED" : "all checks passed", secs);
  return failures ? 1 : 0;
}

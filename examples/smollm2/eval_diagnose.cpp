// eval_diagnose.cpp - why a quantized cache format loses accuracy, with numbers, per layer (CPU
// backend, --attention decode). The model runs with the format under test; after each layer's
// attention a StepObserver (kv_cache.hpp) gets that layer's queries, and KvCache::head_kv() gives
// the decode path's two copies of every KV head: the unquantized keys (bf16) and what the cache
// yields for cold tokens. For the analysed queries it recomputes the attention logits both ways:
//   raw   - every key unquantized (what the layer would see with a bf16 cache, given its inputs);
//   quant - keys below the query's cold boundary as the cache yields them, newer ones unquantized
//           (exactly what the decode path attended over).
// Queries, and the keys themselves, come from the run with the format under test, so each layer's
// numbers isolate that layer's quantization error given its (already perturbed) inputs. With
// --rotate on, keys and queries are in the rotated domain (the one the cache quantizes); q . k is
// the same. Values are not analysed here.
//
// Text windows (--text): per layer, averaged over windows, query heads and the analysed queries
//   mass0, mass0_3        raw attention on token 0 / tokens 0-3 (every analysed query)
//   k0_norm_ratio         |k_0| / median_t |k_t| (per KV head, averaged)
//   g0_range_ratio        range (max - min) of the key groups (channel x Gk tokens of page 0) that
//                         hold token 0 over the median range of all the layer's cold key groups;
//                         mean and max over KV heads x channels
//   g0_chan_ratio         the same against the median range of that channel's groups
//   single_share          share of cold key groups whose range is set by one token: max (or min)
//                         more than 2x farther from the group's median than the second largest
//                         (smallest) element
//   g0_tok0_single_share  share of the token-0 groups where token 0 is that one token
//   g0_tok0_extreme_share share of the token-0 groups where token 0 is the max or the min (2 / Gk
//                         if it were like any other token)
//   top channels          (head, channel) pairs with the largest sum of k^2 over the window, and
//                         their share of the layer's sum of k^2 (3 KV heads x 64 channels)
//   err0, err_g0, err_other  mean |q.k_quant - q.k_raw| x softmax scale (nats) for token 0, for the
//                         other tokens of its groups (1 .. Gk-1), for all cold tokens but token 0
//   mass0_raw_c, mass0_quant_c  attention on token 0 with raw and with quantized keys, over the
//                         analysed queries for which token 0 is cold
//   dmass0_abs, tv        mean |p_quant(0) - p_raw(0)| and mean total variation between the two
//                         attention distributions, same queries
// Passkey prompt (--passkey-prompt LENGTH,DEPTH): at the prompt's last query, per layer: the
//   attention on the key's digit tokens (sum over them; mean and max over query heads), raw and
//   quantized, their logit error against the other cold tokens', token 0's attention, the total
//   variation between the raw and quantized attention; and the digits' keys: |k_digit| / median
//   |k_t|, the range of the key groups holding a digit (over the layer's and the channel's median
//   range), and how often the digit is its group's max or min (2 / Gk if nothing stood out), or
//   the single token that sets the range.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "attention_cpu.hpp"
#include "eval.hpp"

namespace smollm2 {
namespace {

constexpr int D = kHeadDim;
constexpr float kScale = 0.125f;  // softmax scale (1 / sqrt(64)), as the decode path applies it

// Attention statistics of one layer (sums; divided at the end).
struct AttnAcc {
  double mass0 = 0, mass03 = 0;
  int64_t n = 0;  // analysed query heads
  double mass0_raw_c = 0, mass0_quant_c = 0, mass03_raw_c = 0, mass03_quant_c = 0, err0 = 0, err0_signed = 0;
  double dmass0 = 0, tv = 0;  // sum |p_quant(0) - p_raw(0)|, total variation 0.5 sum_t |p_quant(t) - p_raw(t)|
  int64_t n_c = 0;  // ... of which token 0 is cold
  double err_g0 = 0, err_other = 0;
  int64_t n_g0 = 0, n_other = 0;
  // passkey: the key's digits at the last query
  double dig_raw = 0, dig_quant = 0, dig_raw_max = 0, dig_quant_max = 0, err_dig = 0;
  int64_t n_dig = 0;
  void add(const AttnAcc& o) {
    mass0 += o.mass0, mass03 += o.mass03, n += o.n;
    mass0_raw_c += o.mass0_raw_c, mass0_quant_c += o.mass0_quant_c, mass03_raw_c += o.mass03_raw_c;
    mass03_quant_c += o.mass03_quant_c, err0 += o.err0, err0_signed += o.err0_signed, n_c += o.n_c;
    dmass0 += o.dmass0, tv += o.tv;
    err_g0 += o.err_g0, n_g0 += o.n_g0, err_other += o.err_other, n_other += o.n_other;
    dig_raw += o.dig_raw, dig_quant += o.dig_quant, err_dig += o.err_dig, n_dig += o.n_dig;
    dig_raw_max = std::max(dig_raw_max, o.dig_raw_max), dig_quant_max = std::max(dig_quant_max, o.dig_quant_max);
  }
};

// Key statistics of one layer, accumulated over windows.
struct KeyAcc {
  double k0_ratio = 0;
  int64_t n_k0 = 0;
  double g0_ratio = 0, g0_ratio_max = 0, g0_chan = 0, g0_chan_max = 0;
  int64_t n_g0 = 0, g0_tok0_single = 0, g0_tok0_extreme = 0;
  int64_t groups = 0, single = 0;
  // passkey: the key groups holding the key's digit tokens (one per digit x KV head x channel)
  double dig_norm = 0, dig_ratio = 0, dig_chan = 0;
  int64_t n_dig_norm = 0, n_dig = 0, dig_extreme = 0, dig_single = 0;
  std::vector<double> energy;  // [kv head * 64 + channel]: sum of k^2
};

double median(std::vector<float> v) {
  if (v.empty()) return 0.0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(m), v.end());
  double r = v[m];
  if (v.size() % 2 == 0) r = 0.5 * (r + double(*std::max_element(v.begin(), v.begin() + long(m))));
  return r;
}

// s[t] = q . k_t for t in [0, n); kt in 16-token tiles (k_tile_index). s holds n rounded up to 16.
void scores(const float* kt, int64_t n, const float* q, float* s) {
  for (int64_t t0 = 0; t0 < n; t0 += 16) {
    v8f a0{}, a1{};
    const float* tile = kt + size_t(t0 / 16) * 1024;
    for (int d = 0; d < D; ++d) {
      a0 += q[d] * *reinterpret_cast<const v8f*>(tile + d * 16);
      a1 += q[d] * *reinterpret_cast<const v8f*>(tile + d * 16 + 8);
    }
    *reinterpret_cast<v8f_u*>(s + t0) = a0;
    *reinterpret_cast<v8f_u*>(s + t0 + 8) = a1;
  }
}

// p[t] = softmax(s)[t], t < n.
void softmax(const float* s, int64_t n, float* p) {
  const float mx = *std::max_element(s, s + n);
  for (int64_t t = 0; t < n; ++t) p[t] = s[t] - mx;
  exp_inplace(p, int(n));
  double z = 0.0;
  for (int64_t t = 0; t < n; ++t) z += p[t];
  for (int64_t t = 0; t < n; ++t) p[t] = float(p[t] / z);
}

class Diagnoser final : public StepObserver {
 public:
  // wanted(p): analyse the query at position p. digits: the passkey's digit positions (or empty).
  Diagnoser(const LlamaConfig& cfg, int gk, std::function<bool(int64_t)> wanted, std::vector<int64_t> digits)
      : kv_heads_(cfg.n_kv_head), gk_(gk), wanted_(std::move(wanted)), digits_(std::move(digits)),
        attn_(size_t(cfg.n_layer)), keys_(size_t(cfg.n_layer)) {}

  void on_step(const KvCache& cache, ThreadPool& pool, int layer, const std::vector<SeqRows>& items,
               const std::vector<int64_t>& cold_before, int num_q_heads, const kvq::bf16* q) override {
    const int kv_heads = kv_heads_, group = num_q_heads / kv_heads_;
    std::vector<AttnAcc> part(items.size() * size_t(kv_heads));
    pool.parallel_for(int(part.size()), [&](int task) {
      const SeqRows& it = items[size_t(task / kv_heads)];
      const int h = task % kv_heads;
      const HeadKv kv = cache.head_kv(layer, it.seq, h);
      const int64_t len = kv.len - it.count;  // the step's append is committed
      for (int i = 0; i < it.count; ++i) {
        const int64_t p = len + i;
        if (!wanted_(p)) continue;
        const int64_t b = decode_cold_boundary(p, cold_before[size_t(task / kv_heads)], cache.spec().residual,
                                               cache.spec().page);
        for (int g = 0; g < group; ++g) {
          const kvq::bf16* qh = q + (size_t(it.row + i) * size_t(num_q_heads) + size_t(h * group + g)) * D;
          analyse(kv, p, b, qh, part[size_t(task)]);
        }
      }
    });
    for (const AttnAcc& a : part) attn_[size_t(layer)].add(a);
  }

  // Key-group statistics of sequence `seq`'s cold pages and key energy of all its tokens, every
  // layer (at the end of a window).
  void key_stats(const KvCache& cache, int seq) {
    for (size_t l = 0; l < keys_.size(); ++l) {
      KeyAcc& acc = keys_[l];
      const int kv_heads = kv_heads_;
      std::vector<HeadKv> heads;
      for (int h = 0; h < kv_heads; ++h) heads.push_back(cache.head_kv(int(l), seq, h));
      acc.energy.resize(size_t(kv_heads) * D, 0.0);
      const int gk = gk_;
      std::vector<float> ranges, g0(size_t(kv_heads) * D), chan_med(size_t(kv_heads) * D);
      std::vector<float> x(static_cast<size_t>(gk));
      std::vector<std::pair<float, size_t>> dig;  // (range, head * 64 + channel) of a digit's group
      for (int h = 0; h < kv_heads; ++h) {
        const HeadKv& kv = heads[size_t(h)];
        auto k = [&](int64_t t, int d) { return kv.k_raw_t[k_tile_index(t, d)]; };
        std::vector<float> norms(size_t(kv.len));
        for (int64_t t = 0; t < kv.len; ++t) {
          double n2 = 0.0;
          for (int d = 0; d < D; ++d) {
            const double v = k(t, d);
            n2 += v * v;
            acc.energy[size_t(h) * D + size_t(d)] += v * v;
          }
          norms[size_t(t)] = float(std::sqrt(n2));
        }
        const double norm_med = median(norms);
        if (kv.len > 1) acc.k0_ratio += norms[0] / norm_med, ++acc.n_k0;
        for (int64_t t : digits_)
          if (t < kv.len) acc.dig_norm += norms[size_t(t)] / norm_med, ++acc.n_dig_norm;
        const int64_t cold = kv.cold / gk * gk;
        for (int d = 0; d < D && cold > 0; ++d) {
          std::vector<float> chan;
          for (int64_t t0 = 0; t0 < cold; t0 += gk) {
            for (int i = 0; i < gk; ++i) x[size_t(i)] = k(t0 + i, d);
            std::vector<float> s = x;
            std::sort(s.begin(), s.end());
            const float lo = s.front(), hi = s.back(), med = 0.5f * (s[size_t(gk - 1) / 2] + s[size_t(gk) / 2]);
            const bool top = hi - med > 0.0f && hi - med > 2.0f * (s[size_t(gk - 2)] - med);
            const bool bottom = med - lo > 0.0f && med - lo > 2.0f * (med - s[1]);
            acc.single += top || bottom;
            ++acc.groups;
            ranges.push_back(hi - lo);
            chan.push_back(hi - lo);
            if (t0 == 0) {
              g0[size_t(h) * D + size_t(d)] = hi - lo;
              acc.g0_tok0_single += (top && x[0] == hi) || (bottom && x[0] == lo);
              acc.g0_tok0_extreme += x[0] == hi || x[0] == lo;
            }
            for (int64_t t : digits_) {
              if (t < t0 || t >= t0 + gk) continue;
              const float v = x[size_t(t - t0)];
              dig.push_back({hi - lo, size_t(h) * D + size_t(d)});
              acc.dig_extreme += v == hi || v == lo;
              acc.dig_single += (top && v == hi) || (bottom && v == lo);
            }
          }
          chan_med[size_t(h) * D + size_t(d)] = float(median(chan));
        }
      }
      if (ranges.empty()) continue;
      const double layer_med = median(ranges);
      for (size_t c = 0; c < g0.size(); ++c) {
        const double r = g0[c] / layer_med, rc = chan_med[c] > 0.0f ? g0[c] / chan_med[c] : 0.0;
        acc.g0_ratio += r, acc.g0_ratio_max = std::max(acc.g0_ratio_max, r);
        acc.g0_chan += rc, acc.g0_chan_max = std::max(acc.g0_chan_max, rc);
        ++acc.n_g0;
      }
      for (const auto& g : dig) {
        acc.dig_ratio += g.first / layer_med, ++acc.n_dig;
        acc.dig_chan += chan_med[g.second] > 0.0f ? g.first / chan_med[g.second] : 0.0;
      }
    }
  }

  const std::vector<AttnAcc>& attention() const { return attn_; }
  const std::vector<KeyAcc>& keys() const { return keys_; }

 private:
  // One query head at position p with cold boundary b (keys [0, b) quantized in the decode path).
  void analyse(const HeadKv& kv, int64_t p, int64_t b, const kvq::bf16* qh, AttnAcc& a) const {
    thread_local std::vector<float> sr, sq, pr, pq;
    const size_t n = size_t(p + 1), pad = (n + 15) / 16 * 16;
    sr.resize(pad), sq.resize(pad), pr.resize(n), pq.resize(n);
    float qs[D];
    for (int d = 0; d < D; ++d) qs[d] = kScale * qh[d].to_float();  // as attend_head scales q
    scores(kv.k_raw_t, int64_t(n), qs, sr.data());
    scores(kv.k_quant_t, b, qs, sq.data());
    std::copy(sr.begin() + b, sr.begin() + long(n), sq.begin() + b);
    softmax(sr.data(), int64_t(n), pr.data());
    softmax(sq.data(), int64_t(n), pq.data());
    auto first = [&](const std::vector<float>& pv, int64_t k) {
      double m = 0;
      for (int64_t t = 0; t < std::min<int64_t>(k, int64_t(n)); ++t) m += pv[size_t(t)];
      return m;
    };
    a.mass0 += pr[0], a.mass03 += first(pr, 4), ++a.n;
    if (b > 0) {
      a.mass0_raw_c += pr[0], a.mass0_quant_c += pq[0];
      a.mass03_raw_c += first(pr, 4), a.mass03_quant_c += first(pq, 4);
      a.err0 += std::fabs(sq[0] - sr[0]), a.err0_signed += sq[0] - sr[0], ++a.n_c;
      double tv = 0;
      for (size_t t = 0; t < n; ++t) tv += std::fabs(double(pq[t]) - double(pr[t]));
      a.dmass0 += std::fabs(double(pq[0]) - double(pr[0])), a.tv += 0.5 * tv;
      for (int64_t t = 1; t < b; ++t) {
        const double e = std::fabs(sq[size_t(t)] - sr[size_t(t)]);
        a.err_other += e, ++a.n_other;
        if (t < gk_) a.err_g0 += e, ++a.n_g0;
      }
    }
    if (!digits_.empty()) {
      double mr = 0, mq = 0;
      for (int64_t t : digits_) {
        if (t >= int64_t(n)) continue;
        mr += pr[size_t(t)], mq += pq[size_t(t)];
        if (t < b) a.err_dig += std::fabs(sq[size_t(t)] - sr[size_t(t)]), ++a.n_dig;  // cold digits
      }
      a.dig_raw += mr, a.dig_quant += mq;
      a.dig_raw_max = std::max(a.dig_raw_max, mr), a.dig_quant_max = std::max(a.dig_quant_max, mq);
    }
  }

  int kv_heads_, gk_;
  std::function<bool(int64_t)> wanted_;
  std::vector<int64_t> digits_;
  std::vector<AttnAcc> attn_;
  std::vector<KeyAcc> keys_;
};

double ratio(double a, int64_t n) { return n ? a / double(n) : 0.0; }

// Long-format CSV: one value per row.
class Csv {
 public:
  Csv(const std::string& path, const CacheSpec& spec, std::string source) : spec_(spec), source_(std::move(source)) {
    if (path.empty()) return;
    bool fresh = true;
    {
      std::ifstream in(path);
      fresh = !in || in.peek() == std::ifstream::traits_type::eof();
    }
    out_.open(path, std::ios::app);
    if (!out_) throw Error("cannot write " + path);
    if (fresh) out_ << "model,format,gk,gv,residual,variant,source,layer,metric,value\n";
  }
  void row(int layer, const char* metric, double value) {
    if (!out_.is_open()) return;
    char v[64];
    std::snprintf(v, sizeof v, "%.6g", value);
    out_ << "SmolLM2-135M-Instruct-Q4_1," << format_label(spec_) << ',' << spec_.gk << ',' << spec_.gv << ','
         << spec_.residual << ',' << variant_label(spec_) << ',' << source_ << ',' << layer << ',' << metric << ',' << v
         << '\n';
  }

 private:
  CacheSpec spec_;
  std::string source_;
  std::ofstream out_;
};

std::string top_channels(const std::vector<double>& energy, int k, std::vector<int>& idx, double& share) {
  idx.resize(energy.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int(i);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) { return energy[size_t(a)] > energy[size_t(b)]; });
  idx.resize(size_t(k));
  double total = 0;
  for (double e : energy) total += e;
  std::string s;
  share = 0;
  for (int i : idx) {
    const double sh = total > 0 ? energy[size_t(i)] / total : 0.0;
    share += sh;
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%d:%d %.0f%%", s.empty() ? "" : " ", i / D, i % D, 100.0 * sh);
    s += buf;
  }
  return s;
}

void report_windows(const Diagnoser& dg, const CacheSpec& spec, const DiagnoseOptions& opt) {
  char source[96];
  std::snprintf(source, sizeof source, "text@%lld+%lldx%d/stride%d", (long long)opt.start, (long long)opt.window,
                opt.windows, opt.query_stride);
  Csv csv(opt.csv_path, spec, source);
  std::printf("\ndiagnose %s: %s (Gk %d)\n", describe(spec).c_str(), source, spec.gk);
  std::printf("%5s %6s %6s %6s %11s %11s %7s %7s %6s %-27s %5s %6s %6s %6s %6s %6s %6s %6s\n", "layer", "mass0", "m0-3",
              "|k0|/", "g0rng/med", "g0rng/chan", "single", "t0sngl", "t0ext", "top-3 channels (h:d share)", "top3", "err0", "errg0",
              "errO", "m0 raw", "m0 q", "|dm0|", "TV");
  std::printf("%5s %6s %6s %6s %11s %11s %7s %7s %6s %-27s %5s %6s %6s %6s %6s %6s %6s %6s\n", "", "", "", "med", "mean/max",
              "mean/max", "groups", "groups", "groups", "", "share", "nats", "nats", "nats", "cold q", "cold q", "cold q", "cold q");
  const auto& at = dg.attention();
  const auto& ks = dg.keys();
  AttnAcc all;
  for (size_t l = 0; l < at.size(); ++l) {
    const AttnAcc& a = at[l];
    const KeyAcc& k = ks[l];
    all.add(a);
    std::vector<int> top;
    double share = 0;
    const std::string tops = top_channels(k.energy, 3, top, share);
    const double m0 = ratio(a.mass0, a.n), m03 = ratio(a.mass03, a.n), k0 = ratio(k.k0_ratio, k.n_k0);
    const double g0 = ratio(k.g0_ratio, k.n_g0), g0c = ratio(k.g0_chan, k.n_g0);
    const double single = ratio(double(k.single), k.groups), t0s = ratio(double(k.g0_tok0_single), k.n_g0);
    const double e0 = ratio(a.err0, a.n_c), e0s = ratio(a.err0_signed, a.n_c), eg0 = ratio(a.err_g0, a.n_g0),
                 eo = ratio(a.err_other, a.n_other);
    const double m0r = ratio(a.mass0_raw_c, a.n_c), m0q = ratio(a.mass0_quant_c, a.n_c), dm0 = ratio(a.dmass0, a.n_c),
                 tv = ratio(a.tv, a.n_c);
    std::printf("%5zu %6.3f %6.3f %6.2f %5.2f/%5.1f %5.2f/%5.1f %6.1f%% %6.1f%% %5.1f%% %-27s %4.0f%% %6.3f %6.3f %6.3f %6.3f "
                "%6.3f %6.3f %6.3f\n",
                l, m0, m03, k0, g0, k.g0_ratio_max, g0c, k.g0_chan_max, 100 * single, 100 * t0s,
                100 * ratio(double(k.g0_tok0_extreme), k.n_g0), tops.c_str(), 100 * share,
                e0, eg0, eo, m0r, m0q, dm0, tv);
    const int L = int(l);
    csv.row(L, "mass0", m0);
    csv.row(L, "mass0_3", m03);
    csv.row(L, "k0_norm_ratio", k0);
    csv.row(L, "g0_range_ratio_mean", g0);
    csv.row(L, "g0_range_ratio_max", k.g0_ratio_max);
    csv.row(L, "g0_chan_ratio_mean", g0c);
    csv.row(L, "g0_chan_ratio_max", k.g0_chan_max);
    csv.row(L, "single_share", single);
    csv.row(L, "g0_tok0_single_share", t0s);
    csv.row(L, "g0_tok0_extreme_share", ratio(double(k.g0_tok0_extreme), k.n_g0));
    for (size_t i = 0; i < top.size(); ++i) {
      const std::string m = "top" + std::to_string(i + 1) + "_channel";  // kv head * 64 + channel
      csv.row(L, m.c_str(), top[i]);
    }
    csv.row(L, "top3_share", share);
    csv.row(L, "err0", e0);
    csv.row(L, "err0_signed", e0s);
    csv.row(L, "err_g0", eg0);
    csv.row(L, "err_other", eo);
    csv.row(L, "mass0_raw_c", m0r);
    csv.row(L, "mass0_quant_c", m0q);
    csv.row(L, "mass0_3_raw_c", ratio(a.mass03_raw_c, a.n_c));
    csv.row(L, "mass0_3_quant_c", ratio(a.mass03_quant_c, a.n_c));
    csv.row(L, "dmass0_abs", dm0);
    csv.row(L, "tv", tv);
    csv.row(L, "queries", double(a.n));
  }
  std::printf("all layers: mass0 %.3f, err0 %.3f nats, err other cold %.3f nats; queries with token 0 cold: mass0 raw %.3f "
              "-> quant %.3f, mean |dmass0| %.3f, mean TV %.3f (%lld query heads per layer, %lld with token 0 cold)\n",
              ratio(all.mass0, all.n), ratio(all.err0, all.n_c), ratio(all.err_other, all.n_other),
              ratio(all.mass0_raw_c, all.n_c), ratio(all.mass0_quant_c, all.n_c), ratio(all.dmass0, all.n_c),
              ratio(all.tv, all.n_c), (long long)(at.empty() ? 0 : at[0].n), (long long)(at.empty() ? 0 : at[0].n_c));
}

void report_passkey(const Diagnoser& dg, const CacheSpec& spec, const DiagnoseOptions& opt, const PasskeyPrompt& pk,
                    const std::string& answer, bool ok) {
  char source[96];
  std::snprintf(source, sizeof source, "passkey@%lld/%.2f/seed%llu", (long long)opt.passkey_length, opt.passkey_depth,
                (unsigned long long)opt.seed);
  Csv csv(opt.csv_path, spec, source);
  std::printf("\ndiagnose %s: %s, %zu tokens, key %d at tokens %lld..%lld (%zu digit tokens); answer \"%s\" %s\n",
              describe(spec).c_str(), source, pk.tokens.size(), pk.key, (long long)pk.key_digits.front(),
              (long long)pk.key_digits.back(), pk.key_digits.size(), answer.c_str(), ok ? "ok" : "wrong");
  std::printf("%5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "layer", "dig raw", "dig q", "max raw",
              "max q", "errDig", "errO", "m0 raw", "m0 q", "TV", "|kdig|/", "rng/med", "rng/chan", "extreme", "single");
  std::printf("%5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "", "mean hd", "mean hd", "head", "head",
              "nats", "nats", "", "", "", "med", "dig grp", "dig grp", "dig", "dig");
  const auto& ks = dg.keys();
  const auto& at = dg.attention();
  for (size_t l = 0; l < at.size(); ++l) {
    const AttnAcc& a = at[l];
    const double dr = ratio(a.dig_raw, a.n), dq = ratio(a.dig_quant, a.n), ed = ratio(a.err_dig, a.n_dig),
                 eo = ratio(a.err_other, a.n_other), m0r = ratio(a.mass0_raw_c, a.n_c), m0q = ratio(a.mass0_quant_c, a.n_c);
    const double tv = ratio(a.tv, a.n_c);
    const KeyAcc& k = ks[l];
    const double kn = ratio(k.dig_norm, k.n_dig_norm), gr = ratio(k.dig_ratio, k.n_dig), gc = ratio(k.dig_chan, k.n_dig),
                 ex = ratio(double(k.dig_extreme), k.n_dig), sg = ratio(double(k.dig_single), k.n_dig);
    std::printf("%5zu %8.4f %8.4f %8.4f %8.4f %8.3f %8.3f %8.3f %8.3f %8.3f %8.2f %8.2f %8.2f %7.1f%% %7.1f%%\n", l, dr, dq,
                a.dig_raw_max, a.dig_quant_max, ed, eo, m0r, m0q, tv, kn, gr, gc, 100 * ex, 100 * sg);
    const int L = int(l);
    csv.row(L, "digits_mass_raw", dr);
    csv.row(L, "digits_mass_quant", dq);
    csv.row(L, "digits_mass_raw_maxhead", a.dig_raw_max);
    csv.row(L, "digits_mass_quant_maxhead", a.dig_quant_max);
    csv.row(L, "err_digits", ed);
    csv.row(L, "err_other", eo);
    csv.row(L, "err0", ratio(a.err0, a.n_c));
    csv.row(L, "mass0_raw_c", m0r);
    csv.row(L, "mass0_quant_c", m0q);
    csv.row(L, "tv", tv);
    csv.row(L, "digits_norm_ratio", kn);
    csv.row(L, "digits_group_range_ratio", gr);
    csv.row(L, "digits_group_chan_ratio", gc);
    csv.row(L, "digits_extreme_share", ex);
    csv.row(L, "digits_single_share", sg);
  }
  csv.row(-1, "passkey_correct", ok ? 1.0 : 0.0);
}

}  // namespace

void run_diagnose(const Tokenizer& tok, const ModelFactory& make, const CacheSpec& spec, const DiagnoseOptions& opt) {
  if (spec.path != AttentionPath::kDecode) throw Error("diagnose needs --attention decode");
  if (opt.text_path.empty() && opt.passkey_length <= 0) throw Error("diagnose needs --text FILE and/or --passkey-prompt LENGTH,DEPTH");
  if (opt.chunk < 1 || opt.query_stride < 1) throw Error("diagnose: bad --chunk or --query-stride");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  if (!opt.text_path.empty()) {
    std::ifstream in(opt.text_path, std::ios::binary);
    if (!in) throw Error("diagnose: cannot open text file '" + opt.text_path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> ids = tok.encode(ss.str(), false);
    if (opt.window < 2 || opt.windows < 1 || opt.start < 0 || opt.start + opt.window * opt.windows > int64_t(ids.size()))
      throw Error("diagnose: the text has " + std::to_string(ids.size()) + " tokens, fewer than start + windows x window");
    std::unique_ptr<Model> model = make(spec, 1, opt.window);
    const int stride = opt.query_stride;
    Diagnoser dg(model->config(), spec.gk, [stride](int64_t p) { return p % stride == stride - 1; }, {});
    model->set_step_observer(&dg);
    for (int w = 0; w < opt.windows; ++w) {
      model->reset(0);
      const auto* base = ids.data() + opt.start + int64_t(w) * opt.window;
      feed(*model, 0, std::vector<int32_t>(base, base + opt.window), opt.chunk, logits);
      dg.key_stats(model->cache(), 0);
      std::printf("diagnose window %d: %.1f s\n", w,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::fflush(stdout);
    }
    model->set_step_observer(nullptr);
    report_windows(dg, spec, opt);
  }
  if (opt.passkey_length > 0) {
    const PasskeyPrompt pk = passkey_prompt(tok, opt.passkey_length, opt.passkey_depth, passkey_first_key(opt.seed));
    if (pk.key_digits.empty()) throw Error("diagnose: the key has no digit tokens");
    std::unique_ptr<Model> model = make(spec, 1, opt.passkey_length);
    const int64_t last = int64_t(pk.tokens.size()) - 1;
    Diagnoser dg(model->config(), spec.gk, [last](int64_t p) { return p == last; }, pk.key_digits);
    model->set_step_observer(&dg);
    model->reset(0);
    feed(*model, 0, pk.tokens, opt.chunk, logits);
    model->set_step_observer(nullptr);
    dg.key_stats(model->cache(), 0);
    const std::string answer = passkey_answer(*model, 0, tok, logits);
    report_passkey(dg, spec, opt, pk, answer, passkey_correct(answer, pk.key));
  }
  std::printf("diagnose %s: %.1f s\n", describe(spec).c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace smollm2

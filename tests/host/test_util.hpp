// tests/host/test_util.hpp - helpers shared by the host tests (one copy; test files include this).
//
//   configurations ............ the CacheConfig aliases the suite exercises
//   make_seq .................. model-like K/V tokens, keys with realistic outlier channels
//   append_rows / append_seq .. one reference::append call on a HostCache (reserve, append, commit)
//   bound checks .............. DESIGN section 4 error bound, element by element, against raw input
//   Snapshot .................. every buffer of a HostCache, to prove that nothing was written
//   naive_attention ........... fp64 causal GQA attention, independent of reference::attention
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <kvq/kvq.hpp>

namespace kvq_test {

using kvq::Role;
using kvq::Status;

// ---- configurations --------------------------------------------------------------------------
using CfgNone = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::NoQuant, kvq::NoQuant>;
using CfgInt8 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int8, kvq::Int8>;
using CfgInt4 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int4<32>, kvq::Int4<32>>;
using CfgInt2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using CfgK4V2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int4<32>, kvq::Int2<32>>;
using CfgK3V2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>;  // host reference only
using CfgFp16Int2 = kvq::CacheConfig<kvq::fp16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
using CfgFp16None = kvq::CacheConfig<kvq::fp16, 128, 64, kvq::NoQuant, kvq::NoQuant>;
using CfgP16Int2 = kvq::CacheConfig<kvq::bf16, 128, 16, kvq::Int2<16>, kvq::Int2<32>>;
using CfgP16K4V2D64 = kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int4<16>, kvq::Int2<32>>;
using CfgP16Int8Fp16D64 = kvq::CacheConfig<kvq::fp16, 64, 16, kvq::Int8, kvq::Int8>;
using CfgP32Int2G16D64 = kvq::CacheConfig<kvq::bf16, 64, 32, kvq::Int2<16>, kvq::Int2<16>>;

template <class Cfg>
using HostCache = kvq::reference::HostCache<Cfg>;

// ---- numbers ---------------------------------------------------------------------------------
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The input sanitation of DESIGN section 4, written independently of kvq::sanitize.
inline float sanitized(float x) {
  if (std::isnan(x)) return 0.0f;
  if (x > 65504.0f) return 65504.0f;
  if (x < -65504.0f) return -65504.0f;
  return x;
}

// ---- data --------------------------------------------------------------------------------------
struct GenOptions {
  bool key_outliers = true;   // a few key channels per head carry 10-50x magnitude
  int outliers_per_head = 4;
  float min_mag = 10.0f, max_mag = 50.0f;
  float outlier_offset = 0.8f;  // outlier channel: mag * (sign * offset + spread * N(0,1))
  float outlier_spread = 0.4f;
  float key_scale = 1.0f, value_scale = 1.0f;
};

// K and V rows of n tokens: [n][heads][D] each, in the model dtype.
template <class T>
struct Seq {
  int64_t n = 0;
  int heads = 0, D = 0;
  std::vector<T> k, v;
  const T* k_row(int64_t t, int h = 0) const { return k.data() + (size_t(t) * size_t(heads) + size_t(h)) * size_t(D); }
  const T* v_row(int64_t t, int h = 0) const { return v.data() + (size_t(t) * size_t(heads) + size_t(h)) * size_t(D); }
  T* k_mut(int64_t t, int h = 0) { return k.data() + (size_t(t) * size_t(heads) + size_t(h)) * size_t(D); }
  T* v_mut(int64_t t, int h = 0) { return v.data() + (size_t(t) * size_t(heads) + size_t(h)) * size_t(D); }
};

template <class T>
Seq<T> make_seq(uint64_t seed, int64_t n, int heads, int D, const GenOptions& o = GenOptions{}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(o.min_mag, o.max_mag);
  // per (head, channel): magnitude and sign; 1 and + for ordinary channels
  std::vector<float> mag(size_t(heads) * size_t(D), 1.0f), sgn(mag.size(), 0.0f);
  if (o.key_outliers) {
    for (int h = 0; h < heads; ++h) {
      std::vector<int> ch(static_cast<size_t>(D));
      for (int c = 0; c < D; ++c) ch[size_t(c)] = c;
      std::shuffle(ch.begin(), ch.end(), rng);
      for (int i = 0; i < o.outliers_per_head && i < D; ++i) {
        const size_t idx = size_t(h) * size_t(D) + size_t(ch[size_t(i)]);
        mag[idx] = uni(rng);
        sgn[idx] = (rng() & 1u) ? 1.0f : -1.0f;
      }
    }
  }
  Seq<T> s;
  s.n = n;
  s.heads = heads;
  s.D = D;
  s.k.resize(size_t(n) * size_t(heads) * size_t(D));
  s.v.resize(s.k.size());
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h)
      for (int c = 0; c < D; ++c) {
        const size_t idx = size_t(h) * size_t(D) + size_t(c);
        const size_t e = (size_t(t) * size_t(heads) + size_t(h)) * size_t(D) + size_t(c);
        const float kx = sgn[idx] != 0.0f ? mag[idx] * (sgn[idx] * o.outlier_offset + o.outlier_spread * normal(rng))
                                          : normal(rng);
        s.k[e] = T::from_float(o.key_scale * kx);
        s.v[e] = T::from_float(o.value_scale * normal(rng));
      }
  return s;
}

// Random model-dtype rows (queries): [n][heads][D].
template <class T>
std::vector<T> make_rows(uint64_t seed, int64_t n, int heads, int D, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<T> r(size_t(n) * size_t(heads) * size_t(D));
  for (auto& x : r) x = T::from_float(normal(rng));
  return r;
}

// One record of Cfg (one KV head), encoded by the host reference from `rows`: the page's P key
// rows, then its P value rows, [2P][D].
template <class Cfg>
std::vector<uint8_t> encode_record(const std::vector<typename Cfg::dtype>& rows) {
  std::vector<uint8_t> record(Cfg::record_bytes);
  kvq::SeqAppend s{};
  s.len_new = Cfg::page;
  s.cold_new = Cfg::page;
  kvq::CacheView<typename Cfg::dtype> view{};
  view.num_kv_heads = 1;
  uint32_t flags = 0;
  kvq::reference::encode_page<Cfg>(view, rows.data(), rows.data() + size_t(Cfg::page) * Cfg::head_dim, s, 0, record.data(),
                                   flags);
  return record;
}

template <class T>
bool same_bits(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

// ---- caches --------------------------------------------------------------------------------------
// A HostCache for `batch` sequences of up to max_tokens each (pages and block-table rows to match),
// with `batch + extra_slots` hot slots.
template <class Cfg>
HostCache<Cfg> make_cache(int heads, int residual, int64_t max_tokens, int batch = 1, int extra_slots = 0) {
  const int max_pages = int(max_tokens / Cfg::page + 1);
  return HostCache<Cfg>(heads, int64_t(max_pages) * batch + 3, batch + extra_slots, residual, max_pages, batch);
}

// ---- appends on a HostCache ------------------------------------------------------------------
// One reference::append call over the whole batch of `c`: sequence b gets counts[b] new tokens,
// whose K/V rows ([counts[b]][heads][D]) start at k[b] / v[b]. Reserves pages first, commits the
// new lengths on success and checks cold_out against them.
template <class Cfg>
Status append_rows(HostCache<Cfg>& c, const std::vector<int64_t>& counts, const std::vector<const typename Cfg::dtype*>& k,
                   const std::vector<const typename Cfg::dtype*>& v, uint32_t* flags = nullptr) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  kvq::CacheView<T> view = c.view();
  const int heads = view.num_kv_heads;
  const int batch = int(counts.size());
  std::vector<int32_t> cu(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) cu[size_t(b) + 1] = cu[size_t(b)] + int32_t(counts[size_t(b)]);
  const size_t row = size_t(heads) * size_t(D);
  std::vector<T> nk(std::max<size_t>(1, size_t(cu[size_t(batch)]) * row)), nv(nk.size());
  for (int b = 0; b < batch; ++b)
    if (counts[size_t(b)] > 0) {
      std::memcpy(nk.data() + size_t(cu[size_t(b)]) * row, k[size_t(b)], size_t(counts[size_t(b)]) * row * sizeof(T));
      std::memcpy(nv.data() + size_t(cu[size_t(b)]) * row, v[size_t(b)], size_t(counts[size_t(b)]) * row * sizeof(T));
    }
  for (int b = 0; b < batch; ++b) REQUIRE(c.reserve(b, counts[size_t(b)]));
  std::vector<int32_t> cold_out(size_t(batch), -1);
  kvq::AppendBatch<T> a;
  a.batch = batch;
  a.lengths = c.lengths();
  a.cu_new = cu.data();
  a.new_k = nk.data();
  a.new_v = nv.data();
  a.cold_out = cold_out.data();
  const Status st = kvq::reference::append<Cfg>(view, a, flags);
  if (st != Status::kSuccess) return st;
  for (int b = 0; b < batch; ++b) {
    c.commit(b, counts[size_t(b)]);
    CHECK(cold_out[size_t(b)] == c.cold_len[size_t(b)]);
  }
  return st;
}

// Appends every sequence of `c` in random mixed chunks, one reference::append a round, until
// sequence b holds total[b] tokens (rows from seqs[b]): a round gives each sequence 0, 1 or
// 1..max_chunk tokens, drawn from rng in batch order.
template <class Cfg, class T = typename Cfg::dtype>
void append_mixed_chunks(HostCache<Cfg>& c, const std::vector<Seq<T>>& seqs, const std::vector<int64_t>& total,
                         std::mt19937_64& rng, int max_chunk) {
  const size_t B = total.size();
  std::vector<int64_t> done(B, 0);
  auto pending = [&] {
    for (size_t b = 0; b < B; ++b)
      if (done[b] < total[b]) return true;
    return false;
  };
  while (pending()) {
    std::vector<int64_t> counts(B);
    std::vector<const T*> k(B), v(B);
    for (size_t b = 0; b < B; ++b) {
      const uint64_t kind = rng() % 3;
      const int64_t n = kind == 0 ? 0 : kind == 1 ? 1 : 1 + int64_t(rng() % uint64_t(max_chunk));
      counts[b] = std::min(n, total[b] - done[b]);
      k[b] = seqs[b].k_row(done[b]);
      v[b] = seqs[b].v_row(done[b]);
      done[b] += counts[b];
    }
    REQUIRE(append_rows<Cfg>(c, counts, k, v) == Status::kSuccess);
  }
}

// Appends tokens [from, from + n) of s to sequence b (other sequences of the batch get none).
template <class Cfg>
Status append_seq(HostCache<Cfg>& c, const Seq<typename Cfg::dtype>& s, int64_t from, int64_t n, int b = 0,
                  uint32_t* flags = nullptr) {
  using T = typename Cfg::dtype;
  const size_t batch = c.len.size();
  std::vector<int64_t> counts(batch, 0);
  std::vector<const T*> k(batch, nullptr), v(batch, nullptr);
  counts[size_t(b)] = n;
  k[size_t(b)] = s.k_row(from);
  v[size_t(b)] = s.v_row(from);
  return append_rows<Cfg>(c, counts, k, v, flags);
}

// Expected cold length after appends alone (DESIGN section 5).
inline int64_t expected_cold(int64_t L, int R, int P) { return L >= R + P ? ((L - R) / P) * P : 0; }

// ---- cache comparisons -----------------------------------------------------------------------
// The cold records of sequence b in token order: pages [0, C/P), all heads.
template <class Cfg>
std::vector<uint8_t> seq_cold_bytes(HostCache<Cfg>& c, int b) {
  const auto v = c.view();
  const int64_t pages = c.cold_len[size_t(b)] / Cfg::page;
  std::vector<uint8_t> out;
  for (int64_t p = 0; p < pages; ++p) {
    const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
    REQUIRE(id >= 0);
    const uint8_t* rec = v.cold + kvq::record_offset(id, 0, v.num_kv_heads, Cfg::record_bytes);
    out.insert(out.end(), rec, rec + size_t(v.num_kv_heads) * Cfg::record_bytes);
  }
  return out;
}

// Whether the live ring rows [C, L) of sequence ba of x and bb of y hold the same bits (lengths equal).
template <class Cfg>
bool live_rows_equal(HostCache<Cfg>& x, int ba, HostCache<Cfg>& y, int bb) {
  if (x.len[size_t(ba)] != y.len[size_t(bb)] || x.cold_len[size_t(ba)] != y.cold_len[size_t(bb)]) return false;
  const auto vx = x.view(), vy = y.view();
  const int W = vx.residual + Cfg::page;
  for (int64_t t = x.cold_len[size_t(ba)]; t < x.len[size_t(ba)]; ++t)
    for (int h = 0; h < vx.num_kv_heads; ++h) {
      const size_t ox = kvq::hot_offset(vx.hot_slot[ba], kvq::ring_row(t, W), h, W, vx.num_kv_heads, Cfg::head_dim);
      const size_t oy = kvq::hot_offset(vy.hot_slot[bb], kvq::ring_row(t, W), h, W, vy.num_kv_heads, Cfg::head_dim);
      if (!same_bits(vx.hot_k + ox, vy.hot_k + oy, Cfg::head_dim)) return false;
      if (!same_bits(vx.hot_v + ox, vy.hot_v + oy, Cfg::head_dim)) return false;
    }
  return true;
}

// Every buffer of a HostCache, byte for byte.
template <class Cfg>
struct Snapshot {
  std::vector<uint8_t> cold;
  std::vector<typename Cfg::dtype> hot_k, hot_v;
  std::vector<int32_t> block_table, hot_slot, len, cold_len;
  explicit Snapshot(const HostCache<Cfg>& c)
      : cold(c.cold), hot_k(c.hot_k), hot_v(c.hot_v), block_table(c.block_table), hot_slot(c.hot_slot), len(c.len),
        cold_len(c.cold_len) {}
  bool unchanged(const HostCache<Cfg>& c) const {
    return cold == c.cold && same_bits(hot_k.data(), c.hot_k.data(), hot_k.size()) &&
           same_bits(hot_v.data(), c.hot_v.data(), hot_v.size()) && block_table == c.block_table &&
           hot_slot == c.hot_slot && len == c.len && cold_len == c.cold_len;
  }
};

// Fills the hot rings with a recognisable pattern so that "nothing written" is not vacuous.
template <class Cfg>
void poison_rings(HostCache<Cfg>& c, uint16_t pattern = 0x7fc1) {
  for (auto& x : c.hot_k) x.bits = pattern;
  for (auto& x : c.hot_v) x.bits = pattern;
}

// ---- DESIGN section 4 error bound ------------------------------------------------------------
struct BoundStats {
  int64_t checked = 0, bad = 0;
  double worst = 0.0;  // max error / bound
  std::string first;   // description of the first violation
  void fail(const std::string& what) {
    if (bad++ == 0) first = what;
  }
};

// Bound of an asymmetric INT-b element: scale/2 + |zero - lo| + (2^b-1)|exact - stored| + float eps.
inline double asym_bound(double lo, double hi, int bits, float zero, float scale) {
  const double maxc = double((1 << bits) - 1);
  const double exact = (hi - lo) / maxc;
  const double eps = (std::fabs(lo) + std::fabs(hi) + std::fabs(double(zero)) + maxc * double(scale)) * std::ldexp(1.0, -21) +
                     1e-30;
  return double(scale) / 2 + std::fabs(double(zero) - lo) + maxc * std::fabs(exact - double(scale)) + eps;
}

// Checks the K (R = kKey) or V section of one record against the raw rows it was encoded from.
// row(t) -> const T* (D raw values of token t of the page).
template <class Q, Role R, int D, int P, class T, class Row>
void check_section(const uint8_t* codes, const uint8_t* params, Row&& row, BoundStats& st) {
  auto decoded = [&](int t, int c) { return kvq::decode_element<Q, R, D, P, T>(codes, params, t, c); };
  std::ostringstream msg;
  if constexpr (Q::kind == kvq::QuantKind::kNone) {
    for (int t = 0; t < P; ++t)
      for (int c = 0; c < D; ++c) {
        ++st.checked;
        const float raw = row(t)[c].to_float();
        const float got = decoded(t, c);
        if (bits_of(raw) != bits_of(got) && !(std::isnan(raw) && std::isnan(got))) {
          msg << "none: t=" << t << " c=" << c << " raw=" << raw << " got=" << got;
          st.fail(msg.str());
        }
      }
  } else if constexpr (Q::kind == kvq::QuantKind::kInt8) {
    const float* scales = reinterpret_cast<const float*>(params);
    for (int t = 0; t < P; ++t) {
      float absmax = 0.0f;
      for (int c = 0; c < D; ++c) absmax = std::max(absmax, std::fabs(sanitized(row(t)[c].to_float())));
      const float want_scale = absmax / 127.0f;
      if (bits_of(scales[t]) != bits_of(want_scale)) {
        msg << "int8 scale t=" << t << " stored=" << scales[t] << " want=" << want_scale;
        st.fail(msg.str());
      }
      for (int c = 0; c < D; ++c) {
        ++st.checked;
        const double x = sanitized(row(t)[c].to_float());
        const double got = decoded(t, c);
        const double bound = double(scales[t]) / 2 + std::fabs(x) * std::ldexp(1.0, -21) + 1e-30;
        const double err = std::fabs(x - got);
        st.worst = std::max(st.worst, err / bound);
        if (!(err <= bound)) {
          msg << "int8 t=" << t << " c=" << c << " x=" << x << " got=" << got << " bound=" << bound;
          st.fail(msg.str());
        }
      }
    }
  } else {
    constexpr int G = Q::group;
    // Visit every group: keys (channel c, tokens [g*G, g*G+G)), values (token t, channels [g*G, ...)).
    const int outer = R == Role::kKey ? (P / G) * D : P * (D / G);
    for (int i = 0; i < outer; ++i) {
      int t0, c0, dt, dc;
      if (R == Role::kKey) {
        t0 = (i / D) * G, c0 = i % D, dt = 1, dc = 0;
      } else {
        t0 = i / (D / G), c0 = (i % (D / G)) * G, dt = 0, dc = 1;
      }
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (int k = 0; k < G; ++k) {
        const double x = sanitized(row(t0 + k * dt)[c0 + k * dc].to_float());
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
      const kvq::AsymParams p = kvq::asym_params_at<Q, R, D, P>(params, t0, c0);
      const float zero = kvq::f16_bits_to_f32(p.zero), scale = kvq::f16_bits_to_f32(p.scale);
      if (!std::isfinite(zero) || !std::isfinite(scale) || scale < 0.0f) {
        msg << "non-finite params at t0=" << t0 << " c0=" << c0 << " zero=" << zero << " scale=" << scale;
        st.fail(msg.str());
        continue;
      }
      const double bound = asym_bound(lo, hi, Q::bits, zero, scale);
      for (int k = 0; k < G; ++k) {
        const int t = t0 + k * dt, c = c0 + k * dc;
        ++st.checked;
        const double x = sanitized(row(t)[c].to_float());
        const double got = decoded(t, c);
        const double err = std::fabs(x - got);
        st.worst = std::max(st.worst, err / bound);
        if (!(err <= bound)) {
          msg << (R == Role::kKey ? "key" : "value") << " t=" << t << " c=" << c << " x=" << x << " got=" << got
              << " lo=" << lo << " hi=" << hi << " zero=" << zero << " scale=" << scale << " bound=" << bound;
          st.fail(msg.str());
        }
      }
    }
  }
}

// Both sections of a record of Cfg.
template <class Cfg, class RowK, class RowV>
void check_record(const uint8_t* rec, RowK&& row_k, RowV&& row_v, BoundStats& st) {
  constexpr kvq::RecordOffsets o = Cfg::record;
  using T = typename Cfg::dtype;
  check_section<typename Cfg::k_quant, Role::kKey, Cfg::head_dim, Cfg::page, T>(rec + o.k_codes, rec + o.k_params, row_k, st);
  check_section<typename Cfg::v_quant, Role::kValue, Cfg::head_dim, Cfg::page, T>(rec + o.v_codes, rec + o.v_params, row_v,
                                                                                 st);
}

// Checks sequence b of a cache against the raw tokens s it was appended from:
//   - cold length as DESIGN section 5 says (when `expect_cold` >= 0),
//   - live ring rows [C, L) hold the input bits,
//   - every cold record within the bound of its raw page,
//   - dequantize_sequence: hot tokens bit-exact, cold tokens = model-dtype rounding of the decoded value
//     (saturating: never Inf).
template <class Cfg>
void check_sequence(HostCache<Cfg>& c, int b, const Seq<typename Cfg::dtype>& s) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  const auto v = c.view();
  const int64_t L = c.len[size_t(b)], C = c.cold_len[size_t(b)];
  const int W = v.residual + P;
  const int H = v.num_kv_heads;
  REQUIRE(L <= s.n);
  int64_t bad_ring = 0;
  for (int64_t t = C; t < L; ++t)
    for (int h = 0; h < H; ++h) {
      const size_t o = kvq::hot_offset(v.hot_slot[b], kvq::ring_row(t, W), h, W, H, D);
      if (!same_bits(v.hot_k + o, s.k_row(t, h), D) || !same_bits(v.hot_v + o, s.v_row(t, h), D)) ++bad_ring;
    }
  CHECK_MESSAGE(bad_ring == 0, "ring rows not holding their tokens: ", bad_ring);
  BoundStats st;
  for (int64_t p = 0; p < C / P; ++p)
    for (int h = 0; h < H; ++h) {
      const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + p];
      const uint8_t* rec = v.cold + kvq::record_offset(id, h, H, Cfg::record_bytes);
      check_record<Cfg>(rec, [&](int t) { return s.k_row(p * P + t, h); }, [&](int t) { return s.v_row(p * P + t, h); }, st);
    }
  CHECK_MESSAGE(st.bad == 0, st.first);
  std::vector<T> ko(std::max<size_t>(1, size_t(L) * H * D)), vo(ko.size());
  REQUIRE(kvq::reference::dequantize_sequence<Cfg>(v, c.batch(), b, L, C, ko.data(), vo.data()) == Status::kSuccess);
  int64_t bad_hot = 0, bad_cold = 0;
  for (int64_t t = 0; t < L; ++t)
    for (int h = 0; h < H; ++h) {
      const T* gk = ko.data() + (size_t(t) * H + h) * D;
      const T* gv = vo.data() + (size_t(t) * H + h) * D;
      if (t >= C) {
        if (!same_bits(gk, s.k_row(t, h), D) || !same_bits(gv, s.v_row(t, h), D)) ++bad_hot;
        continue;
      }
      const int32_t id = v.block_table[int64_t(b) * v.max_pages_per_seq + t / P];
      const uint8_t* rec = v.cold + kvq::record_offset(id, h, H, Cfg::record_bytes);
      for (int ch = 0; ch < D; ++ch) {
        // rounded to the model dtype, saturating at the fp16 maximum (FORMAT.md 3.5)
        const T wk = T::from_float_saturate(kvq::decode_record_element<Cfg, Role::kKey>(rec, int(t % P), ch));
        const T wv = T::from_float_saturate(kvq::decode_record_element<Cfg, Role::kValue>(rec, int(t % P), ch));
        if (gk[ch].bits != wk.bits || gv[ch].bits != wv.bits) ++bad_cold;
        if (!std::isfinite(gk[ch].to_float()) || !std::isfinite(gv[ch].to_float())) ++bad_cold;
      }
    }
  CHECK_MESSAGE(bad_hot == 0, "hot tokens not bit-exact in dequantize_sequence: ", bad_hot);
  CHECK_MESSAGE(bad_cold == 0, "cold tokens not the rounded decoded values: ", bad_cold);
}

// ---- attention ---------------------------------------------------------------------------------
// Inputs of one reference::attention call (host memory) and the call itself.
template <class T>
struct AttnCall {
  int32_t num_q_heads = 0;
  std::vector<int32_t> len, cold, cu_q;
  std::vector<T> q, new_k, new_v;  // [cu_q[batch]][heads][D]
  float softmax_scale = 0.0f, softcap = 0.0f;
  kvq::AttentionBatch<T> batch() const {
    kvq::AttentionBatch<T> a;
    a.batch = int32_t(len.size());
    a.num_q_heads = num_q_heads;
    a.lengths = kvq::SeqLengths{len.data(), cold.data()};
    a.cu_q = cu_q.data();
    a.q = q.data();
    a.new_k = new_k.data();
    a.new_v = new_v.data();
    a.softmax_scale = softmax_scale;
    a.softcap = softcap;
    return a;
  }
};

template <class Cfg>
std::vector<float> run_attention(HostCache<Cfg>& c, const AttnCall<typename Cfg::dtype>& call) {
  std::vector<float> out(size_t(call.cu_q.back()) * size_t(call.num_q_heads) * Cfg::head_dim, -12345.0f);
  REQUIRE(kvq::reference::attention<Cfg>(c.view(), call.batch(), out.data()) == Status::kSuccess);
  return out;
}

// A single-sequence attention step: q_len queries after the cache's current length of sequence b,
// with fresh K/V rows k, v ([q_len][heads][D]) and the cache's cold length `cold`.
template <class T>
AttnCall<T> single_call(int64_t len, int64_t cold, int64_t q_len, int num_q_heads, const T* k, const T* v,
                        const std::vector<T>& q, int heads, int D, float scale, float softcap = 0.0f) {
  AttnCall<T> a;
  a.num_q_heads = num_q_heads;
  a.len = {int32_t(len)};
  a.cold = {int32_t(cold)};
  a.cu_q = {0, int32_t(q_len)};
  a.q = q;
  const size_t n = size_t(q_len) * size_t(heads) * size_t(D);
  a.new_k.assign(k, k + n);
  a.new_v.assign(v, v + n);
  if (a.new_k.empty()) a.new_k.resize(1), a.new_v.resize(1);
  a.softmax_scale = scale;
  a.softcap = softcap;
  return a;
}

// The tests' own readout of a cache, written apart from the library's token_ref: value (fp32) of
// token t, head h, channel c of the K (R = kKey) or V cache of sequence b, for a
// cache holding `cold` cold tokens: dequantized below `cold` (sink tokens as stored in
// sink_k / sink_v), the ring row above.
template <class Cfg, Role R>
float cached_value(const kvq::CacheView<typename Cfg::dtype>& v, int b, int64_t cold, int64_t t, int h, int c) {
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  if (t < cold && t < v.sinks) {
    const auto* sink = R == Role::kKey ? v.sink_k : v.sink_v;
    return sink[kvq::sink_offset(v.hot_slot[b], int(t), h, v.sinks, v.num_kv_heads, D) + c].to_float();
  }
  if (t < cold) {
    const int32_t page = v.block_table[int64_t(b) * v.max_pages_per_seq + t / P];
    const uint8_t* rec = v.cold + kvq::record_offset(page, h, v.num_kv_heads, Cfg::record_bytes);
    return kvq::decode_record_element<Cfg, R>(rec, int(t % P), c);
  }
  const int window = v.residual + P;
  const auto* ring = R == Role::kKey ? v.hot_k : v.hot_v;
  return ring[kvq::hot_offset(v.hot_slot[b], kvq::ring_row(t, window), h, window, v.num_kv_heads, D) + c].to_float();
}

// K and V of sequence b as a cache with cold length `cold` holds them ([len][H][D], via
// cached_value), followed by q_len fresh rows: [len + q_len][H][D] in fp64.
template <class Cfg>
void cached_operands(HostCache<Cfg>& c, int b, int64_t len, int64_t cold, const typename Cfg::dtype* fresh_k,
                     const typename Cfg::dtype* fresh_v, int64_t q_len, std::vector<double>& k, std::vector<double>& v) {
  constexpr int D = Cfg::head_dim;
  const auto view = c.view();
  const int H = view.num_kv_heads;
  k.assign(size_t(len + q_len) * H * D, 0.0);
  v.assign(k.size(), 0.0);
  for (int64_t t = 0; t < len + q_len; ++t)
    for (int h = 0; h < H; ++h)
      for (int ch = 0; ch < D; ++ch) {
        const size_t e = (size_t(t) * H + h) * D + ch;
        if (t < len) {
          k[e] = cached_value<Cfg, Role::kKey>(view, b, cold, t, h, ch);
          v[e] = cached_value<Cfg, Role::kValue>(view, b, cold, t, h, ch);
        } else {
          const size_t f = (size_t(t - len) * H + h) * D + ch;
          k[e] = fresh_k[f].to_float();
          v[e] = fresh_v[f].to_float();
        }
      }
}

// fp64 causal attention: queries q [q_len][hq][D] at positions [len, len + q_len) over k, v
// [len + q_len][hkv][D]; query head hq reads KV head hq / (hq_count / hkv). Returns [q_len][hq][D].
template <class T>
std::vector<double> naive_attention(const T* q, int64_t len, int64_t q_len, int hq, int hkv, int D,
                                    const std::vector<double>& k, const std::vector<double>& v, double scale,
                                    double softcap) {
  std::vector<double> out(size_t(q_len) * hq * D, 0.0);
  const int group = hq / hkv;
  std::vector<double> s;
  for (int64_t i = 0; i < q_len; ++i)
    for (int qh = 0; qh < hq; ++qh) {
      const int kh = qh / group;
      const T* qr = q + (size_t(i) * hq + qh) * D;
      const int64_t keys = len + i + 1;
      s.assign(size_t(keys), 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0.0;
        for (int ch = 0; ch < D; ++ch) dot += double(qr[ch].to_float()) * k[(size_t(j) * hkv + kh) * D + ch];
        dot *= scale;
        if (softcap > 0.0) dot = softcap * std::tanh(dot / softcap);
        s[size_t(j)] = dot;
        m = std::max(m, dot);
      }
      double l = 0.0;
      double* o = out.data() + (size_t(i) * hq + qh) * D;
      for (int64_t j = 0; j < keys; ++j) {
        const double p = std::exp(s[size_t(j)] - m);
        l += p;
        for (int ch = 0; ch < D; ++ch) o[ch] += p * v[(size_t(j) * hkv + kh) * D + ch];
      }
      for (int ch = 0; ch < D; ++ch) o[ch] /= l;
    }
  return out;
}

// Largest per-row relative error ||got - ref|| / ||ref|| over rows of D values.
inline double max_row_rel_err(const float* got, const double* ref, size_t rows, int D) {
  double worst = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    double num = 0.0, den = 0.0;
    for (int c = 0; c < D; ++c) {
      const double d = double(got[r * D + c]) - ref[r * D + c];
      num += d * d;
      den += ref[r * D + c] * ref[r * D + c];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  return worst;
}

// Relative Frobenius error of a whole output against a reference.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace kvq_test

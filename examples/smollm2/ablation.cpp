// ablation.cpp - see ablation.hpp. The group math uses kvq's own scalar functions
// (kvq/quant/scalar.hpp), so the default variant is the library's format exactly.
#include "ablation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <kvq/quant/rotation.hpp>
#include <kvq/quant/scalar.hpp>

#include "gguf.hpp"  // Error
#include "rope.hpp"

namespace smollm2 {
namespace {

float f16_round(float x) { return kvq::f16_bits_to_f32(kvq::f32_to_f16_bits(x)); }

// kvq's asymmetric INT-b group with the range [lo, hi]: the bytes it would store, dequantized.
// Returns the squared error over the included elements.
// (b = 3 is not a kvq format: the same scheme with 8 levels, fp16 scale and zero per group.)
template <int Bits>
double minmax_group_b(int n, const float* x, const uint8_t* in, float lo, float hi, float* out) {
  const kvq::AsymParams p = kvq::asym_params<Bits>(lo, hi);
  const float zero = kvq::f16_bits_to_f32(p.zero), scale = kvq::f16_bits_to_f32(p.scale);
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    if (!in[i]) continue;
    out[i] = kvq::asym_decode(kvq::asym_encode<Bits>(x[i], zero, scale), zero, scale);
    err += double(out[i] - x[i]) * double(out[i] - x[i]);
  }
  return err;
}

double minmax_group(int bits, int n, const float* x, const uint8_t* in, float lo, float hi, float* out) {
  if (bits == 2) return minmax_group_b<2>(n, x, in, lo, hi, out);
  if (bits == 3) return minmax_group_b<3>(n, x, in, lo, hi, out);
  return minmax_group_b<4>(n, x, in, lo, hi, out);
}

// Each end of the range chosen separately by an MSE search over 21 candidates (up to half the
// range clipped from that end), two rounds of coordinate descent.
void mse_group(int bits, int n, const float* x, const uint8_t* in, float lo, float hi, float* out) {
  std::vector<float> tmp(static_cast<size_t>(n));
  float best_lo = lo, best_hi = hi;
  const float span = hi - lo;
  if (span > 0.0f) {
    for (int round = 0; round < 2; ++round) {
      for (int end = 0; end < 2; ++end) {
        double best = 1e300;
        float pick = end == 0 ? best_lo : best_hi;
        for (int i = 0; i <= 20; ++i) {
          const float cand = end == 0 ? lo + span * float(i) / 40.0f : hi - span * float(i) / 40.0f;
          const float a = end == 0 ? cand : best_lo, b = end == 0 ? best_hi : cand;
          if (b <= a) continue;
          const double e = minmax_group(bits, n, x, in, a, b, tmp.data());
          if (e < best) best = e, pick = cand;
        }
        (end == 0 ? best_lo : best_hi) = pick;
      }
    }
  }
  minmax_group(bits, n, x, in, best_lo, best_hi, out);
}

// 2-bit Lloyd-Max levels of a unit Gaussian; x' = zero + scale * T[code], zero and scale in fp16,
// fitted per group by alternating nearest-level assignment and least squares (4 rounds).
constexpr float kLloydMax2[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};

void lloyd_group(int n, const float* x, const uint8_t* in, float lo, float hi, float* out) {
  float scale = (hi - lo) / (kLloydMax2[3] - kLloydMax2[0]);
  float zero = lo - scale * kLloydMax2[0];
  std::vector<int> code(size_t(n), 0);
  auto assign = [&](float z, float s) {
    for (int i = 0; i < n; ++i) {
      if (!in[i]) continue;
      int best = 0;
      for (int c = 1; c < 4; ++c)
        if (std::fabs(x[i] - (z + s * kLloydMax2[c])) < std::fabs(x[i] - (z + s * kLloydMax2[best]))) best = c;
      code[size_t(i)] = best;
    }
  };
  for (int round = 0; round < 4 && scale > 0.0f; ++round) {
    assign(zero, scale);
    double st = 0, sx = 0, stt = 0, stx = 0, m = 0;
    for (int i = 0; i < n; ++i) {
      if (!in[i]) continue;
      const double t = kLloydMax2[code[size_t(i)]];
      st += t, sx += x[i], stt += t * t, stx += t * x[i], m += 1;
    }
    const double det = m * stt - st * st;
    if (det <= 1e-12) break;
    scale = float((m * stx - st * sx) / det);
    zero = float((sx - scale * st) / m);
  }
  zero = f16_round(zero), scale = f16_round(scale);
  assign(zero, scale);
  for (int i = 0; i < n; ++i)
    if (in[i]) out[i] = std::fma(kLloydMax2[code[size_t(i)]], scale, zero);
}

// One group: n elements x (stride-free copy), in[i] false for elements kept exact (sinks).
void quantize_group(int bits, ClipRule clip, Levels levels, int n, const float* x, const uint8_t* in, float* out) {
  float lo = kvq::kF16Max, hi = -kvq::kF16Max;
  bool any = false;
  for (int i = 0; i < n; ++i) {
    out[i] = x[i];
    if (in[i]) lo = std::fmin(lo, x[i]), hi = std::fmax(hi, x[i]), any = true;
  }
  if (!any) return;
  if (levels == Levels::kLloydMax && bits == 2) return lloyd_group(n, x, in, lo, hi, out);
  if (clip == ClipRule::kMse) return mse_group(bits, n, x, in, lo, hi, out);
  minmax_group(bits, n, x, in, lo, hi, out);
}

int parse_int(const std::string& name, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 0) throw Error("--" + name + " expects a non-negative integer, got '" + v + "'");
  return int(n);
}

}  // namespace

bool Ablation::is_default() const {
  return quant_k && quant_v && layer_lo == 0 && layer_hi == (1 << 30) && sinks == 0 && k_clip == ClipRule::kMinMax &&
         v_clip == ClipRule::kMinMax && v_levels == Levels::kUniform && !k_per_token && k_bits == 0 && v_bits == 0 && !k_pre_rope;
}

std::string describe(const Ablation& a) {
  std::string s;
  if (!a.quant_k) s += " k=bf16";
  if (!a.quant_v) s += " v=bf16";
  if (a.layer_lo != 0 || a.layer_hi != (1 << 30))
    s += " layers=" + std::to_string(a.layer_lo) + "-" + (a.layer_hi == (1 << 30) ? "" : std::to_string(a.layer_hi));
  if (a.sinks) s += " sinks=" + std::to_string(a.sinks);
  if (a.k_clip == ClipRule::kMse) s += " kclip=mse";
  if (a.v_clip == ClipRule::kMse) s += " vclip=mse";
  if (a.v_levels == Levels::kLloydMax) s += " vlevels=lloydmax";
  if (a.k_per_token) s += " kaxis=token";
  if (a.k_bits) s += " kbits=" + std::to_string(a.k_bits);
  if (a.v_bits) s += " vbits=" + std::to_string(a.v_bits);
  if (a.k_pre_rope) s += " krope=pre";
  return s;
}

bool parse_ablation_flag(Ablation& a, const std::string& name, const std::string& value) {
  if (name == "ablate-kv") {
    if (value != "k" && value != "v" && value != "kv") throw Error("--ablate-kv expects k, v or kv");
    a.quant_k = value != "v";
    a.quant_v = value != "k";
  } else if (name == "ablate-layers") {
    const size_t dash = value.find('-');
    if (dash == std::string::npos) throw Error("--ablate-layers expects A-B (B may be empty)");
    a.layer_lo = parse_int(name, value.substr(0, dash));
    a.layer_hi = dash + 1 == value.size() ? (1 << 30) : parse_int(name, value.substr(dash + 1));
  } else if (name == "sim-sinks") {
    a.sinks = parse_int(name, value);
  } else if (name == "sim-k-clip" || name == "sim-v-clip") {
    if (value != "minmax" && value != "mse") throw Error("--" + name + " expects minmax or mse");
    (name == "sim-k-clip" ? a.k_clip : a.v_clip) = value == "mse" ? ClipRule::kMse : ClipRule::kMinMax;
  } else if (name == "sim-v-levels") {
    if (value != "uniform" && value != "lloydmax") throw Error("--sim-v-levels expects uniform or lloydmax");
    a.v_levels = value == "lloydmax" ? Levels::kLloydMax : Levels::kUniform;
  } else if (name == "sim-k-axis") {
    if (value != "channel" && value != "token") throw Error("--sim-k-axis expects channel or token");
    a.k_per_token = value == "token";
  } else if (name == "sim-k-bits" || name == "sim-v-bits") {
    const int b = parse_int(name, value);
    if (b < 2 || b > 4) throw Error("--" + name + " expects 2, 3 or 4");
    (name == "sim-k-bits" ? a.k_bits : a.v_bits) = b;
  } else if (name == "sim-k-rope") {
    if (value != "pre" && value != "post") throw Error("--sim-k-rope expects pre or post");
    a.k_pre_rope = value == "pre";
  } else {
    return false;
  }
  return true;
}

void simulate_page(const Ablation& a, int bits_k, int gk, int bits_v, int gv, int page, int64_t first_token,
                   const float* k_raw, const float* v_raw, float* k_out, float* v_out) {
  constexpr int D = 64;
  std::vector<float> x(size_t(std::max(page, D))), y(x.size());
  std::vector<uint8_t> in(x.size());
  auto included = [&](int t) { return first_token + t >= a.sinks; };
  if (bits_k && a.k_bits) bits_k = a.k_bits;
  if (bits_v && a.v_bits) bits_v = a.v_bits;
  // Keys: per channel over gk tokens (kvq's layout), or per token over gk channels.
  if (bits_k == 0) {
    std::copy_n(k_raw, size_t(page) * D, k_out);
  } else if (!a.k_per_token) {
    for (int d = 0; d < D; ++d)
      for (int t0 = 0; t0 < page; t0 += gk) {
        for (int i = 0; i < gk; ++i) x[size_t(i)] = k_raw[size_t(t0 + i) * D + size_t(d)], in[size_t(i)] = included(t0 + i);
        quantize_group(bits_k, a.k_clip, Levels::kUniform, gk, x.data(), in.data(), y.data());
        for (int i = 0; i < gk; ++i) k_out[size_t(t0 + i) * D + size_t(d)] = y[size_t(i)];
      }
  } else {
    for (int t = 0; t < page; ++t)
      for (int d0 = 0; d0 < D; d0 += gk) {
        for (int i = 0; i < gk; ++i) x[size_t(i)] = k_raw[size_t(t) * D + size_t(d0 + i)], in[size_t(i)] = included(t);
        quantize_group(bits_k, a.k_clip, Levels::kUniform, gk, x.data(), in.data(), y.data());
        std::copy_n(y.data(), gk, k_out + size_t(t) * D + size_t(d0));
      }
  }
  // Values: per token over gv channels.
  if (bits_v == 0) {
    std::copy_n(v_raw, size_t(page) * D, v_out);
    return;
  }
  for (int t = 0; t < page; ++t)
    for (int d0 = 0; d0 < D; d0 += gv) {
      for (int i = 0; i < gv; ++i) x[size_t(i)] = v_raw[size_t(t) * D + size_t(d0 + i)], in[size_t(i)] = included(t);
      quantize_group(bits_v, a.v_clip, a.v_levels, gv, x.data(), in.data(), y.data());
      std::copy_n(y.data(), gv, v_out + size_t(t) * D + size_t(d0));
    }
}

namespace {

void rope_pairs(const Ablation& a, int64_t pos, float sign, float* k) {
  if (a.rope_base <= 0.0f) throw Error("ablation: --sim-k-rope pre needs the model's RoPE base");
  float cs[64];
  rope_angles(a.rope_base, 64, pos, cs);
  rope_rotate(k, cs, 32, sign);
}

}  // namespace

void key_to_pre_rope(const Ablation& a, int64_t pos, bool rotated, uint64_t rotation_seed, float* k) {
  if (rotated) kvq::unrotate<64>(k, rotation_seed);
  rope_pairs(a, pos, -1.0f, k);
}

void key_from_pre_rope(const Ablation& a, int64_t pos, bool rotated, uint64_t rotation_seed, float* k) {
  rope_pairs(a, pos, 1.0f, k);
  if (rotated) kvq::rotate<64>(k, rotation_seed);
}

}  // namespace smollm2

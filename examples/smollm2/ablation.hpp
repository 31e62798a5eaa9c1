// ablation.hpp - accuracy experiments on the CPU decode path (docs/ACCURACY.md, "Why INT2 loses
// the needle"). An Ablation changes what the cache yields for cold tokens, without changing the
// library: when a page turns cold, simulate_page() re-quantizes its unquantized K/V (the mirror
// the decode path keeps anyway) with a variant of kvq's scheme and writes what that variant would
// dequantize to. With every field at its default the simulation is kvq's own INT-b format, bit for
// bit (tests/model checks it against kvq::decode_record_element), so each result is a one-knob
// change against the library.
//
// Rotation is not here: it acts on q/k/v and the attention output in the model (model.cpp), so it
// runs through the library unchanged on both backends.
#pragma once

#include <cstdint>
#include <string>

namespace smollm2 {

enum class ClipRule { kMinMax, kMse };  // group range: min/max, or each end chosen by an MSE search
enum class Levels { kUniform, kLloydMax };  // 2-bit value levels: uniform, or Gaussian Lloyd-Max

struct Ablation {
  bool quant_k = true, quant_v = true;  // false: that side stays unquantized (bf16)
  int layer_lo = 0, layer_hi = 1 << 30;  // layers [lo, hi] are quantized, the others stay bf16
  int sinks = 0;                         // the first S tokens stay bf16 and leave the group statistics
  ClipRule k_clip = ClipRule::kMinMax, v_clip = ClipRule::kMinMax;
  Levels v_levels = Levels::kUniform;
  bool k_per_token = false;  // keys grouped like values (per token over Gk channels)
  int k_bits = 0, v_bits = 0;  // 2..4: that side's codes get this many bits (0: the format's)
  bool k_pre_rope = false;      // keys quantized before RoPE (and before the rotation, if on)
  float rope_base = 0.0f;       // the model's RoPE base (set by the model when it builds its cache)

  bool is_default() const;
  bool quantizes_layer(int layer) const { return layer >= layer_lo && layer <= layer_hi; }
};

std::string describe(const Ablation& a);  // "" for the default; else e.g. " sinks=4 kclip=mse"

// Parses one option of the command line ("k-only", "v-only", "layers", "sinks", "k-clip",
// "v-clip", "v-levels", "k-axis", "k-bits", "v-bits", "k-rope"); returns false for a name it does not know. Throws Error on a
// bad value.
bool parse_ablation_flag(Ablation& a, const std::string& name, const std::string& value);

// One cold page of one KV head: raw K/V (bf16 values as float, row-major [P][64]) -> what the
// variant dequantizes to (same layout). bits_k / bits_v: the format's 2 or 4 (the variant's
// k_bits / v_bits replace them), or 0 for a side that is not an INT-b format (copied through
// unchanged). gk, gv: group sizes. first_token: the page's first
// position in the sequence (for sinks).
void simulate_page(const Ablation& a, int bits_k, int gk, int bits_v, int gv, int page, int64_t first_token,
                   const float* k_raw, const float* v_raw, float* k_out, float* v_out);

// Pre-RoPE keys (k_pre_rope): one cached key row (head dim 64) at position pos, as the cache holds
// it (RoPE'd, then rotated with `rotation_seed` when `rotated`), back to the projection's output,
// and the inverse. RoPE rotates adjacent pairs (2i, 2i+1) by pos * base^(-2i/64), as model.cpp.
void key_to_pre_rope(const Ablation& a, int64_t pos, bool rotated, uint64_t rotation_seed, float* k);
void key_from_pre_rope(const Ablation& a, int64_t pos, bool rotated, uint64_t rotation_seed, float* k);

}  // namespace smollm2

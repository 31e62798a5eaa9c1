// kv_cache.hpp - the engine's KV cache: one kvq::reference::HostCache per layer (bf16 K/V, head
// dim 64), in a format chosen at run time (flags) and mapped to a compiled kvq::CacheConfig by
// kvq::dispatch. Two attention paths read it:
//   decode     (default) - exactly what token-by-token decoding sees, for chunks of any length:
//              query p attends to tokens below cold_after(p + 1) dequantized from the cache's cold
//              pages (decoded once, when a page turns cold, with kvq::decode_record_element) and
//              to the newer ones unquantized. Equivalent to kvq::reference::attention called with
//              q_len = 1 per token (tests/model checks it), at chunked-prefill speed.
//   reference  - kvq::reference::attention itself on the whole chunk (the library's chunked
//              prefill contract: one cold boundary C* for all the chunk's queries), then
//              kvq::reference::append.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kvq/kvq.hpp>

#include "ablation.hpp"
#include "threads.hpp"

namespace smollm2 {

enum class AttentionPath { kDecode, kReference };

struct CacheSpec {
  std::string format = "none";  // none | int8 | int4 | int2 | k4v2 (INT4 keys, INT2 values) | k2v4 (the reverse) | k3v2 (INT3 keys)
  int gk = 32;                  // key group (tokens), INT2/INT4 only; divides the page
  int gv = 32;                  // value group (channels), INT2/INT4 only; divides the head dim
  int residual = 128;           // R: hot window beyond the newest page, a multiple of the page
  int page = 64;                // P: 16, 32 or 64
  AttentionPath path = AttentionPath::kDecode;
  int sinks = 0;                                        // kvq attention sinks (cache/view.hpp)
  kvq::KeyClip key_clip = kvq::KeyClip::kMinMax;        // kvq's key-group range rule
  int key_clip_from = 0;                                // layers below it keep min/max key groups
  kvq::KeyClip key_clip_of(int layer) const { return layer >= key_clip_from ? key_clip : kvq::KeyClip::kMinMax; }
  // Accuracy experiments (ablation.hpp; CPU decode path only) and the Hadamard rotation of q/k/v
  // and the attention output (model.cpp; both backends).
  Ablation ablation;
  bool rotate = false;
  int rotate_draw = 0;  // which draw of random signs (0: kvq::layer_rotation_seed as is)
  uint64_t rotation_seed(int layer) const {
    return kvq::layer_rotation_seed(layer + 1000 * rotate_draw);
  }
  // Per-layer formats (docs/ACCURACY.md, "more bits where the damage is"): the layers of each
  // entry use its format (same Gk / Gv, R, P, sinks, rotation), the others `format`. Each layer is
  // its own kvq configuration; kvq allows a different one per layer.
  struct LayerMix {
    std::string format;
    std::vector<int> layers;  // sorted, distinct; no layer in two entries
  };
  std::vector<LayerMix> mix;
  bool mixed() const { return !mix.empty(); }
  bool grouped() const {  // Gk / Gv apply
    return format == "int4" || format == "int2" || format == "k4v2" || format == "k2v4" || format == "k3v2";
  }
  const std::string& format_of(int layer) const {
    for (const LayerMix& m : mix)
      if (std::binary_search(m.layers.begin(), m.layers.end(), layer)) return m.format;
    return format;
  }
  // The same specification in one format for every layer (no mix); that of layer `layer`.
  CacheSpec with_format(const std::string& f) const {
    CacheSpec s = *this;
    s.format = f;
    s.mix.clear();
    return s;
  }
  CacheSpec layer_spec(int layer) const { return with_format(format_of(layer)); }
};

// Parses one --mix FORMAT:LAYERS (LAYERS: a comma-separated list of layers and ranges A-B, e.g.
// "k4v2:3-9" or "int4:3,5,18") and appends it to spec.mix; throws Error (also for a layer that
// an earlier --mix already names).
void parse_mix(CacheSpec& spec, const std::string& value);
std::string layer_list(const std::vector<int>& layers);  // {3,4,5,9} -> "3-5,9"
std::string describe_mix(const CacheSpec& spec);         // " mix=k4v2:3-9 mix=k2v4:18" ("" without)

// The formats a model's `layers` use (--format, then each --mix in the order of the layers) and
// each layer's index into them; throws Error for a --mix layer the model does not have.
struct LayerFormats {
  std::vector<std::string> formats;
  std::vector<int> of_layer;
};
LayerFormats layer_formats(const CacheSpec& spec, int layers);

std::string describe(const CacheSpec& spec);       // e.g. "int2 Gk=32 Gv=32 R=128 P=64"
kvq::ConfigKey config_key(const CacheSpec& spec);  // throws Error on an unknown format
std::string compiled_configurations();             // what this binary was built with

// Rows of one sequence inside a step's activations.
struct SeqRows {
  int seq;
  int row;    // first row in q/k/v/out
  int count;  // new tokens
};

// One call of kvq's attention contract (kvq/attention/batch.hpp) plus the append of the same
// tokens, for one sequence: `count` tokens at rows [row, row + count) of the step's activations,
// positions [len, len + count); the sequence's cold length before (cold) and after the append.
struct AttentionCall {
  int seq, row, count;
  int32_t len, cold, cold_after;
};

// The calls that give a step a path's semantics through kvq's attention contract (what the GPU
// cache launches; a sequence's calls run in order). reference: one call per sequence. decode:
// query p must see tokens below b(p) = min(p, cold_after(p + 1)) quantized, and a call for
// queries [a, e) shows each of them min(a, cold_after(e)): the chunk is cut into the longest runs
// over which both equal b(a) (at most P tokens once the sequence holds R + P). len, cold: per
// sequence, before the step. tests/model checks the result against the decode path.
std::vector<AttentionCall> attention_calls(AttentionPath path, int residual, int page, const std::vector<SeqRows>& items,
                                           const std::vector<int64_t>& len, const std::vector<int64_t>& cold);

// Query at position p of the decode path sees tokens below this bound as the cache yields them
// (quantized) and the newer ones unquantized: min(p, cold_after(p + 1)), where cold_before is the
// sequence's cold length before the step that holds p.
inline int64_t decode_cold_boundary(int64_t p, int64_t cold_before, int residual, int page) {
  return std::min<int64_t>(p, kvq::cold_after(p + 1, cold_before, residual, page));
}

// Read access to what the decode path attends over for one KV head of one sequence (diagnostics:
// eval_diagnose.cpp). K in 16-token tiles (k_tile_index, attention_cpu.hpp), V row-major [t][64];
// k_raw / v_raw: the unquantized (bf16) values of tokens [0, len); k_quant / v_quant: what the
// cache yields for tokens [0, cold) (dequantized pages, sink tokens as the cache keeps them, or an
// ablation's simulated values). Rotated when the model rotates (the cache's own domain).
struct HeadKv {
  const float* k_raw_t = nullptr;
  const float* k_quant_t = nullptr;
  const float* v_raw = nullptr;
  const float* v_quant = nullptr;
  int64_t len = 0, cold = 0;
};

class KvCache;

// Called by KvCache::step on the decode path after each layer's attention (items and q exactly as
// step received them; cold_before: per item, the sequence's cold length before the step).
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step(const KvCache& cache, ThreadPool& pool, int layer, const std::vector<SeqRows>& items,
                       const std::vector<int64_t>& cold_before, int num_q_heads, const kvq::bf16* q) = 0;
};

// What save() captures: enough to rewind a sequence to that point later (prefix sharing).
struct SeqState {
  int seq = -1;
  std::vector<int32_t> len, cold;           // per layer
  std::vector<std::vector<uint16_t>> hot;   // per layer: the sequence's K and V ring rows
};

class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual const CacheSpec& spec() const = 0;
  virtual int64_t length(int seq) const = 0;
  virtual int64_t capacity() const = 0;  // tokens per sequence
  virtual int max_seqs() const = 0;
  virtual void reset(int seq) = 0;
  // Throws Error when a sequence is out of range or would exceed the capacity (before anything is
  // changed).
  void check_room(const std::vector<SeqRows>& items) const;
  // One layer of one step: attention of the new tokens (q [rows][num_q_heads][64], bf16, RoPE
  // applied; k, v [rows][kv_heads][64]) over the cache and themselves into out [rows][num_q_heads*64]
  // fp32, and the append of k, v. Layers are stepped in order 0..L-1 with the same items.
  virtual void step(ThreadPool& pool, int layer, const std::vector<SeqRows>& items, int num_q_heads,
                    const kvq::bf16* q, const kvq::bf16* k, const kvq::bf16* v, float* out) = 0;
  virtual SeqState save(int seq) const = 0;
  // Rewinds `seq` to a state saved from it; everything appended since is dropped.
  virtual void restore(const SeqState& state) = 0;
  virtual size_t cold_bytes_per_token() const = 0;  // all layers
  // Diagnostics: the CPU cache's decode path only (elsewhere: throws Error).
  virtual HeadKv head_kv(int layer, int seq, int h) const;
  void set_observer(StepObserver* observer) { observer_ = observer; }

 protected:
  StepObserver* observer_ = nullptr;
};

// Throws Error for a configuration this binary does not hold (with the list of those it holds).
std::unique_ptr<KvCache> make_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int head_dim, int max_seqs,
                                       int64_t max_len);

}  // namespace smollm2

// kv_cache_gpu.cpp - the GPU KV cache of kv_cache_gpu.hpp (host code: CUDA runtime calls and
// kvq's launchers through GpuCacheOps; the kernels are in kv_cache_gpu_*.cu).
#include "kv_cache_gpu.hpp"

#include <algorithm>

#include "gguf.hpp"
#include "gpu_util.hpp"

namespace smollm2 {

namespace {

constexpr int kD = 64;

void kvq_check(kvq::Status st, const char* what) {
  if (st != kvq::Status::kSuccess) throw Error(std::string(what) + " failed: " + kvq::to_string(st));
}

class GpuKvCacheImpl final : public GpuKvCache {
 public:
  // ops: kvq's launchers of each format in use; layer_ops[l]: the index of layer l's format in ops.
  GpuKvCacheImpl(std::vector<GpuCacheOps> ops, std::vector<int> layer_ops, const CacheSpec& spec, int kv_heads, int max_seqs,
                 int64_t max_len, cudaStream_t stream)
      : ops_(std::move(ops)), spec_(spec), kv_heads_(kv_heads), max_seqs_(max_seqs), P_(spec.page),
        pages_per_seq_(int((max_len + spec.page - 1) / spec.page)), cap_(int64_t(pages_per_seq_) * spec.page),
        window_(spec.residual + spec.page), stream_(stream), len_(size_t(max_seqs), 0), cold_(size_t(max_seqs), 0) {
    const size_t pages = size_t(max_seqs) * size_t(pages_per_seq_);
    const size_t ring = size_t(max_seqs) * size_t(window_) * size_t(kv_heads) * kD;
    for (int op : layer_ops) {
      Layer L;
      L.ops = op;
      L.cold = DeviceBuffer<uint8_t>(std::max<size_t>(pages * size_t(kv_heads) * ops_[size_t(op)].record_bytes, 16));
      L.hot_k = DeviceBuffer<kvq::bf16>(ring);
      L.hot_v = DeviceBuffer<kvq::bf16>(ring);
      const size_t sink = std::max<size_t>(size_t(max_seqs) * size_t(spec.sinks) * size_t(kv_heads) * kD, 8);
      L.sink_k = DeviceBuffer<kvq::bf16>(sink);
      L.sink_v = DeviceBuffer<kvq::bf16>(sink);
      layers_.push_back(std::move(L));
    }
    // Sequence s owns pages [s * pages_per_seq, (s + 1) * pages_per_seq) and ring slot s.
    std::vector<int32_t> table(pages), slots(static_cast<size_t>(max_seqs));
    for (size_t i = 0; i < pages; ++i) table[i] = int32_t(i);
    for (int s = 0; s < max_seqs; ++s) slots[size_t(s)] = s;
    block_table_ = DeviceBuffer<int32_t>(pages);
    hot_slot_ = DeviceBuffer<int32_t>(size_t(max_seqs));
    cuda_check(cudaMemcpy(block_table_.p, table.data(), pages * 4, cudaMemcpyHostToDevice), "block table upload");
    cuda_check(cudaMemcpy(hot_slot_.p, slots.data(), slots.size() * 4, cudaMemcpyHostToDevice), "hot slots upload");
    flags_ = DeviceBuffer<uint32_t>(1);
    cuda_check(cudaMemset(flags_.p, 0, 4), "flags");
    cuda_check(cudaDeviceSynchronize(), "KV cache setup");  // legacy-stream copies done before the cache's stream runs
  }

  const CacheSpec& spec() const override { return spec_; }
  int64_t length(int seq) const override { return len_[size_t(seq)]; }
  int64_t capacity() const override { return cap_; }
  int max_seqs() const override { return max_seqs_; }
  size_t cold_bytes_per_token() const override {
    size_t sum = 0;
    for (const Layer& L : layers_) sum += size_t(kv_heads_) * ops_[size_t(L.ops)].record_bytes / size_t(P_);
    return sum;
  }

  void reset(int seq) override {
    len_[size_t(seq)] = 0;  // the sequence's pages and ring slot are its own: nothing to release
    cold_[size_t(seq)] = 0;
  }

  void step(ThreadPool&, int, const std::vector<SeqRows>&, int, const kvq::bf16*, const kvq::bf16*, const kvq::bf16*,
            float*) override {
    throw Error("kv cache: the GPU cache is stepped on the device (begin / step_layer / finish), not with host pointers");
  }

  void begin(const std::vector<SeqRows>& items) override {
    calls_ = attention_calls(spec_.path, spec_.residual, P_, items, len_, cold_);
    // Per call: len, cold before, cu = {0, count}, cold after (the attention runs after the append).
    std::vector<int32_t> args(calls_.size() * kArgs, 0);
    for (size_t i = 0; i < calls_.size(); ++i) {
      int32_t* a = args.data() + i * kArgs;
      a[0] = calls_[i].len;
      a[1] = calls_[i].cold;
      a[2] = 0;
      a[3] = calls_[i].count;
      a[4] = calls_[i].cold_after;
    }
    if (args_.n < args.size()) args_ = DeviceBuffer<int32_t>(std::max(args.size(), 2 * args_.n));
    if (!args.empty())
      cuda_check(cudaMemcpyAsync(args_.p, args.data(), args.size() * 4, cudaMemcpyHostToDevice, stream_), "call upload");
    args_host_ = std::move(args);  // kept alive until the copy is surely done
  }

  void step_layer(int layer, int num_q_heads, const kvq::bf16* q, const kvq::bf16* k, const kvq::bf16* v,
                  kvq::bf16* out) override {
    Layer& L = layers_[size_t(layer)];
    const GpuCacheOps& ops = ops_[size_t(L.ops)];
    ensure_plans(num_q_heads);
    const size_t kv_row = size_t(kv_heads_) * kD, q_row = size_t(num_q_heads) * kD;
    for (size_t i = 0; i < calls_.size(); ++i) {
      const AttentionCall& c = calls_[i];
      const int32_t* a = args_.p + i * kArgs;
      kvq::CacheView<kvq::bf16> view;
      view.cold = L.cold.p;
      view.num_pages = int64_t(max_seqs_) * pages_per_seq_;
      view.hot_k = L.hot_k.p;
      view.hot_v = L.hot_v.p;
      view.num_slots = max_seqs_;
      view.residual = spec_.residual;
      view.num_kv_heads = kv_heads_;
      view.block_table = block_table_.p + size_t(c.seq) * size_t(pages_per_seq_);
      view.max_pages_per_seq = pages_per_seq_;
      view.hot_slot = hot_slot_.p + c.seq;
      view.sink_k = L.sink_k.p;
      view.sink_v = L.sink_v.p;
      view.sinks = spec_.sinks;
      view.key_clip = spec_.key_clip_of(layer);

      kvq::AppendBatch<kvq::bf16> ap;
      ap.batch = 1;
      ap.lengths = kvq::SeqLengths{a + 0, a + 1};
      ap.cu_new = a + 2;
      ap.new_k = k + size_t(c.row) * kv_row;
      ap.new_v = v + size_t(c.row) * kv_row;
      kvq_check(ops.append(view, ap, c.count, flags_.p, stream_), "kvq::append");

      kvq::AttentionBatch<kvq::bf16> at;
      at.batch = 1;
      at.num_q_heads = num_q_heads;
      at.lengths = kvq::SeqLengths{a + 0, a + 4};  // cold: what the cache holds after the append
      at.cu_q = a + 2;
      at.q = q + size_t(c.row) * q_row;
      at.new_k = ap.new_k;
      at.new_v = ap.new_v;
      at.softmax_scale = 0.125f;  // 1 / sqrt(64)
      kvq::bf16* o = out + size_t(c.row) * q_row;
      if (c.count <= kvq::kDecodeMaxQLen) {
        const kvq::DecodePlan& plan = decode_plans_[size_t(L.ops)][size_t(c.count - 1)];
        kvq_check(ops.decode(view, at, plan, workspace_.p, workspace_.n, o, flags_.p, stream_), "kvq::decode");
      } else {
        kvq::PrefillPlan plan;
        const kvq::PrefillShape shape{1, num_q_heads, kv_heads_, spec_.residual, cap_, c.count, c.count};
        kvq_check(ops.plan_prefill(shape, &plan), "kvq::plan_prefill");
        if (plan.workspace_bytes > workspace_.n) throw Error("kv cache: prefill workspace larger than planned");
        kvq_check(ops.prefill(view, at, plan, workspace_.p, workspace_.n, o, flags_.p, stream_), "kvq::prefill");
      }
    }
  }

  void finish(const std::vector<SeqRows>& items) override {
    uint32_t flags = 0;
    cuda_check(cudaMemcpyAsync(&flags, flags_.p, 4, cudaMemcpyDeviceToHost, stream_), "flags read");
    cuda_check(cudaStreamSynchronize(stream_), "step");
    if (flags & kvq::kFlagBadSequence) {
      cudaMemsetAsync(flags_.p, 0, 4, stream_);
      throw Error("kv cache: a kvq kernel rejected a sequence (kFlagBadSequence): lengths, slot or pages invalid");
    }
    for (const SeqRows& it : items) {
      const size_t s = size_t(it.seq);
      len_[s] += it.count;
      cold_[s] = kvq::cold_after(len_[s], cold_[s], spec_.residual, P_);
    }
    if (flags) cuda_check(cudaMemsetAsync(flags_.p, 0, 4, stream_), "flags reset");
  }

  SeqState save(int seq) const override {
    SeqState s;
    s.seq = seq;
    const size_t ring = size_t(window_) * size_t(kv_heads_) * kD, at = size_t(seq) * ring;
    for (const Layer& L : layers_) {
      s.len.push_back(int32_t(len_[size_t(seq)]));
      s.cold.push_back(int32_t(cold_[size_t(seq)]));
      std::vector<uint16_t> hot(2 * ring);
      cuda_check(cudaMemcpyAsync(hot.data(), L.hot_k.p + at, ring * 2, cudaMemcpyDeviceToHost, stream_), "save");
      cuda_check(cudaMemcpyAsync(hot.data() + ring, L.hot_v.p + at, ring * 2, cudaMemcpyDeviceToHost, stream_), "save");
      cuda_check(cudaStreamSynchronize(stream_), "save");
      s.hot.push_back(std::move(hot));
    }
    return s;
  }

  void restore(const SeqState& s) override {
    const size_t ring = size_t(window_) * size_t(kv_heads_) * kD;
    if (s.seq < 0 || s.seq >= max_seqs_ || s.len.size() != layers_.size()) throw Error("kv cache: bad saved state");
    // Cold pages below the saved cold length were never rewritten since (a page is written once,
    // when it turns cold): only the lengths and the ring come back.
    if (cold_[size_t(s.seq)] < s.cold[0] || len_[size_t(s.seq)] < s.len[0])
      throw Error("kv cache: restore of a sequence that was reset or rewound past the saved point");
    // On the cache's stream, so the next step's kernels see the rows.
    const size_t at = size_t(s.seq) * ring;
    for (size_t l = 0; l < layers_.size(); ++l) {
      cuda_check(cudaMemcpyAsync(layers_[l].hot_k.p + at, s.hot[l].data(), ring * 2, cudaMemcpyHostToDevice, stream_), "restore");
      cuda_check(cudaMemcpyAsync(layers_[l].hot_v.p + at, s.hot[l].data() + ring, ring * 2, cudaMemcpyHostToDevice, stream_),
                 "restore");
    }
    cuda_check(cudaStreamSynchronize(stream_), "restore");
    len_[size_t(s.seq)] = s.len[0];
    cold_[size_t(s.seq)] = s.cold[0];
  }

 private:
  static constexpr size_t kArgs = 8;  // int32 per call (5 used; 32-byte stride)

  struct Layer {
    int ops = 0;  // index of the layer's format in ops_
    DeviceBuffer<uint8_t> cold;
    DeviceBuffer<kvq::bf16> hot_k, hot_v;
    DeviceBuffer<kvq::bf16> sink_k, sink_v;  // [sequences][sinks][kv heads][64] (kvq attention sinks)
  };

  // Decode plans for q_len 1..16 (one sequence, up to the capacity) of each format, and one
  // workspace for every call (the largest any format's decode or prefill needs).
  void ensure_plans(int num_q_heads) {
    if (planned_heads_ == num_q_heads) return;
    int sms = 0;
    cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "multiprocessor count");
    size_t bytes = 256;
    decode_plans_.assign(ops_.size(), std::vector<kvq::DecodePlan>(size_t(kvq::kDecodeMaxQLen)));
    for (size_t f = 0; f < ops_.size(); ++f) {
      for (int n = 1; n <= kvq::kDecodeMaxQLen; ++n) {
        const kvq::DecodeShape shape{1, num_q_heads, kv_heads_, spec_.residual, cap_, n, n, sms};
        kvq_check(ops_[f].plan_decode(shape, &decode_plans_[f][size_t(n - 1)]), "kvq::plan_decode");
        bytes = std::max(bytes, decode_plans_[f][size_t(n - 1)].workspace_bytes);
      }
      kvq::PrefillPlan pp;
      const kvq::PrefillShape shape{1, num_q_heads, kv_heads_, spec_.residual, cap_, kvq::kDecodeMaxQLen + 1,
                                    kvq::kDecodeMaxQLen + 1};
      kvq_check(ops_[f].plan_prefill(shape, &pp), "kvq::plan_prefill");
      bytes = std::max(bytes, pp.workspace_bytes);
    }
    workspace_ = DeviceBuffer<uint8_t>(bytes);
    planned_heads_ = num_q_heads;
  }

  std::vector<GpuCacheOps> ops_;  // one per format in use
  CacheSpec spec_;
  int kv_heads_, max_seqs_, P_, pages_per_seq_;
  int64_t cap_;
  int window_;
  cudaStream_t stream_;
  std::vector<int64_t> len_, cold_;  // per sequence (the same in every layer)
  std::vector<Layer> layers_;
  DeviceBuffer<int32_t> block_table_, hot_slot_, args_;
  DeviceBuffer<uint32_t> flags_;
  DeviceBuffer<uint8_t> workspace_;
  std::vector<std::vector<kvq::DecodePlan>> decode_plans_;  // [format][q_len - 1]
  int planned_heads_ = -1;
  std::vector<AttentionCall> calls_;
  std::vector<int32_t> args_host_;
};

}  // namespace

std::string gpu_compiled_configurations() {
  return "bf16, head dim 64, page 64; formats none, int8, and int4/int2/k4v2/k2v4 with Gk = Gv = 32 (int2 also 16/64); R any multiple of 64";
}

std::unique_ptr<GpuKvCache> make_gpu_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int head_dim, int max_seqs,
                                              int64_t max_len, cudaStream_t stream) {
  if (head_dim != kD) throw Error("kv cache: head dim " + std::to_string(head_dim) + " is not compiled (this example: 64)");
  if (spec.residual < 0 || spec.page <= 0 || spec.residual % spec.page != 0)
    throw Error("kv cache: the hot window R=" + std::to_string(spec.residual) + " must be a non-negative multiple of the page size " +
                std::to_string(spec.page));
  if (max_seqs <= 0 || max_len <= 0) throw Error("kv cache: empty cache requested");
  if (!spec.ablation.is_default())
    throw Error("kv cache: the simulated variants (" + describe(spec.ablation) + " ) run on the CPU decode path only");
  // kvq's launchers of each format in use (one more per --mix).
  LayerFormats lf = layer_formats(spec, layers);
  std::vector<GpuCacheOps> ops;
  for (const std::string& format : lf.formats) {
    const CacheSpec s = spec.with_format(format);
    GpuCacheOps o{};
    const kvq::Status st = kvq::dispatch(GpuConfigs{}, config_key(s), [&](auto tag) {
      o = gpu_ops<typename decltype(tag)::type>();
      return kvq::Status::kSuccess;
    });
    if (st != kvq::Status::kSuccess)
      throw Error("kv cache: configuration '" + describe(s) + "' has no GPU kernels in this binary (" + kvq::to_string(st) +
                  "); compiled for the GPU: " + gpu_compiled_configurations());
    ops.push_back(o);
  }
  return std::make_unique<GpuKvCacheImpl>(std::move(ops), std::move(lf.of_layer), spec, kv_heads, max_seqs, max_len, stream);
}

}  // namespace smollm2

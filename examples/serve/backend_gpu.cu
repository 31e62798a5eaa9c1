// backend_gpu.cu - the engine's GPU backend (backend_gpu.hpp): SmolLM2's forward over a whole step
// on one stream, bf16 cuBLAS GEMMs, kvq through kvq::Handle, decode-only steps as CUDA graphs.
#include "backend_gpu.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include <kvq/kvq.hpp>
#include <kvq/runtime/handle.hpp>

#include "gpu_util.hpp"       // smollm2: cuda_check, DeviceBuffer
#include "kvq_instances.hpp"  // serve_kvq::make_handle: the configurations compiled for this backend

namespace serve {

using smollm2::cuda_check;
using smollm2::DeviceBuffer;
using smollm2::grid_for;
using smollm2::to_device;
using smollm2::Error;

namespace {

constexpr int kD = 64;  // head dim (read_llama_config refuses others)

void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS: ") + what + " failed (status " + std::to_string(int(st)) + ")");
}

void kvq_check(kvq::Status st, const char* what) {
  if (st != kvq::Status::kSuccess) throw Error(std::string(what) + " failed: " + kvq::to_string(st));
}

// ---- kernels ----------------------------------------------------------------------------------

__global__ void embed_kernel(const int32_t* tokens, int d, const kvq::bf16* table, float* x) {
  const int r = blockIdx.x;
  const kvq::bf16* src = table + size_t(tokens[r]) * size_t(d);
  for (int e = threadIdx.x; e < d; e += blockDim.x) x[size_t(r) * d + e] = src[e].to_float();
}

// out[r] = bf16(in[pick ? pick[r] : r] / rms * w). One block per row.
constexpr int kNormThreads = 128;
__global__ void rmsnorm_kernel(const float* in, const int32_t* pick, int d, const float* w, float eps, kvq::bf16* out) {
  __shared__ float part[kNormThreads];
  const float* a = in + size_t(pick ? pick[blockIdx.x] : int(blockIdx.x)) * d;
  float ss = 0.0f;
  for (int e = threadIdx.x; e < d; e += kNormThreads) ss += a[e] * a[e];
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const float scale = rsqrtf(part[0] / float(d) + eps);
  kvq::bf16* o = out + size_t(blockIdx.x) * d;
  for (int e = threadIdx.x; e < d; e += kNormThreads) o[e] = kvq::bf16::from_float(a[e] * scale * w[e]);
}

// RoPE on the Q and K heads of a row of the QKV projection (GGUF's adjacent pairs), then kvq's
// rotation (when the format has it) on every Q, K and V head, then Q, K, V to bf16. One block per row.
__global__ void rope_split_kernel(const float* qkv, int n_head, int n_kv, const int32_t* pos, const float* rope, bool rotate,
                                  uint64_t seed, kvq::bf16* q, kvq::bf16* k, kvq::bf16* v) {
  extern __shared__ float row_s[];
  constexpr int kHalf = kD / 2;
  const int r = blockIdx.x, d = n_head * kD, kvd = n_kv * kD, heads = n_head + 2 * n_kv;
  const float* row = qkv + size_t(r) * size_t(d + 2 * kvd);
  const float* cs = rope + size_t(pos[r]) * kHalf * 2;
  for (int j = threadIdx.x; j < (n_head + n_kv) * kHalf; j += blockDim.x) {
    const int head = j / kHalf, i = j % kHalf;
    const float* x = row + head * kD;
    const float a = x[2 * i], b = x[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
    row_s[head * kD + 2 * i] = a * c - b * s;
    row_s[head * kD + 2 * i + 1] = a * s + b * c;
  }
  for (int e = threadIdx.x; e < kvd; e += blockDim.x) row_s[d + kvd + e] = row[d + kvd + e];
  __syncthreads();
  if (rotate) {
    for (int head = threadIdx.x; head < heads; head += blockDim.x) kvq::rotate<kD>(row_s + head * kD, seed);
    __syncthreads();
  }
  for (int e = threadIdx.x; e < d + 2 * kvd; e += blockDim.x) {
    kvq::bf16* dst = e < d ? q + size_t(r) * d + e : e < d + kvd ? k + size_t(r) * kvd + (e - d) : v + size_t(r) * kvd + (e - d - kvd);
    *dst = kvq::bf16::from_float(row_s[e]);
  }
}

// The attention output's rotation undone, per head (in place, bf16).
__global__ void unrotate_kernel(kvq::bf16* att, int heads, uint64_t seed) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= heads) return;
  float x[kD];
  for (int e = 0; e < kD; ++e) x[e] = att[size_t(h) * kD + e].to_float();
  kvq::unrotate<kD>(x, seed);
  for (int e = 0; e < kD; ++e) att[size_t(h) * kD + e] = kvq::bf16::from_float(x[e]);
}

// act = bf16(silu(gate) * up); gu rows are [gate (ff) | up (ff)] in fp32.
__global__ void swiglu_kernel(const float* gu, int rows, int ff, kvq::bf16* act) {
  const size_t n = size_t(rows) * ff;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / size_t(ff), e = i % size_t(ff);
    const float g = gu[r * 2 * ff + e], u = gu[r * 2 * ff + ff + e];
    act[i] = kvq::bf16::from_float(g / (1.0f + __expf(-g)) * u);
  }
}

// ---- GEMMs ------------------------------------------------------------------------------------

// y[rows][out] (=|+=) x[rows][in] . W^T (W [out][in] and x bf16, y fp32, fp32 accumulation) through
// cuBLASLt with ONE kernel for every row count. cublasGemmEx's heuristic picks a kernel by the
// problem's size, split-K and stream-K ones among them, which cut the sum over `in` at places that
// depend on the row count: a row's result would depend on what else is in the step. Pinned here:
// the heuristic's fastest kernel for max_rows rows among those that split no K (SPLITK_NUM 1, no
// reduction, no workspace, hence no stream-K fix-up either), checked for 1 and max_rows rows. Each
// output element is then one CTA's sum over K in the kernel's own order whatever the row count.
// The price: small steps (decode) run a kernel tiled for large ones, without split-K parallelism.
// pinned() is false where cuBLASLt offers no such kernel.
class PinnedGemm {
 public:
  PinnedGemm(cublasLtHandle_t lt, int out, int in, int max_rows) : lt_(lt) {
    try {
      describe(out, in, max_rows);
      pinned_ = choose(max_rows);
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~PinnedGemm() { destroy(); }
  PinnedGemm(const PinnedGemm&) = delete;
  PinnedGemm& operator=(const PinnedGemm&) = delete;

  bool pinned() const { return pinned_; }
  void run(const kvq::bf16* w, const kvq::bf16* x, int rows, float* y, bool accumulate, cudaStream_t stream) {
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    set_rows(rows);
    cublas_check(cublasLtMatmul(lt_, op_, &one, w, w_, x, x_, &beta, y, y_, y, y_, &algo_, nullptr, 0, stream),
                 "cublasLtMatmul (bf16)");
  }

 private:
  // cuBLAS's column-major view of the row-major operands: W^T is in x out (ld in), x is in x rows,
  // y is out x rows.
  void describe(int out, int in, int max_rows) {
    cublas_check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t trans_w = CUBLAS_OP_T, trans_x = CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof trans_w), "cuBLASLt TRANSA");
    cublas_check(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_x, sizeof trans_x), "cuBLASLt TRANSB");
    cublas_check(cublasLtMatrixLayoutCreate(&w_, CUDA_R_16BF, uint64_t(in), uint64_t(out), int64_t(in)), "cuBLASLt layout");
    cublas_check(cublasLtMatrixLayoutCreate(&x_, CUDA_R_16BF, uint64_t(in), uint64_t(max_rows), int64_t(in)), "cuBLASLt layout");
    cublas_check(cublasLtMatrixLayoutCreate(&y_, CUDA_R_32F, uint64_t(out), uint64_t(max_rows), int64_t(out)), "cuBLASLt layout");
  }
  void set_rows(int rows) {
    const uint64_t cols = uint64_t(rows);
    cublas_check(cublasLtMatrixLayoutSetAttribute(x_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols), "cuBLASLt rows");
    cublas_check(cublasLtMatrixLayoutSetAttribute(y_, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols), "cuBLASLt rows");
  }
  static bool splits_k(const cublasLtMatmulAlgo_t& algo) {
    int32_t splits = 0;
    uint32_t reduction = 0;
    size_t written = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits, &written) !=
               CUBLAS_STATUS_SUCCESS ||
           cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction,
                                                &written) != CUBLAS_STATUS_SUCCESS ||
           splits > 1 || reduction != CUBLASLT_REDUCTION_SCHEME_NONE;
  }
  bool runs_with(const cublasLtMatmulAlgo_t& algo, int rows) {
    set_rows(rows);
    cublasLtMatmulHeuristicResult_t r{};
    return cublasLtMatmulAlgoCheck(lt_, op_, w_, x_, y_, y_, &algo, &r) == CUBLAS_STATUS_SUCCESS && r.workspaceSize == 0;
  }
  bool choose(int max_rows) {
    cublasLtMatmulPreference_t pref = nullptr;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t no_workspace = 0;
    const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &no_workspace, sizeof no_workspace);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof no_reduction);
    constexpr int kAsk = 16;
    cublasLtMatmulHeuristicResult_t found[kAsk] = {};
    int n = 0;
    set_rows(max_rows);
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, op_, w_, x_, y_, y_, pref, kAsk, found, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < n; ++i) {
      const cublasLtMatmulAlgo_t& a = found[i].algo;
      if (found[i].state != CUBLAS_STATUS_SUCCESS || found[i].workspaceSize != 0 || splits_k(a)) continue;
      if (!runs_with(a, 1) || !runs_with(a, max_rows)) continue;
      algo_ = a;
      return true;
    }
    return false;
  }
  void destroy() {
    if (y_) cublasLtMatrixLayoutDestroy(y_);
    if (x_) cublasLtMatrixLayoutDestroy(x_);
    if (w_) cublasLtMatrixLayoutDestroy(w_);
    if (op_) cublasLtMatmulDescDestroy(op_);
    y_ = x_ = w_ = nullptr;
    op_ = nullptr;
  }

  cublasLtHandle_t lt_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t w_ = nullptr, x_ = nullptr, y_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  bool pinned_ = false;
};

struct Weights {
  DeviceBuffer<float> attn_norm, ffn_norm;
  DeviceBuffer<kvq::bf16> qkv, wo, gate_up, down;  // [out][in] row-major
};

struct CacheLayer {
  DeviceBuffer<uint8_t> cold;              // [num_pages][kv_heads][record_bytes]
  DeviceBuffer<kvq::bf16> hot_k, hot_v;    // [slots][R + P][kv_heads][64]
  DeviceBuffer<kvq::bf16> sink_k, sink_v;  // [slots][sinks][kv_heads][64]
};

// The per-step metadata, one device block (fixed addresses: captured graphs read it) filled by one
// upload: int32 fields at these offsets (in elements).
struct MetaLayout {
  size_t tokens, pos, pick, table, slot, len, cold, cold_after, cu, cu_prefill, total;
  MetaLayout(int rows, int seqs, int pages_per_seq) {
    size_t at = 0;
    auto take = [&](size_t n) {
      const size_t o = at;
      at += (n + 63) / 64 * 64;  // 256-byte alignment
      return o;
    };
    tokens = take(size_t(rows));
    pos = take(size_t(rows));
    pick = take(size_t(seqs));
    table = take(size_t(seqs) * size_t(pages_per_seq));
    slot = take(size_t(seqs));
    len = take(size_t(seqs));
    cold = take(size_t(seqs));
    cold_after = take(size_t(seqs));
    cu = take(size_t(seqs) + 1);
    cu_prefill = take(size_t(seqs) + 1);
    total = at;
  }
};

class GpuBackend final : public Backend {
 public:
  GpuBackend(const smollm2::GgufFile& f, const FormatChoice& fmt, const EngineConfig& cfg, const GpuOptions& opt)
      : lc_(smollm2::read_llama_config(f)), fmt_(fmt), cfg_(cfg), opt_(opt),
        pages_per_seq_(int((cfg.max_seq_len + cfg.page - 1) / cfg.page)),
        meta_(cfg.token_budget, cfg.max_batch, pages_per_seq_), len_(size_t(cfg.max_batch), 0), cold_(size_t(cfg.max_batch), 0) {
    const std::string why = gpu_unavailable_reason();
    if (!why.empty()) throw Error("--device gpu: " + why);
    smollm2::check_llama_tensors(f, lc_);
    const kvq::Status st = serve_kvq::make_handle(smollm2::config_key(fmt.spec), &kvq_);
    if (st != kvq::Status::kSuccess || !kvq_.has(kvq::kOpAppend | kvq::kOpDecode | kvq::kOpPrefill))
      throw Error("gpu backend: format " + fmt.name + " has no kernels in this binary (" + kvq::to_string(st) + ")");
    try {
      load(f);
    } catch (...) {
      release_all();
      throw;
    }
  }
  ~GpuBackend() override { release_all(); }

  int vocab() const override { return lc_.vocab; }
  void release(int slot) override {
    len_[size_t(slot)] = 0;  // pages are the engine's; the ring is rewritten from row 0
    cold_[size_t(slot)] = 0;
  }

  void forward(const std::vector<StepSeq>& decode, const std::vector<StepSeq>& prefill, std::vector<float>& logits) override {
    const int nd = int(decode.size()), np = int(prefill.size()), n = nd + np;
    if (n == 0) return logits.clear();
    if (n > cfg_.max_batch) throw Error("gpu backend: more sequences than slots");
    // Host side of the step: tokens, positions, the batch's block-table rows, slots and lengths.
    std::fill(host_.begin(), host_.end(), 0);
    int32_t* h = host_.data();
    int rows = 0, picked = 0, max_chunk = 1;
    int32_t* cu = h + meta_.cu;
    int32_t* cup = h + meta_.cu_prefill;
    for (int b = 0; b < n; ++b) {
      const StepSeq& s = b < nd ? decode[size_t(b)] : prefill[size_t(b - nd)];
      const size_t slot = size_t(s.slot);
      if (s.slot < 0 || s.slot >= cfg_.max_batch || len_[slot] != s.pos)
        throw Error("gpu backend: slot " + std::to_string(s.slot) + " out of step with the engine");
      if (int64_t(s.pages->size()) > pages_per_seq_) throw Error("gpu backend: block-table row overflow");
      if (rows + s.count > cfg_.token_budget) throw Error("gpu backend: step larger than the token budget");
      cu[b] = rows;
      if (b >= nd) cup[b - nd] = rows - cu[nd];
      for (int i = 0; i < s.count; ++i) {
        h[meta_.tokens + size_t(rows + i)] = s.tokens[i];
        h[meta_.pos + size_t(rows + i)] = int32_t(s.pos + i);
      }
      rows += s.count;
      if (b >= nd) max_chunk = std::max(max_chunk, s.count);
      if (s.want_logits) h[meta_.pick + size_t(picked++)] = rows - 1;
      std::copy(s.pages->begin(), s.pages->end(), h + meta_.table + size_t(b) * size_t(pages_per_seq_));
      h[meta_.slot + size_t(b)] = s.slot;
      h[meta_.len + size_t(b)] = int32_t(len_[slot]);
      h[meta_.cold + size_t(b)] = int32_t(cold_[slot]);
      h[meta_.cold_after + size_t(b)] = int32_t(kvq::cold_after(len_[slot] + s.count, cold_[slot], cfg_.residual, cfg_.page));
    }
    cu[n] = rows;
    cup[np] = rows - cu[nd];
    cuda_check(cudaMemcpyAsync(meta_dev_.p, host_.data(), meta_.total * 4, cudaMemcpyHostToDevice, stream_), "step upload");

    if (np == 0 && opt_.graphs) {
      cudaGraphExec_t& g = graphs_[nd];
      if (!g) g = capture(nd);
      cuda_check(cudaGraphLaunch(g, stream_), "graph launch");
    } else {
      run_step(nd, np, rows, picked, max_chunk);
    }
    logits.resize(size_t(picked) * size_t(lc_.vocab));
    cuda_check(cudaMemcpyAsync(logits_host_.p, logits_.p, logits.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits");
    uint32_t flags = 0;
    cuda_check(cudaMemcpyAsync(flags_host_.p, flags_.p, 4, cudaMemcpyDeviceToHost, stream_), "flags");
    cuda_check(cudaStreamSynchronize(stream_), "step");
    flags = *flags_host_.p;
    std::copy(logits_host_.p, logits_host_.p + logits.size(), logits.begin());
    if (flags) cuda_check(cudaMemsetAsync(flags_.p, 0, 4, stream_), "flags reset");
    if (flags & kvq::kFlagBadSequence) throw Error("gpu backend: a kvq kernel rejected a sequence (kFlagBadSequence)");
    for (int b = 0; b < n; ++b) {
      const StepSeq& s = b < nd ? decode[size_t(b)] : prefill[size_t(b - nd)];
      const size_t slot = size_t(s.slot);
      len_[slot] += s.count;
      cold_[slot] = kvq::cold_after(len_[slot], cold_[slot], cfg_.residual, cfg_.page);
    }
  }

 private:
  void load(const smollm2::GgufFile& f) {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    cublas_check(cublasCreate(&blas_), "cublasCreate");
    cublas_check(cublasSetStream(blas_, stream_), "cublasSetStream");
    // A workspace of our own: cuBLAS then allocates nothing while a graph is captured.
    blas_ws_ = DeviceBuffer<uint8_t>(32u << 20);
    cublas_check(cublasSetWorkspace(blas_, blas_ws_.p, blas_ws_.n), "cublasSetWorkspace");
    cuda_check(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0), "multiprocessor count");

    // The cache in kvq's device layout.
    const kvq::ModelShape shape{lc_.n_layer, lc_.n_kv_head, kD};
    const size_t record = size_t(kvq::page_bytes(shape, fmt_.format) / uint64_t(lc_.n_layer) / uint64_t(lc_.n_kv_head));
    const size_t ring = size_t(cfg_.max_batch) * size_t(cfg_.residual + cfg_.page) * size_t(lc_.n_kv_head) * kD;
    const size_t sink = std::max<size_t>(size_t(cfg_.max_batch) * size_t(fmt_.format.sinks) * size_t(lc_.n_kv_head) * kD, 8);
    for (int l = 0; l < lc_.n_layer; ++l) {
      CacheLayer c;
      c.cold = DeviceBuffer<uint8_t>(std::max<size_t>(size_t(cfg_.num_pages) * size_t(lc_.n_kv_head) * record, 16));
      c.hot_k = DeviceBuffer<kvq::bf16>(ring);
      c.hot_v = DeviceBuffer<kvq::bf16>(ring);
      c.sink_k = DeviceBuffer<kvq::bf16>(sink);
      c.sink_v = DeviceBuffer<kvq::bf16>(sink);
      cache_.push_back(std::move(c));
    }
    // Plans: decode for every batch size that has one of its own (kept: the graphs and eager steps
    // use them), prefill for the largest steps; one workspace of the largest.
    size_t ws = 256;
    for (int nd = 1; nd <= cfg_.max_batch; ++nd) ws = std::max(ws, decode_plan(nd).workspace_bytes);
    for (int np : {1, cfg_.max_batch}) {
      kvq::PrefillPlan pp;
      kvq_check(kvq_.plan_prefill(prefill_shape(np, cfg_.token_budget, cfg_.token_budget), &pp), "kvq plan_prefill");
      ws = std::max(ws, pp.workspace_bytes);
    }
    workspace_ = DeviceBuffer<uint8_t>(ws);

    // Weights in bf16 (dequantized from the GGUF file), norms in fp32.
    const std::vector<float> embed = f.dequantize("token_embd.weight");
    embed_ = to_device<kvq::bf16>(embed);
    if (!lc_.tied_output) lm_head_ = to_device<kvq::bf16>(f.dequantize("output.weight"));
    out_norm_ = to_device<float>(f.dequantize("output_norm.weight"));
    for (int l = 0; l < lc_.n_layer; ++l)
      layers_.push_back(smollm2::upload_layer<Weights, kvq::bf16>(smollm2::read_layer_weights(f, l)));
    rope_ = to_device<float>(smollm2::rope_table(lc_, cfg_.max_seq_len));
    if (opt_.batch_invariant) pin_gemms();

    // Step buffers at their largest (fixed addresses for the graphs).
    const size_t rows = size_t(cfg_.token_budget), seqs = size_t(cfg_.max_batch);
    const size_t d = size_t(lc_.d_model), kvd = size_t(lc_.n_kv_head) * kD, ff = size_t(lc_.d_ff);
    host_.assign(meta_.total, 0);
    meta_dev_ = DeviceBuffer<int32_t>(meta_.total);
    x_ = DeviceBuffer<float>(rows * d);
    h_ = DeviceBuffer<kvq::bf16>(rows * d);
    qkv_ = DeviceBuffer<float>(rows * (d + 2 * kvd));
    q16_ = DeviceBuffer<kvq::bf16>(rows * d);
    k16_ = DeviceBuffer<kvq::bf16>(rows * kvd);
    v16_ = DeviceBuffer<kvq::bf16>(rows * kvd);
    att16_ = DeviceBuffer<kvq::bf16>(rows * d);
    gu_ = DeviceBuffer<float>(rows * 2 * ff);
    act_ = DeviceBuffer<kvq::bf16>(rows * ff);
    sel_ = DeviceBuffer<kvq::bf16>(seqs * d);
    logits_ = DeviceBuffer<float>(seqs * size_t(lc_.vocab));
    flags_ = DeviceBuffer<uint32_t>(1);
    cuda_check(cudaMemset(flags_.p, 0, 4), "flags");
    cuda_check(cudaMallocHost(reinterpret_cast<void**>(&logits_host_.p), seqs * size_t(lc_.vocab) * 4), "pinned logits");
    cuda_check(cudaMallocHost(reinterpret_cast<void**>(&flags_host_.p), 4), "pinned flags");
    cuda_check(cudaDeviceSynchronize(), "load");
  }

  void release_all() {
    for (auto& [n, g] : graphs_)
      if (g) cudaGraphExecDestroy(g);
    graphs_.clear();
    if (logits_host_.p) cudaFreeHost(logits_host_.p);
    if (flags_host_.p) cudaFreeHost(flags_host_.p);
    logits_host_.p = nullptr;
    flags_host_.p = nullptr;
    pins_ = Pins{};
    if (lt_) cublasLtDestroy(lt_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
    lt_ = nullptr;
    blas_ = nullptr;
    stream_ = nullptr;
  }

  kvq::DecodeShape decode_shape(int seqs) const {
    return kvq::DecodeShape{seqs, lc_.n_head, lc_.n_kv_head, cfg_.residual, cfg_.max_seq_len, 1, seqs, sms_};
  }
  kvq::PrefillShape prefill_shape(int seqs, int max_chunk, int total) const {
    return kvq::PrefillShape{seqs, lc_.n_head, lc_.n_kv_head, cfg_.residual, cfg_.max_seq_len, max_chunk, total};
  }
  // The decode plan of a step of nd sequences. Batch-invariant: the plan of the largest batch at
  // every size. A plan cuts each sequence's tokens into splits by the planned batch (fewer
  // sequences, more and shorter splits, to fill the GPU) and the splits' partial sums merge in that
  // order, so per-size plans would give a sequence other bits in another batch. The price: a small
  // batch of long sequences runs with the few splits of a full one (less parallel, slower).
  const kvq::DecodePlan& decode_plan(int nd) {
    const int planned = opt_.batch_invariant ? cfg_.max_batch : nd;
    auto it = decode_plans_.find(planned);
    if (it == decode_plans_.end()) {
      kvq::DecodePlan p;
      kvq_check(kvq_.plan_decode(decode_shape(planned), &p), "kvq plan_decode");
      // (No workspace yet while load() sizes it from these plans.)
      if (workspace_.p && p.workspace_bytes > workspace_.n) throw Error("gpu backend: decode workspace larger than planned");
      it = decode_plans_.emplace(planned, p).first;
    }
    return it->second;
  }

  // Batch-invariant GEMMs: one cuBLASLt kernel for every row count of each projection (PinnedGemm);
  // a projection without one keeps cublasGemmEx, and the start-up line says so.
  void pin_gemms() {
    cublas_check(cublasLtCreate(&lt_), "cublasLtCreate");
    const int d = lc_.d_model, kvd = lc_.n_kv_head * kD, ff = lc_.d_ff, rows = cfg_.token_budget;
    pins_.qkv = std::make_unique<PinnedGemm>(lt_, d + 2 * kvd, d, rows);
    pins_.wo = std::make_unique<PinnedGemm>(lt_, d, d, rows);
    pins_.gate_up = std::make_unique<PinnedGemm>(lt_, 2 * ff, d, rows);
    pins_.down = std::make_unique<PinnedGemm>(lt_, d, ff, rows);
    pins_.head = std::make_unique<PinnedGemm>(lt_, lc_.vocab, d, cfg_.max_batch);
    int pinned = 0;
    for (const auto* g : {&pins_.qkv, &pins_.wo, &pins_.gate_up, &pins_.down, &pins_.head}) pinned += (*g)->pinned();
    std::fprintf(stderr, "kvq_serve: GPU steps batch-invariant: decode planned for %d sequences at every batch size; %d of 5 GEMMs "
                         "with one cuBLASLt kernel for every row count%s\n",
                 cfg_.max_batch, pinned, pinned == 5 ? "" : " (the others: cublasGemmEx, whose results may depend on the batch)");
  }

  // y[rows][out] (=|+=) x[rows][in] . W^T; W [out][in] and x bf16, y fp32, fp32 accumulation;
  // through `pin` where it holds a kernel (batch-invariant steps), else cublasGemmEx.
  void gemm(const std::unique_ptr<PinnedGemm>& pin, const kvq::bf16* x, int rows, int in, const kvq::bf16* w, int out, float* y,
            bool accumulate) {
    if (pin && pin->pinned()) return pin->run(w, x, rows, y, accumulate, stream_);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublas_check(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, CUDA_R_16BF, in, x, CUDA_R_16BF, in,
                              &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (bf16)");
  }

  kvq::CacheView<void> view(int layer, int first) {
    CacheLayer& c = cache_[size_t(layer)];
    kvq::CacheView<void> v;
    v.cold = c.cold.p;
    v.num_pages = cfg_.num_pages;
    v.hot_k = c.hot_k.p;
    v.hot_v = c.hot_v.p;
    v.num_slots = cfg_.max_batch;
    v.residual = cfg_.residual;
    v.num_kv_heads = lc_.n_kv_head;
    v.block_table = meta_dev_.p + meta_.table + size_t(first) * size_t(pages_per_seq_);
    v.max_pages_per_seq = pages_per_seq_;
    v.hot_slot = meta_dev_.p + meta_.slot + first;
    v.sinks = fmt_.format.sinks;
    v.sink_k = v.sinks ? c.sink_k.p : nullptr;
    v.sink_v = v.sinks ? c.sink_v.p : nullptr;
    v.key_clip = fmt_.format.key_clip;
    return v;
  }

  // The whole step on the stream (also what a graph captures): embedding, per layer one append
  // for every token, one decode call (sequences [0, nd)) and one prefill call ([nd, nd + np)),
  // then the logits of the picked rows.
  void run_step(int nd, int np, int rows, int picked, int max_chunk) {
    const int d = lc_.d_model, kvd = lc_.n_kv_head * kD, ff = lc_.d_ff, nq = lc_.n_head, n = nd + np;
    const int32_t* m = meta_dev_.p;
    const size_t q_row = size_t(nq) * kD, kv_row = size_t(kvd);
    kvq::PrefillPlan pplan;
    if (np > 0) {
      kvq_check(kvq_.plan_prefill(prefill_shape(np, max_chunk, rows - nd), &pplan), "kvq plan_prefill");
      if (pplan.workspace_bytes > workspace_.n) throw Error("gpu backend: prefill workspace larger than planned");
    }
    const kvq::DecodePlan* dplan = nd > 0 ? &decode_plan(nd) : nullptr;
    embed_kernel<<<rows, 128, 0, stream_>>>(m + meta_.tokens, d, embed_.p, x_.p);
    for (int l = 0; l < lc_.n_layer; ++l) {
      const Weights& w = layers_[size_t(l)];
      rmsnorm_kernel<<<rows, kNormThreads, 0, stream_>>>(x_.p, nullptr, d, w.attn_norm.p, lc_.rms_eps, h_.p);
      gemm(pins_.qkv, h_.p, rows, d, w.qkv.p, d + 2 * kvd, qkv_.p, false);
      const uint64_t seed = kvq::layer_rotation_seed(l);
      rope_split_kernel<<<rows, 128, size_t(nq + 2 * lc_.n_kv_head) * kD * sizeof(float), stream_>>>(
          qkv_.p, nq, lc_.n_kv_head, m + meta_.pos, rope_.p, fmt_.format.rotate, seed, q16_.p, k16_.p, v16_.p);
      // kvq: one append for the whole step, then the attention with the cold lengths after it.
      const kvq::CacheView<void> all = view(l, 0);
      kvq::AppendBatch<void> ap;
      ap.batch = n;
      ap.lengths = kvq::SeqLengths{m + meta_.len, m + meta_.cold};
      ap.cu_new = m + meta_.cu;
      ap.new_k = k16_.p;
      ap.new_v = v16_.p;
      kvq_check(kvq_.append(all, ap, np > 0 ? max_chunk : 1, flags_.p, stream_), "kvq append");
      if (nd > 0) {
        kvq::AttentionBatch<void> at;
        at.batch = nd;
        at.num_q_heads = nq;
        at.lengths = kvq::SeqLengths{m + meta_.len, m + meta_.cold_after};
        at.cu_q = m + meta_.cu;
        at.q = q16_.p;
        at.new_k = k16_.p;
        at.new_v = v16_.p;
        at.softmax_scale = 0.125f;  // 1 / sqrt(64)
        kvq_check(kvq_.decode(all, at, *dplan, workspace_.p, workspace_.n, att16_.p, flags_.p, stream_), "kvq decode");
      }
      if (np > 0) {
        kvq::AttentionBatch<void> at;
        at.batch = np;
        at.num_q_heads = nq;
        at.lengths = kvq::SeqLengths{m + meta_.len + nd, m + meta_.cold_after + nd};
        at.cu_q = m + meta_.cu_prefill;
        at.q = q16_.p + size_t(nd) * q_row;
        at.new_k = k16_.p + size_t(nd) * kv_row;
        at.new_v = v16_.p + size_t(nd) * kv_row;
        at.softmax_scale = 0.125f;
        kvq_check(kvq_.prefill(view(l, nd), at, pplan, workspace_.p, workspace_.n, att16_.p + size_t(nd) * q_row, flags_.p,
                               stream_),
                  "kvq prefill");
      }
      if (fmt_.format.rotate) unrotate_kernel<<<(rows * nq + 127) / 128, 128, 0, stream_>>>(att16_.p, rows * nq, seed);
      gemm(pins_.wo, att16_.p, rows, d, w.wo.p, d, x_.p, true);
      rmsnorm_kernel<<<rows, kNormThreads, 0, stream_>>>(x_.p, nullptr, d, w.ffn_norm.p, lc_.rms_eps, h_.p);
      gemm(pins_.gate_up, h_.p, rows, d, w.gate_up.p, 2 * ff, gu_.p, false);
      swiglu_kernel<<<grid_for(size_t(rows) * ff), 256, 0, stream_>>>(gu_.p, rows, ff, act_.p);
      gemm(pins_.down, act_.p, rows, ff, w.down.p, d, x_.p, true);
    }
    if (picked > 0) {
      rmsnorm_kernel<<<picked, kNormThreads, 0, stream_>>>(x_.p, m + meta_.pick, d, out_norm_.p, lc_.rms_eps, sel_.p);
      gemm(pins_.head, sel_.p, picked, d, lc_.tied_output ? embed_.p : lm_head_.p, lc_.vocab, logits_.p, false);
    }
    cuda_check(cudaGetLastError(), "step kernels");
  }

  // A decode-only step of nd sequences as a CUDA graph (kvq's run calls read every length, slot
  // and page id from meta_dev_, so one graph serves every step of that size).
  cudaGraphExec_t capture(int nd) {
    decode_plan(nd);  // planned before the capture (the occupancy query is not captured)
    cudaGraph_t graph = nullptr;
    cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "graph capture");
    try {
      run_step(nd, 0, nd, nd, 1);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream_, &graph), "graph capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    cuda_check(e, "graph instantiate");
    return exec;
  }

  struct Pinned {
    float* p = nullptr;
  };
  struct PinnedFlags {
    uint32_t* p = nullptr;
  };

  smollm2::LlamaConfig lc_;
  FormatChoice fmt_;
  EngineConfig cfg_;
  GpuOptions opt_;
  int pages_per_seq_;
  MetaLayout meta_;
  std::vector<int64_t> len_, cold_;  // per slot
  kvq::Handle kvq_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  struct Pins {
    std::unique_ptr<PinnedGemm> qkv, wo, gate_up, down, head;
  } pins_;  // batch-invariant steps only
  int sms_ = 0;
  DeviceBuffer<uint8_t> blas_ws_, workspace_;
  std::vector<CacheLayer> cache_;
  std::vector<Weights> layers_;
  DeviceBuffer<kvq::bf16> embed_, lm_head_;
  DeviceBuffer<float> out_norm_, rope_;
  std::vector<int32_t> host_;
  DeviceBuffer<int32_t> meta_dev_;
  DeviceBuffer<float> x_, qkv_, gu_, logits_;
  DeviceBuffer<kvq::bf16> h_, q16_, k16_, v16_, att16_, act_, sel_;
  DeviceBuffer<uint32_t> flags_;
  Pinned logits_host_;
  PinnedFlags flags_host_;
  std::map<int, kvq::DecodePlan> decode_plans_;
  std::map<int, cudaGraphExec_t> graphs_;
};

}  // namespace

std::string gpu_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
  }
  return n == 0 ? "no CUDA device found" : "";
}

uint64_t gpu_free_bytes() {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free_b;
}

std::string gpu_name() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "unknown GPU";
  return p.name;
}

std::unique_ptr<Backend> make_gpu_backend(const smollm2::GgufFile& file, const FormatChoice& f, const EngineConfig& cfg,
                                          const GpuOptions& opt) {
  return std::make_unique<GpuBackend>(file, f, cfg, opt);
}

}  // namespace serve

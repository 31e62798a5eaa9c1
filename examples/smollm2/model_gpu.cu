// model_gpu.cu - the GPU backend of Model (see model_gpu.hpp): the forward pass of model.cpp
// step for step, on one CUDA stream, with one host synchronisation per forward call (the kvq
// kernels' flags and the logits).
#include "model_gpu.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>

#include "gpu_util.hpp"
#include "kv_cache_gpu.hpp"

namespace smollm2 {

namespace {

void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error(std::string("cuBLAS: ") + what + " failed (status " + std::to_string(int(st)) + ")");
}

// ---- the small kernels ------------------------------------------------------------------------

__global__ void embed_kernel(const int32_t* tokens, int d, const float* table, float* x) {
  const int r = blockIdx.x;
  const float* src = table + size_t(tokens[r]) * size_t(d);
  for (int e = threadIdx.x; e < d; e += blockDim.x) x[size_t(r) * d + e] = src[e];
}

// out[r] = in[r] / rms(in[r]) * w, the sum of squares in double as on the CPU. One block per row.
constexpr int kNormThreads = 128;
__global__ void rmsnorm_kernel(const float* in, int d, const float* w, float eps, float* out) {
  __shared__ double part[kNormThreads];
  const float* a = in + size_t(blockIdx.x) * d;
  double ss = 0.0;
  for (int e = threadIdx.x; e < d; e += kNormThreads) ss += double(a[e]) * a[e];
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const float scale = float(1.0 / sqrt(part[0] / d + double(eps)));
  float* o = out + size_t(blockIdx.x) * d;
  for (int e = threadIdx.x; e < d; e += kNormThreads) o[e] = a[e] * scale * w[e];
}

// RoPE on the Q and K heads of a row of the QKV projection (adjacent pairs), then, when `rotate`
// is set, kvq's rotation (kvq/quant/rotation.hpp, seed per layer) on every Q, K and V head, then
// Q, K, V rounded to bf16 for the cache. One block per row; the row is staged in shared memory (dynamic, (n_head + 2 n_kv)
// x 64 floats). The same operations in the same order as the CPU backend's rope + kvq::rotate.
__global__ void rope_split_kernel(const float* qkv, int n_head, int n_kv, const int32_t* pos, const float* rope,
                                  bool rotate, uint64_t seed, kvq::bf16* q, kvq::bf16* k, kvq::bf16* v) {
  extern __shared__ float row_s[];
  constexpr int kHalf = 32;  // head dim 64
  const int r = blockIdx.x, d = n_head * 64, kvd = n_kv * 64, heads = n_head + 2 * n_kv;
  const float* row = qkv + size_t(r) * size_t(d + 2 * kvd);
  const float* cs = rope + size_t(pos[r]) * kHalf * 2;
  for (int j = threadIdx.x; j < (n_head + n_kv) * kHalf; j += blockDim.x) {
    const int head = j / kHalf, i = j % kHalf;
    const float* x = row + head * 64;
    const float a = x[2 * i], b = x[2 * i + 1], c = cs[2 * i], s = cs[2 * i + 1];
    row_s[head * 64 + 2 * i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    row_s[head * 64 + 2 * i + 1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
  }
  for (int e = threadIdx.x; e < kvd; e += blockDim.x) row_s[d + kvd + e] = row[d + kvd + e];
  __syncthreads();
  if (rotate) {
    for (int head = threadIdx.x; head < heads; head += blockDim.x) kvq::rotate<64>(row_s + head * 64, seed);
    __syncthreads();
  }
  for (int e = threadIdx.x; e < d + 2 * kvd; e += blockDim.x) {
    kvq::bf16* dst = e < d ? q + size_t(r) * d + e : e < d + kvd ? k + size_t(r) * kvd + (e - d) : v + size_t(r) * kvd + (e - d - kvd);
    *dst = kvq::bf16::from_float(row_s[e]);
  }
}

// The attention output back to fp32; with `rotate`, each head's rotation undone.
__global__ void attention_out_kernel(const kvq::bf16* in, int heads, bool rotate, uint64_t seed, float* out) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= heads) return;
  float x[64];
  for (int e = 0; e < 64; ++e) x[e] = in[size_t(h) * 64 + e].to_float();
  if (rotate) kvq::unrotate<64>(x, seed);
  for (int e = 0; e < 64; ++e) out[size_t(h) * 64 + e] = x[e];
}

// act = silu(gate) * up; gu rows are [gate (ff) | up (ff)].
__global__ void swiglu_kernel(const float* gu, int rows, int ff, float* act) {
  const size_t n = size_t(rows) * ff;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / size_t(ff), e = i % size_t(ff);
    const float g = gu[r * 2 * ff + e], u = gu[r * 2 * ff + ff + e];
    act[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void gather_rows_kernel(const float* x, const int32_t* pick, int d, float* out) {
  const float* src = x + size_t(pick[blockIdx.x]) * d;
  for (int e = threadIdx.x; e < d; e += blockDim.x) out[size_t(blockIdx.x) * d + e] = src[e];
}

// ---- the model --------------------------------------------------------------------------------

struct GpuLayer {
  DeviceBuffer<float> attn_norm, ffn_norm, qkv, wo, gate_up, down;  // matrices [out][in], row-major
};

class GpuModel final : public Model {
 public:
  GpuModel(const GgufFile& f, const CacheSpec& spec, int max_seqs, int64_t max_len) : cfg_(read_llama_config(f)) {
    const std::string why = gpu_unavailable_reason();
    if (!why.empty()) throw Error("--device gpu: " + why);
    check_llama_tensors(f, cfg_);
    try {
      load(f, spec, max_seqs, max_len);
    } catch (...) {
      release();
      throw;
    }
  }

  ~GpuModel() override { release(); }

  // Stream, cuBLAS, cache, weights (the constructor's slow part).
  void load(const GgufFile& f, const CacheSpec& spec, int max_seqs, int64_t max_len) {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    cublas_check(cublasCreate(&blas_), "cublasCreate");
    cublas_check(cublasSetStream(blas_, stream_), "cublasSetStream");
    cublas_check(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // fp32, no TF32
    // The cache first: an uncompiled configuration is refused before the weights load.
    cache_ = make_gpu_kv_cache(spec, cfg_.n_layer, cfg_.n_kv_head, cfg_.head_dim, max_seqs, max_len, stream_);
    const std::vector<float> embed = f.dequantize("token_embd.weight");
    embed_ = to_device<float>(embed);
    lm_head_ = cfg_.tied_output ? DeviceBuffer<float>() : to_device<float>(f.dequantize("output.weight"));
    out_norm_ = to_device<float>(f.dequantize("output_norm.weight"));
    for (int l = 0; l < cfg_.n_layer; ++l) layers_.push_back(upload_layer<GpuLayer, float>(read_layer_weights(f, l)));
    rope_ = to_device<float>(rope_table(cfg_, cache_->capacity()));
    rotate_ = spec.rotate;
    for (int l = 0; l < cfg_.n_layer; ++l) rotation_seed_.push_back(spec.rotation_seed(l));
    cuda_check(cudaDeviceSynchronize(), "weight upload");  // legacy-stream copies done before the model's stream runs
  }

  void release() {
    cache_.reset();
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
    blas_ = nullptr;
    stream_ = nullptr;
  }

  const LlamaConfig& config() const override { return cfg_; }
  const KvCache& cache() const override { return *cache_; }
  int64_t length(int seq) const override { return cache_->length(seq); }
  void reset(int seq) override { cache_->reset(seq); }
  SeqState save(int seq) const override { return cache_->save(seq); }
  void restore(const SeqState& s) override { cache_->restore(s); }

  void forward(const std::vector<SeqTokens>& batch, bool all_logits, std::vector<float>& logits) override {
    const int d = cfg_.d_model, kvd = cfg_.n_kv_head * cfg_.head_dim, ff = cfg_.d_ff, nq = cfg_.n_head;
    const std::vector<SeqRows> items = batch_rows(batch, cfg_.vocab);
    cache_->check_room(items);
    const int rows = items.empty() ? 0 : items.back().row + items.back().count;
    std::vector<int32_t> tokens, pos, pick;
    for (const SeqTokens& s : batch)
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        tokens.push_back(s.tokens[i]);
        pos.push_back(int32_t(length(s.seq) + int64_t(i)));
      }
    if (all_logits) {
      for (int r = 0; r < rows; ++r) pick.push_back(r);
    } else {
      for (const SeqRows& it : items) pick.push_back(it.row + it.count - 1);
    }
    logits.assign(pick.size() * size_t(cfg_.vocab), 0.0f);
    if (rows == 0) return;
    grow(size_t(rows), pick.size());
    tokens_.upload(tokens.data(), tokens.size(), stream_);
    pos_.upload(pos.data(), pos.size(), stream_);
    pick_.upload(pick.data(), pick.size(), stream_);

    cache_->begin(items);
    embed_kernel<<<rows, 128, 0, stream_>>>(tokens_.p, d, embed_.p, x_.p);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      const GpuLayer& L = layers_[size_t(l)];
      rmsnorm_kernel<<<rows, kNormThreads, 0, stream_>>>(x_.p, d, L.attn_norm.p, cfg_.rms_eps, h_.p);
      gemm(h_.p, rows, d, L.qkv.p, d + 2 * kvd, qkv_.p, false);
      const uint64_t seed = rotation_seed_[size_t(l)];
      rope_split_kernel<<<rows, 128, size_t(nq + 2 * cfg_.n_kv_head) * 64 * sizeof(float), stream_>>>(
          qkv_.p, nq, cfg_.n_kv_head, pos_.p, rope_.p, rotate_, seed, q16_.p, k16_.p, v16_.p);
      cache_->step_layer(l, nq, q16_.p, k16_.p, v16_.p, att16_.p);
      attention_out_kernel<<<(rows * nq + 127) / 128, 128, 0, stream_>>>(att16_.p, rows * nq, rotate_, seed, att_.p);
      gemm(att_.p, rows, d, L.wo.p, d, x_.p, true);
      rmsnorm_kernel<<<rows, kNormThreads, 0, stream_>>>(x_.p, d, L.ffn_norm.p, cfg_.rms_eps, h_.p);
      gemm(h_.p, rows, d, L.gate_up.p, 2 * ff, gu_.p, false);
      swiglu_kernel<<<grid_for(size_t(rows) * ff), 256, 0, stream_>>>(gu_.p, rows, ff, act_.p);
      gemm(act_.p, rows, ff, L.down.p, d, x_.p, true);
    }
    cuda_check(cudaGetLastError(), "forward kernels");
    const int n = int(pick.size());
    gather_rows_kernel<<<n, 128, 0, stream_>>>(x_.p, pick_.p, d, sel_.p);
    rmsnorm_kernel<<<n, kNormThreads, 0, stream_>>>(sel_.p, d, out_norm_.p, cfg_.rms_eps, sel_.p);
    gemm(sel_.p, n, d, cfg_.tied_output ? embed_.p : lm_head_.p, cfg_.vocab, logits_.p, false);
    cuda_check(cudaGetLastError(), "logits kernels");
    cuda_check(cudaMemcpyAsync(logits.data(), logits_.p, logits.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits");
    cache_->finish(items);  // synchronises; throws if a kvq kernel rejected a sequence
  }

 private:
  // y[rows][out] (=|+=) x[rows][in] . W^T, W [out][in] row-major (column-major: y^T = W^T x^T).
  void gemm(const float* x, int rows, int in, const float* w, int out, float* y, bool accumulate) {
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublas_check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, in, x, in, &beta, y, out), "cublasSgemm");
  }

  void grow(size_t rows, size_t picked) {
    const size_t d = size_t(cfg_.d_model), kvd = size_t(cfg_.n_kv_head) * 64, ff = size_t(cfg_.d_ff);
    x_.reserve(rows * d);
    h_.reserve(rows * d);
    qkv_.reserve(rows * (d + 2 * kvd));
    q16_.reserve(rows * d);
    k16_.reserve(rows * kvd);
    v16_.reserve(rows * kvd);
    att16_.reserve(rows * d);
    att_.reserve(rows * d);
    gu_.reserve(rows * 2 * ff);
    act_.reserve(rows * ff);
    sel_.reserve(picked * d);
    logits_.reserve(picked * size_t(cfg_.vocab));
  }

  LlamaConfig cfg_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<GpuKvCache> cache_;
  DeviceBuffer<float> embed_, lm_head_, out_norm_, rope_;
  bool rotate_ = false;
  std::vector<uint64_t> rotation_seed_;  // per layer (CacheSpec::rotation_seed)
  std::vector<GpuLayer> layers_;
  // Activations, grown on demand.
  DeviceBuffer<int32_t> tokens_, pos_, pick_;
  DeviceBuffer<float> x_, h_, qkv_, att_, gu_, act_, sel_, logits_;
  DeviceBuffer<kvq::bf16> q16_, k16_, v16_, att16_;
};

}  // namespace

std::string gpu_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error state
    return std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device found";
  return "";
}

std::unique_ptr<Model> make_gpu_model(const GgufFile& file, const CacheSpec& spec, int max_seqs, int64_t max_len) {
  return std::make_unique<GpuModel>(file, spec, max_seqs, max_len);
}

}  // namespace smollm2

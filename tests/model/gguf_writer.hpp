// gguf_writer.hpp - small GGUF files for the smollm2 tests: a minimal writer (broken files,
// test_gguf_errors.cpp) and a complete random Llama with F32 tensors (synthetic models the
// backends can run, test_gpu_backend.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace smollm2_test {

struct GgufWriter {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void kv_str(const std::string& k, const std::string& v) {
    str(k);
    put<uint32_t>(8);
    str(v);
  }
  void kv_u32(const std::string& k, uint32_t v) {
    str(k);
    put<uint32_t>(4);
    put<uint32_t>(v);
  }
  void kv_f32(const std::string& k, float v) {
    str(k);
    put<uint32_t>(6);
    put<float>(v);
  }
  void align(size_t a) {
    while (b.size() % a) b.push_back(0);
  }
};

inline std::string write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

// A random Llama-architecture model (head dim 64), every tensor F32. Weights ~ U(-a, a) with
// a = sqrt(3 / fan_in) (unit variance through each projection), Q and K scaled by qk_gain so the
// attention is not uniform; norm weights 1 +- 0.1. No tokenizer: for the model backends only.
struct TinyLlamaSpec {
  int layers = 2, n_head = 6, n_kv_head = 2, d_ff = 256, vocab = 512, context = 4096;
  float qk_gain = 1.5f, rope_base = 10000.0f;
  uint32_t seed = 1;
};

inline std::vector<uint8_t> tiny_llama_model(const TinyLlamaSpec& s) {
  const int d = s.n_head * 64, kvd = s.n_kv_head * 64;
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;  // ggml order: dims[0] fastest (the input dimension of a matrix)
    std::vector<float> data;
  };
  std::mt19937 rng(s.seed);
  auto matrix = [&](const std::string& name, int in, int out, float gain) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Tensor t{name, {uint64_t(in), uint64_t(out)}, std::vector<float>(size_t(in) * size_t(out))};
    const float a = gain * std::sqrt(3.0f / float(in));
    for (float& x : t.data) x = a * u(rng);
    return t;
  };
  auto norm = [&](const std::string& name, int n) {
    std::uniform_real_distribution<float> u(0.9f, 1.1f);
    Tensor t{name, {uint64_t(n)}, std::vector<float>(size_t(n))};
    for (float& x : t.data) x = u(rng);
    return t;
  };
  std::vector<Tensor> tensors;
  tensors.push_back(matrix("token_embd.weight", d, s.vocab, 1.0f));
  tensors.push_back(norm("output_norm.weight", d));
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    tensors.push_back(norm(b + "attn_norm.weight", d));
    tensors.push_back(norm(b + "ffn_norm.weight", d));
    tensors.push_back(matrix(b + "attn_q.weight", d, d, s.qk_gain));
    tensors.push_back(matrix(b + "attn_k.weight", d, kvd, s.qk_gain));
    tensors.push_back(matrix(b + "attn_v.weight", d, kvd, 1.0f));
    tensors.push_back(matrix(b + "attn_output.weight", d, d, 1.0f));
    tensors.push_back(matrix(b + "ffn_gate.weight", d, s.d_ff, 1.0f));
    tensors.push_back(matrix(b + "ffn_up.weight", d, s.d_ff, 1.0f));
    tensors.push_back(matrix(b + "ffn_down.weight", s.d_ff, d, 1.0f));
  }
  GgufWriter w;
  w.b = {'G', 'G', 'U', 'F'};
  w.put<uint32_t>(3);
  w.put<uint64_t>(tensors.size());
  w.put<uint64_t>(10);  // metadata entries
  w.kv_str("general.architecture", "llama");
  w.kv_u32("llama.block_count", uint32_t(s.layers));
  w.kv_u32("llama.embedding_length", uint32_t(d));
  w.kv_u32("llama.feed_forward_length", uint32_t(s.d_ff));
  w.kv_u32("llama.attention.head_count", uint32_t(s.n_head));
  w.kv_u32("llama.attention.head_count_kv", uint32_t(s.n_kv_head));
  w.kv_u32("llama.context_length", uint32_t(s.context));
  w.kv_f32("llama.rope.freq_base", s.rope_base);
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_str("tokenizer.ggml.model", "gpt2");
  uint64_t offset = 0;
  for (const Tensor& t : tensors) {
    w.str(t.name);
    w.put<uint32_t>(uint32_t(t.dims.size()));
    for (uint64_t x : t.dims) w.put<uint64_t>(x);
    w.put<uint32_t>(0);  // F32
    w.put<uint64_t>(offset);
    offset += (t.data.size() * 4 + 31) / 32 * 32;
  }
  w.align(32);
  for (const Tensor& t : tensors) {
    const size_t at = w.b.size();
    w.b.resize(at + t.data.size() * 4);
    std::memcpy(w.b.data() + at, t.data.data(), t.data.size() * 4);
    w.align(32);
  }
  return w.b;
}

}  // namespace smollm2_test

// Bad model files: each gives a smollm2::Error naming the problem, never a crash.
#include <cstring>
#include <fstream>
#include <vector>

#include "gguf_writer.hpp"
#include "test_support.hpp"
#include "tokenizer.hpp"

using namespace smollm2;
using namespace smollm2_test;

namespace {

using Writer = GgufWriter;

std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
  return write_bytes(std::string(SMOLLM2_WORK) + "/" + name, bytes);
}

// A tiny "Llama" (1 layer, d_model 64, 1 head, vocab 16) whose single tensor has type `type`.
std::vector<uint8_t> tiny_llama(const std::string& arch, uint32_t type) {
  Writer w;
  w.b = {'G', 'G', 'U', 'F'};
  w.put<uint32_t>(3);
  w.put<uint64_t>(1);  // tensors
  w.put<uint64_t>(9);  // metadata
  w.kv_str("general.architecture", arch);
  w.kv_u32("llama.block_count", 1);
  w.kv_u32("llama.embedding_length", 64);
  w.kv_u32("llama.feed_forward_length", 64);
  w.kv_u32("llama.attention.head_count", 1);
  w.kv_u32("llama.attention.head_count_kv", 1);
  w.kv_u32("llama.context_length", 128);
  w.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_str("tokenizer.ggml.model", "gpt2");
  w.str("token_embd.weight");
  w.put<uint32_t>(2);
  w.put<uint64_t>(64);
  w.put<uint64_t>(16);
  w.put<uint32_t>(type);
  w.put<uint64_t>(0);
  while (w.b.size() % 32) w.b.push_back(0);
  w.b.resize(w.b.size() + 64 * 16 * 4, 0);  // room for the data of any type here
  return w.b;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("missing, foreign and truncated files are rejected with a message") {
  CHECK(error_of([] { GgufFile f(std::string(SMOLLM2_WORK) + "/does_not_exist.gguf"); }).find("cannot open") != std::string::npos);
  const std::string text = write("text.gguf", {'h', 'e', 'l', 'l', 'o', '\n'});
  CHECK(error_of([&] { GgufFile f(text); }).find("bad magic") != std::string::npos);
  CHECK(error_of([&] { GgufFile f(write("empty.gguf", {})); }).find("bad magic") != std::string::npos);
  // The real model cut at several places: in the header, in the metadata, in the tensor data.
  std::ifstream in(model_file().path(), std::ios::binary);
  std::vector<uint8_t> head(3 << 20);
  in.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
  for (size_t cut : {size_t(10), size_t(100), size_t(5000), size_t(1 << 20), size_t(3 << 20)}) {
    const std::string p = write("cut.gguf", std::vector<uint8_t>(head.begin(), head.begin() + long(cut)));
    const std::string e = error_of([&] { GgufFile f(p); });
    CAPTURE(cut);
    CHECK(e.find("truncated") != std::string::npos);
  }
  // Absurd counts in an otherwise valid header.
  std::vector<uint8_t> bad(head.begin(), head.begin() + 64);
  const uint64_t huge = uint64_t(1) << 60;
  std::memcpy(bad.data() + 16, &huge, 8);
  CHECK(error_of([&] { GgufFile f(write("huge.gguf", bad)); }).find("truncated or corrupt") != std::string::npos);
  std::vector<uint8_t> v4(head.begin(), head.begin() + 64);
  v4[4] = 9;
  CHECK(error_of([&] { GgufFile f(write("v9.gguf", v4)); }).find("unsupported GGUF version 9") != std::string::npos);
}

TEST_CASE("an unsupported architecture or tensor type is rejected with a message") {
  const GgufFile gpt2(write("gpt2.gguf", tiny_llama("gpt2", 0)));
  CHECK(error_of([&] { read_llama_config(gpt2); }).find("architecture 'gpt2' is not supported") != std::string::npos);
  const GgufFile q4k(write("q4k.gguf", tiny_llama("llama", 12)));
  CHECK_NOTHROW(read_llama_config(q4k));
  CHECK(error_of([&] { make_cpu_model(q4k, spec("none", 0, 16), 1, 16, 1); }).find("unsupported type Q4_K") != std::string::npos);
  CHECK(error_of([&] { q4k.dequantize("token_embd.weight"); }).find("does not dequantize") != std::string::npos);
  // The tokenizer needs its vocabulary.
  CHECK(error_of([&] { Tokenizer t(q4k); }).find("pre-tokenizer '(none)' is not supported") != std::string::npos);
}

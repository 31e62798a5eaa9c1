// test_support.hpp - paths and helpers shared by the smollm2 tests.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gguf.hpp"
#include "model.hpp"

namespace smollm2_test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(bool(in), "cannot open " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model fetched by the smollm2_fetch_model test (or $SMOLLM2_GGUF).
inline const smollm2::GgufFile& model_file() {
  static std::unique_ptr<smollm2::GgufFile> file = [] {
    std::string path;
    if (const char* env = std::getenv("SMOLLM2_GGUF")) path = env;
    else path = read_file(SMOLLM2_MODEL_PATH_FILE);
    return std::make_unique<smollm2::GgufFile>(path);
  }();
  return *file;
}

inline std::unique_ptr<smollm2::Model> make_model(const smollm2::CacheSpec& spec, int seqs, int64_t len) {
  return smollm2::make_cpu_model(model_file(), spec, seqs, len, 2);
}

inline smollm2::CacheSpec spec(const std::string& format, int residual, int page, int gk = 32, int gv = 32,
                                smollm2::AttentionPath path = smollm2::AttentionPath::kDecode) {
  smollm2::CacheSpec s;
  s.format = format;
  s.residual = residual;
  s.page = page;
  s.gk = gk;
  s.gv = gv;
  s.path = path;
  return s;
}

}  // namespace smollm2_test

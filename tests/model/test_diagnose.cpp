// The diagnose command (eval_diagnose.cpp) on a short window of the excerpt: with "none" the
// quantized and raw keys are the same (no logit error, the same attention); with INT2 + 4 kvq
// sinks token 0 is exact while the other cold tokens are not; plain INT2 moves token 0. And the
// passkey prompt builder puts the key's digits where it says.
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "eval.hpp"
#include "test_support.hpp"
#include "tokenizer.hpp"

using namespace smollm2;
using namespace smollm2_test;

namespace {

// (variant, layer, metric) -> value, from run_diagnose's CSV
// (model,format,gk,gv,residual,variant,source,layer,metric,value).
using Rows = std::map<std::tuple<std::string, int, std::string>, double>;

Rows read_rows(const std::string& path) {
  Rows rows;
  std::ifstream in(path);
  REQUIRE(bool(in));
  std::string line;
  std::getline(in, line);
  CHECK(line == "model,format,gk,gv,residual,variant,source,layer,metric,value");
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 10);
    rows[std::make_tuple(f[1] + "/" + f[5], std::stoi(f[7]), f[8])] = std::stod(f[9]);
  }
  return rows;
}

}  // namespace

TEST_CASE("diagnose: none has no key error, kvq sinks keep token 0 exact, int2 moves it") {
  const Tokenizer tok(model_file());
  const ModelFactory make = [](const CacheSpec& s, int seqs, int64_t len) { return make_model(s, seqs, len); };
  DiagnoseOptions o;
  o.text_path = std::string(SMOLLM2_FIXTURES) + "/persuasion_excerpt.txt";
  o.window = 384;
  o.query_stride = 4;
  o.chunk = 128;
  o.csv_path = std::string(SMOLLM2_WORK) + "/diagnose_test.csv";
  std::remove(o.csv_path.c_str());
  CacheSpec sinks = spec("int2", 64, 32);
  sinks.sinks = 4;
  run_diagnose(tok, make, spec("none", 64, 32), o);
  run_diagnose(tok, make, spec("int2", 64, 32), o);
  run_diagnose(tok, make, sinks, o);
  const Rows rows = read_rows(o.csv_path);
  const int layers = int(model_file().get_int("llama.block_count"));
  REQUIRE(layers > 0);
  double int2_err0 = 0.0;
  for (int l = 0; l < layers; ++l) {
    auto at = [&](const std::string& v, const char* m) {
      const auto it = rows.find(std::make_tuple(v, l, std::string(m)));
      REQUIRE_MESSAGE(it != rows.end(), v << " layer " << l << " " << m);
      return it->second;
    };
    CHECK(at("none/base", "queries") > 0);
    CHECK(at("none/base", "err0") == 0.0);
    CHECK(at("none/base", "err_other") == 0.0);
    CHECK(at("none/base", "tv") == 0.0);
    CHECK(at("none/base", "mass0_raw_c") == at("none/base", "mass0_quant_c"));
    CHECK(at("none/base", "mass0") >= 0.0);
    CHECK(at("none/base", "mass0_3") <= 1.0 + 1e-6);
    CHECK(at("int2/sinks=4", "err0") == 0.0);
    CHECK(at("int2/sinks=4", "err_other") > 0.0);
    int2_err0 += at("int2/base", "err0");
  }
  CHECK(int2_err0 > 0.0);
}

TEST_CASE("passkey prompt: the key's digits are where it says") {
  const Tokenizer tok(model_file());
  const int key = passkey_first_key(1);
  const PasskeyPrompt p = passkey_prompt(tok, 1024, 0.5, key);
  CHECK(p.key == key);
  CHECK(int64_t(p.tokens.size()) <= 1024);
  std::string digits;
  for (int64_t t : p.key_digits) digits += tok.decode_token(p.tokens[size_t(t)]);
  CHECK(digits == std::to_string(key) + std::to_string(key));
  CHECK(p.key_digits.front() > 400);
  CHECK(p.key_digits.back() < 624);
}

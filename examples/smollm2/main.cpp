// main.cpp - the smollm2 example engine's command line (see README.md beside this file).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <new>
#include <sstream>

#include "eval.hpp"
#ifdef SMOLLM2_HAVE_GPU
#include "model_gpu.hpp"
#endif

namespace {

using namespace smollm2;

const char* kUsage =
    "usage: smollm2 --model PATH [--device cpu|gpu] [cache flags] [--threads N] [--max-context N] [--csv FILE] COMMAND [flags]\n"
    "  --device cpu|gpu                    cpu (default): fp32 on the CPU, kvq's host reference cache;\n"
    "                                      gpu: cuBLAS GEMMs and kvq's append/decode/prefill kernels (page 64,\n"
    "                                      Gk = Gv = 32 only; needs a build with CUDA and a GPU)\n"
    "  --attention-out fp32|bf16           CPU: the attention output kept in fp32 (default) or rounded to bf16,\n"
    "                                      as kvq's kernels write it (the GPU backend's precision; the GPU: bf16)\n"
    "cache flags:\n"
    "  --format none|int8|int4|int2|k4v2|k2v4|k3v2  KV cache format (k4v2: INT4 keys, INT2 values; k2v4 the\n"
    "                                      reverse, page 64 and Gk = Gv = 32 only; k3v2: INT3 keys, INT2\n"
    "                                      values, CPU, page 64, Gk / Gv 64 / 64, 64 / 32, 32 / 64; default none)\n"
    "  --gk N --gv N                       INT2/INT4 group sizes: keys per channel over N tokens, values per\n"
    "                                      token over N channels (16, 32, 64; default 32)\n"
    "  --residual R                        hot window: R newest tokens stay unquantized (multiple of the page; 128)\n"
    "  --page P                            page size 16, 32 or 64 (64)\n"
    "  --attention decode|reference        decode: what token-by-token decoding sees, at any chunk size\n"
    "                                      (default); reference: kvq::reference::attention per chunk\n"
    "  --sinks S                           kvq attention sinks: the first S tokens stay unquantized (0..16)\n"
    "  --key-clip minmax|mse               kvq's key-group range: min/max, or MSE-optimal clipping\n"
    "  --key-clip-from L                   the key-group rule applies from layer L on (below: min/max; 0)\n"
    "  --rotate on|off                     Hadamard rotation (random signs) of q/k/v per head before the cache,\n"
    "                                      undone on the attention output (both devices; default off)\n"
    "  --rotate-draw N                     another draw of the rotation's random signs (default 0)\n"
    "  --mix FORMAT:LAYERS                 those layers use FORMAT instead of --format (e.g. k4v2:3-9 or\n"
    "                                      int4:3,5,18; same groups, R, P, sinks; both devices; repeatable)\n"
    "  accuracy experiments (CPU, --attention decode; docs/ACCURACY.md):\n"
    "  --ablate-kv k|v|kv                  quantize only the keys, only the values, or both (default)\n"
    "  --ablate-layers A-B                 quantize only layers A..B (B empty: to the last)\n"
    "  --sim-sinks S                       the first S tokens stay bf16 and leave their groups' statistics\n"
    "  --sim-k-clip|--sim-v-clip minmax|mse  group range by min/max or by an MSE search of each end\n"
    "  --sim-v-levels uniform|lloydmax     2-bit value levels\n"
    "  --sim-k-axis channel|token          key groups per channel (kvq) or per token\n"
    "  --sim-k-bits / --sim-v-bits 2|3|4   that side's codes in this many bits (3: not a kvq format)\n"
    "  --sim-k-rope post|pre               keys quantized after RoPE (kvq) or before it (and the rotation)\n"
    "commands:\n"
    "  perplexity --text FILE [--window 4096] [--windows 4] [--start 0] [--chunk 256] [--batch 2]\n"
    "  passkey [--lengths 1024,2048,4096,8192] [--depths 0.1,0.3,0.5,0.7,0.9] [--trials 4] [--seed 1] [--chunk 256]\n"
    "  generate [--prompt TEXT]... [--passage FILE] [--max-new 128] [--chunk 256]\n"
    "  diagnose [--text FILE [--window 2048] [--windows 1] [--start 0] [--query-stride 8]]\n"
    "           [--passkey-prompt LENGTH,DEPTH [--seed 1]] [--chunk 256]\n"
    "                             why a format loses accuracy, per layer (CPU, --attention decode): attention on\n"
    "                             token 0, key-group statistics, logit error of quantized keys (eval_diagnose.cpp);\n"
    "                             --csv FILE: long-format rows (its own columns)\n"
    "  tokenize --text FILE       print the token ids of a text\n"
    "  next --prompt TEXT         print the 5 likeliest next tokens (id:logit) after TEXT (no chat template)\n"
    "  info                       print the model and cache configuration\n";

struct Args {
  std::string command;
  std::multimap<std::string, std::string> flags;
  bool has(const std::string& k) const { return flags.count(k) != 0; }
  std::string str(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  }
  long long num(const std::string& k, long long def) const {
    if (!has(k)) return def;
    const std::string v = str(k);
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end) throw Error("--" + k + " expects an integer, got '" + v + "'");
    return x;
  }
  template <class T>
  std::vector<T> list(const std::string& k, const std::vector<T>& def) const {
    if (!has(k)) return def;
    std::vector<T> out;
    std::stringstream ss(str(k));
    std::string item;
    while (std::getline(ss, item, ',')) {
      char* end = nullptr;
      const double x = std::strtod(item.c_str(), &end);
      if (item.empty() || *end) throw Error("--" + k + " expects a comma-separated list of numbers");
      out.push_back(T(x));
    }
    return out;
  }
};

Args parse(int argc, char** argv) {
  static const char* known[] = {"model", "device", "format", "gk", "gv", "residual", "page", "attention", "threads", "max-context",
                                "csv", "text", "window", "windows", "start", "chunk", "batch", "lengths", "depths",
                                "trials", "seed", "prompt", "passage", "max-new", "rotate", "rotate-draw", "mix", "sinks", "key-clip", "key-clip-from", "ablate-kv",
                                "ablate-layers", "sim-sinks", "sim-k-clip", "sim-v-clip", "sim-v-levels", "sim-k-axis", "sim-k-bits", "sim-v-bits", "sim-k-rope", "query-stride", "passkey-prompt",
                                "attention-out"};
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") throw Error("");
    if (s.rfind("--", 0) == 0) {
      const std::string key = s.substr(2);
      bool ok = false;
      for (const char* k : known) ok = ok || key == k;
      if (!ok) throw Error("unknown flag '" + s + "'");
      if (i + 1 >= argc) throw Error("flag '" + s + "' needs a value");
      a.flags.emplace(key, argv[++i]);
    } else if (a.command.empty()) {
      a.command = s;
    } else {
      throw Error("unexpected argument '" + s + "'");
    }
  }
  return a;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.command.empty()) throw Error("no command given");
  if (!a.has("model")) throw Error("--model PATH is required");
  CacheSpec spec;
  spec.format = a.str("format", "none");
  spec.gk = int(a.num("gk", 32));
  spec.gv = int(a.num("gv", 32));
  spec.residual = int(a.num("residual", 128));
  spec.page = int(a.num("page", 64));
  const std::string path = a.str("attention", "decode");
  if (path != "decode" && path != "reference") throw Error("--attention must be decode or reference");
  spec.path = path == "decode" ? AttentionPath::kDecode : AttentionPath::kReference;
  spec.sinks = int(a.num("sinks", 0));
  const std::string clip = a.str("key-clip", "minmax");
  if (clip != "minmax" && clip != "mse") throw Error("--key-clip expects minmax or mse");
  spec.key_clip = clip == "mse" ? kvq::KeyClip::kMse : kvq::KeyClip::kMinMax;
  spec.key_clip_from = int(a.num("key-clip-from", 0));
  if (spec.key_clip_from < 0) throw Error("--key-clip-from expects a layer number >= 0");
  const std::string rot = a.str("rotate", "off");
  if (rot != "on" && rot != "off") throw Error("--rotate expects on or off");
  spec.rotate = rot == "on";
  spec.rotate_draw = int(a.num("rotate-draw", 0));
  if (spec.rotate_draw < 0 || spec.rotate_draw > 1000000) throw Error("--rotate-draw expects 0 .. 1000000");
  for (auto m = a.flags.equal_range("mix"); m.first != m.second; ++m.first) parse_mix(spec, m.first->second);
  for (const auto& f : a.flags) parse_ablation_flag(spec.ablation, f.first, f.second);
  config_key(spec);  // rejects an unknown format before the model loads

  const GgufFile file(a.str("model"));
  const LlamaConfig cfg = read_llama_config(file);
  const Tokenizer tok(file);
  const int threads = int(a.num("threads", 0));
  const int64_t max_context = a.num("max-context", cfg.context);
  const std::string device = a.str("device", "cpu");
  if (device != "cpu" && device != "gpu") throw Error("--device must be cpu or gpu");
  const std::string attention_out = a.str("attention-out", device == "gpu" ? "bf16" : "fp32");
  if (attention_out != "fp32" && attention_out != "bf16") throw Error("--attention-out must be fp32 or bf16");
  if (device == "gpu" && attention_out != "bf16") throw Error("--attention-out fp32: the GPU backend writes the attention output in bf16");
#ifndef SMOLLM2_HAVE_GPU
  if (device == "gpu") throw Error("--device gpu: this binary was built without CUDA (nvcc was not found at configure time)");
#endif
  const ModelFactory make = [&](const CacheSpec& s, int seqs, int64_t len) {
    if (len > max_context)
      throw Error("the " + a.command + " run needs " + std::to_string(len) + " tokens per sequence, more than the cache holds (" +
                  std::to_string(max_context) + " tokens; --max-context, default the model's trained context)");
#ifdef SMOLLM2_HAVE_GPU
    if (device == "gpu") return make_gpu_model(file, s, seqs, len);
#endif
    return make_cpu_model(file, s, seqs, len, threads, attention_out == "bf16");
  };
  std::vector<CsvRow> rows;
  if (a.command == "info") {
    auto m = make(spec, 1, std::min<int64_t>(max_context, 256));
    std::printf("model %s: %d layers, d_model %d, %d query / %d KV heads of dim %d, d_ff %d, vocab %d, context %lld\n",
                file.path().c_str(), cfg.n_layer, cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.head_dim, cfg.d_ff, cfg.vocab,
                (long long)cfg.context);
    std::printf("cache %s: %zu cold bytes per token (all layers); device %s\n", describe(spec).c_str(),
                m->cache().cold_bytes_per_token(), device.c_str());
  } else if (a.command == "tokenize") {
    std::ifstream in(a.str("text"), std::ios::binary);
    if (!in) throw Error("cannot open --text '" + a.str("text") + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    for (int32_t id : tok.encode(ss.str())) std::printf("%d\n", id);
  } else if (a.command == "next") {
    const std::vector<int32_t> ids = tok.encode(a.str("prompt"), false);
    if (ids.empty()) throw Error("next needs a non-empty --prompt");
    auto m = make(spec, 1, int64_t(ids.size()));
    std::vector<float> logits;
    feed(*m, 0, ids, int(a.num("chunk", 256)), logits);
    std::vector<int32_t> top(5, -1);
    for (int k = 0; k < 5; ++k) {
      for (int32_t v = 0; v < cfg.vocab; ++v)
        if (std::find(top.begin(), top.end(), v) == top.end() && (top[size_t(k)] < 0 || logits[size_t(v)] > logits[size_t(top[size_t(k)])]))
          top[size_t(k)] = v;
      std::printf("%s%d:%.4f", k ? " " : "", top[size_t(k)], logits[size_t(top[size_t(k)])]);
    }
    std::printf("\n");
  } else if (a.command == "perplexity") {
    PerplexityOptions o;
    if (!a.has("text")) throw Error("perplexity needs --text FILE");
    o.text_path = a.str("text");
    o.window = a.num("window", o.window);
    o.windows = int(a.num("windows", o.windows));
    o.start = a.num("start", o.start);
    o.chunk = int(a.num("chunk", o.chunk));
    o.batch = int(a.num("batch", o.batch));
    rows = run_perplexity(tok, make, spec, o);
  } else if (a.command == "passkey") {
    PasskeyOptions o;
    o.lengths = a.list<int64_t>("lengths", o.lengths);
    o.depths = a.list<double>("depths", o.depths);
    o.trials = int(a.num("trials", o.trials));
    o.seed = uint64_t(a.num("seed", 1));
    o.chunk = int(a.num("chunk", o.chunk));
    rows = run_passkey(tok, make, spec, o);
  } else if (a.command == "generate") {
    GenerateOptions o;
    for (auto it = a.flags.lower_bound("prompt"); it != a.flags.upper_bound("prompt"); ++it) o.prompts.push_back(it->second);
    o.passage_path = a.str("passage");
    o.max_new = int(a.num("max-new", o.max_new));
    o.chunk = int(a.num("chunk", o.chunk));
    rows = run_generate(tok, make, spec, o);
  } else if (a.command == "diagnose") {
    DiagnoseOptions o;
    o.text_path = a.str("text");
    o.window = a.num("window", o.window);
    o.windows = int(a.num("windows", o.windows));
    o.start = a.num("start", o.start);
    o.query_stride = int(a.num("query-stride", o.query_stride));
    if (a.has("passkey-prompt")) {
      const std::vector<double> pk = a.list<double>("passkey-prompt", {});
      if (pk.size() != 2 || pk[0] < 1) throw Error("--passkey-prompt expects LENGTH,DEPTH (e.g. 4096,0.5)");
      o.passkey_length = int64_t(pk[0]);
      o.passkey_depth = pk[1];
    }
    o.seed = uint64_t(a.num("seed", 1));
    o.chunk = int(a.num("chunk", o.chunk));
    o.csv_path = a.str("csv");
    run_diagnose(tok, make, spec, o);
  } else {
    throw Error("unknown command '" + a.command + "'");
  }
  if (a.has("csv") && !rows.empty()) append_csv(a.str("csv"), "SmolLM2-135M-Instruct-Q4_1", spec, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const smollm2::Error& e) {
    if (*e.what()) std::fprintf(stderr, "smollm2: error: %s\n\n", e.what());
    std::fputs(kUsage, stderr);
    return *e.what() ? 1 : 0;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "smollm2: error: out of memory (try a smaller --window, --batch or --lengths)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "smollm2: error: %s\n", e.what());
    return 1;
  }
}

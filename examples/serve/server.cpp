// server.cpp - kvq_serve: an OpenAI-compatible HTTP server (cpp-httplib) over the continuous-
// batching engine of engine.hpp, and `generate`, the same engine without HTTP (what the tests
// compare the server's answers with).
//
//   kvq_serve serve --model M.gguf [--device cpu|gpu] [--port 8000] ...   (KVQ_KV_FORMAT picks the cache)
//   kvq_serve generate --model M.gguf --prompt TEXT [--chat] [--max-tokens 32] [--seed 0] ...
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>
#include <httplib.h>

#include "backend.hpp"
#include "openai.hpp"
#ifdef SERVE_HAVE_GPU
#include "backend_gpu.hpp"
#endif

namespace {

using serve::ApiError;
using serve::ApiRequest;
using serve::Endpoint;
using serve::Event;
using serve::Finish;
using serve::json;
using smollm2::Error;

struct Options {
  std::string model, device = "cpu", format;
  int max_batch = 0, token_budget = 8192, prefill_chunk = 0, threads = 0, max_waiting = 1024;
  double kv_memory_mib = 0;
  int64_t max_seq_len = 0;  // 0: cpu 2048, gpu the model's context; beyond the context: honoured, with a warning
  bool no_graphs = false, batch_variant = false;
  // serve
  std::string host = "127.0.0.1", served_name;
  int port = 8000, max_concurrent = 256, default_max_tokens = 256;
  double shutdown_grace = 30.0;
  // generate
  std::vector<std::string> prompts, stop;
  bool chat = false, batched = false, ignore_eos = false;
  int max_tokens = 32;
  float temperature = 0.0f, top_p = 1.0f;
  uint64_t seed = 0;
};

// The engine and what it runs on, built from the options.
struct Stack {
  std::unique_ptr<smollm2::GgufFile> file;
  std::unique_ptr<smollm2::Tokenizer> tok;
  std::unique_ptr<serve::ChatTemplate> chat;
  serve::FormatChoice format;
  serve::CapacityPlan plan;
  serve::EngineConfig cfg;
  std::unique_ptr<serve::Backend> backend;
  std::unique_ptr<serve::Engine> engine;
  std::string model_name;
};

Stack build(const Options& o) {
  Stack s;
  s.file = std::make_unique<smollm2::GgufFile>(o.model);
  const smollm2::LlamaConfig lc = smollm2::read_llama_config(*s.file);
  s.tok = std::make_unique<smollm2::Tokenizer>(*s.file);
  s.chat = std::make_unique<serve::ChatTemplate>(*s.file);
  s.format = serve::choose_format(o.format.empty() ? serve::format_from_env("int4") : o.format);
  const bool gpu = o.device == "gpu";
  if (!gpu && o.device != "cpu") throw Error("--device must be cpu or gpu");
  const int max_batch = o.max_batch > 0 ? o.max_batch : gpu ? 128 : 8;
  uint64_t budget = uint64_t(o.kv_memory_mib * 1048576.0);
  std::string device_line = "CPU (kvq host reference)";
#ifdef SERVE_HAVE_GPU
  if (gpu) {
    const std::string why = serve::gpu_unavailable_reason();
    if (!why.empty()) throw Error("--device gpu: " + why);
    if (budget == 0) budget = serve::gpu_free_bytes() / 2;  // half the free memory for the cache
    device_line = serve::gpu_name();
  }
#else
  if (gpu) throw Error("--device gpu: this kvq_serve was built without CUDA");
#endif
  if (budget == 0) budget = 1ull << 30;  // CPU: 1 GiB
  s.plan = serve::plan_capacity(lc, s.format, budget, max_batch, o.max_seq_len > 0 ? o.max_seq_len : gpu ? lc.context : 2048);
  s.cfg.max_batch = max_batch;
  s.cfg.token_budget = o.token_budget;
  s.cfg.prefill_chunk = o.prefill_chunk;
  s.cfg.page = s.format.format.page;
  s.cfg.residual = s.format.format.residual;
  s.cfg.max_seq_len = s.plan.max_seq_len;
  // No more pages than the slots can use (the CPU cache keeps a pool of that size anyway).
  s.cfg.num_pages = std::min<int64_t>(s.plan.num_pages, int64_t(max_batch) * ((s.cfg.max_seq_len + s.cfg.page - 1) / s.cfg.page));
  s.cfg.max_waiting = o.max_waiting;
  for (const char* name : {"<|im_end|>", "<|endoftext|>"})
    if (s.tok->id_of(name) >= 0) s.cfg.eos.push_back(s.tok->id_of(name));
  if (s.tok->eos() >= 0 && std::find(s.cfg.eos.begin(), s.cfg.eos.end(), s.tok->eos()) == s.cfg.eos.end())
    s.cfg.eos.push_back(s.tok->eos());
  std::fprintf(stderr, "kvq_serve: %s, %s; %s\n", o.model.c_str(), device_line.c_str(), s.plan.summary.c_str());
  if (s.cfg.max_seq_len > lc.context)
    std::fprintf(stderr, "kvq_serve: warning: requests up to %lld tokens, beyond the model's trained context of %lld: RoPE "
                 "extrapolates, quality beyond %lld tokens is not guaranteed\n",
                 (long long)s.cfg.max_seq_len, (long long)lc.context, (long long)lc.context);
#ifdef SERVE_HAVE_GPU
  if (gpu) s.backend = serve::make_gpu_backend(*s.file, s.format, s.cfg, serve::GpuOptions{!o.no_graphs, !o.batch_variant});
#endif
  if (!gpu) s.backend = serve::make_cpu_backend(*s.file, s.format, max_batch, s.cfg.max_seq_len, o.threads);
  const smollm2::Tokenizer* tok = s.tok.get();
  s.engine = std::make_unique<serve::Engine>(*s.backend, s.cfg, [tok](const std::vector<int32_t>& t) { return tok->decode(t); });
  std::fprintf(stderr, "kvq_serve: %d slots, token budget %d per step, prompts in chunks of %d, %lld cold pages in the pool\n",
               max_batch, o.token_budget, s.engine->config().prefill_chunk, (long long)s.cfg.num_pages);
  s.model_name = o.served_name;
  if (s.model_name.empty()) {
    const std::string base = o.model.substr(o.model.find_last_of('/') + 1);
    s.model_name = base.substr(0, base.rfind(".gguf") == std::string::npos ? base.size() : base.rfind(".gguf"));
  }
  return s;
}

// ---- generate: the engine without HTTP ---------------------------------------------------------

int run_generate(const Options& o) {
  Stack s = build(o);
  struct Out {
    std::string text;
    std::vector<int32_t> tokens;
    Finish reason = Finish::kNone;
    int prompt = 0, completion = 0;
  };
  std::vector<Out> outs(o.prompts.size());
  auto submit = [&](size_t i) {
    serve::RequestSpec r;
    r.prompt = s.tok->encode(o.chat ? s.chat->render({{"user", o.prompts[i]}}) : o.prompts[i], true);
    r.max_tokens = o.max_tokens;
    r.sampling = serve::SamplingParams{o.temperature, o.top_p, o.seed};
    r.stop = o.stop;
    r.ignore_eos = o.ignore_eos;
    std::string why;
    if (s.engine->submit(r, [&outs, i](const Event& ev) {
          Out& out = outs[i];
          out.text += ev.text;
          out.tokens.insert(out.tokens.end(), ev.tokens.begin(), ev.tokens.end());
          out.prompt = ev.prompt_tokens;
          out.completion = ev.completion_tokens;
          if (ev.finished) out.reason = ev.reason;
        }, &why) == 0)
      throw Error("generate: " + why);
  };
  for (size_t i = 0; i < o.prompts.size(); ++i) {
    submit(i);
    if (!o.batched)
      while (s.engine->step()) {
      }
  }
  while (s.engine->step()) {
  }
  for (size_t i = 0; i < outs.size(); ++i)
    std::printf("%s\n", serve::dump(json{{"prompt", o.prompts[i]}, {"text", outs[i].text}, {"token_ids", outs[i].tokens},
                                         {"finish_reason", serve::finish_name(outs[i].reason)},
                                         {"prompt_tokens", outs[i].prompt}, {"completion_tokens", outs[i].completion}})
                            .c_str());
  return 0;
}

// ---- serve -------------------------------------------------------------------------------------

// Events of one request, from the engine thread to the HTTP thread that answers it.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  bool finished = false;   // the engine sent its last event
  bool delivered = false;  // the HTTP side wrote the end of the answer
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(serve::dump(serve::error_body(e)), "application/json");
}

ApiError api_error(int status, const std::string& message, const std::string& type, const std::string& code = "") {
  ApiError e;
  e.status = status;
  e.message = message;
  e.type = type;
  e.code = code;
  return e;
}

int run_serve(const Options& o) {
  // SIGINT / SIGTERM are taken by sigwait below: blocked here, before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Stack s = build(o);
  serve::Engine& engine = *s.engine;
  serve::ParseContext ctx{s.tok.get(), s.chat.get(), s.model_name, o.default_max_tokens, s.cfg.max_seq_len, s.backend->vocab()};
  if (!s.chat->supported()) std::fprintf(stderr, "kvq_serve: /v1/chat/completions unavailable: %s\n", s.chat->why().c_str());
  engine.start();

  std::atomic<int> inflight{0};
  std::atomic<bool> shutting_down{false};
  std::atomic<uint64_t> counter{0};
  const int64_t started = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();

  httplib::Server svr;
  const int threads = o.max_concurrent + 8;  // a streaming answer holds its thread; 8 more answer the rest
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  svr.set_payload_max_length(16u << 20);
  svr.set_keep_alive_max_count(1000);
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, api_error(500, what, "server_error"));
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, api_error(404, "no route " + req.method + " " + req.path, "invalid_request_error", "not_found"));
    else if (res.status == 413) send_error(res, api_error(413, "the request body is too large (16 MiB at most)", "invalid_request_error"));
    else send_error(res, api_error(res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error"));
  });

  svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    const serve::EngineStats st = engine.stats();
    res.set_content(serve::dump(json{{"status", shutting_down ? "shutting_down" : "ok"}, {"running", st.running},
                                     {"waiting", st.waiting}, {"steps", st.steps}, {"decode_tokens", st.decode_tokens},
                                     {"prefill_tokens", st.prefill_tokens}, {"pages_free", st.pages_free},
                                     {"kv_format", s.format.name}}),
                    "application/json");
  });
  svr.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(serve::dump(json{{"object", "list"},
                                     {"data", json::array({json{{"id", s.model_name}, {"object", "model"}, {"created", started},
                                                                {"owned_by", "kvq"}, {"max_model_len", s.cfg.max_seq_len},
                                                                {"kv_format", describe(s.format)}}})}}),
                    "application/json");
  });

  auto handler = [&](Endpoint ep) {
    return [&, ep](const httplib::Request& req, httplib::Response& res) {
      if (shutting_down) return send_error(res, api_error(503, "the server is shutting down", "server_error"));
      ApiRequest r;
      try {
        r = serve::parse_request(req.body, ep, ctx);
      } catch (const ApiError& e) {
        return send_error(res, e);
      }
      if (++inflight > o.max_concurrent) {
        --inflight;
        return send_error(res, api_error(429, "too many concurrent requests (at most " + std::to_string(o.max_concurrent) + ")",
                                         "rate_limit_error", "too_many_requests"));
      }
      auto box = std::make_shared<Mailbox>();
      std::string why;
      const uint64_t id = engine.submit(r.spec, [box](const Event& ev) {
        std::lock_guard<std::mutex> lock(box->mu);
        box->events.push_back(ev);
        box->finished |= ev.finished;
        box->cv.notify_all();
      }, &why);
      if (id == 0) {
        --inflight;
        const bool busy = why.find("too many") != std::string::npos, down = why.find("shutting down") != std::string::npos;
        return send_error(res, api_error(busy ? 429 : down ? 503 : 400, why, busy ? "rate_limit_error" : down ? "server_error"
                                                                                                               : "invalid_request_error"));
      }
      const std::string rid = std::string(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(started) + "-" +
                              std::to_string(++counter);
      const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      if (!r.stream) {
        serve::Completed c;
        std::string error;
        {
          std::unique_lock<std::mutex> lock(box->mu);
          box->cv.wait(lock, [&] { return box->finished; });
          for (const Event& ev : box->events) {
            c.text += ev.text;
            c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
            c.prompt_tokens = ev.prompt_tokens;
            c.completion_tokens = ev.completion_tokens;
            if (ev.finished) c.reason = ev.reason, error = ev.error;
          }
        }
        --inflight;
        if (c.reason == Finish::kError) return send_error(res, api_error(500, "generation failed: " + error, "server_error"));
        res.set_content(serve::dump(serve::response_body(r, rid, created, c)), "application/json");
        return;
      }
      auto first = std::make_shared<bool>(true);
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [&engine, box, r, rid, created, id, first](size_t, httplib::DataSink& sink) {
            std::deque<Event> evs;
            {
              std::unique_lock<std::mutex> lock(box->mu);
              box->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return !box->events.empty(); });
              evs.swap(box->events);
            }
            auto send = [&](const std::string& data) { return sink.write(data.data(), data.size()); };
            for (const Event& ev : evs) {
              if (!ev.text.empty() || !ev.tokens.empty() || ev.finished || *first) {
                const json chunk = serve::stream_chunk(r, rid, created, ev.text, ev.tokens, *first, ev.finished ? ev.reason : Finish::kNone);
                *first = false;
                if (!send("data: " + serve::dump(chunk) + "\n\n")) {
                  engine.cancel(id);
                  return false;
                }
              }
              if (!ev.finished) continue;
              if (ev.reason == Finish::kError)
                send("data: " + serve::dump(serve::error_body(api_error(500, "generation failed: " + ev.error, "server_error"))) + "\n\n");
              if (r.include_usage) send("data: " + serve::dump(serve::usage_chunk(r, rid, created, ev.prompt_tokens, ev.completion_tokens)) + "\n\n");
              send("data: [DONE]\n\n");
              {
                std::lock_guard<std::mutex> lock(box->mu);
                box->delivered = true;
              }
              sink.done();
              return true;
            }
            if (!sink.is_writable()) {
              engine.cancel(id);
              return false;
            }
            return true;
          },
          [&engine, &inflight, box, id](bool) {
            bool done;
            {
              std::lock_guard<std::mutex> lock(box->mu);
              done = box->delivered;
            }
            if (!done) engine.cancel(id);  // the client went away: the sequence leaves the batch
            --inflight;
          });
    };
  };
  svr.Post("/v1/completions", handler(Endpoint::kCompletions));
  svr.Post("/v1/chat/completions", handler(Endpoint::kChat));

  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) throw Error("cannot listen on " + o.host + ":" + std::to_string(o.port));
  std::printf("kvq_serve: listening on http://%s:%d (model %s, KV format %s)\n", o.host.c_str(), port, s.model_name.c_str(),
              s.format.name.c_str());
  std::fflush(stdout);
  std::thread http([&] { svr.listen_after_bind(); });

  int sig = 0;
  sigwait(&signals, &sig);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::fprintf(stderr, "kvq_serve: %s: no new requests; finishing the %d in flight (up to %.0f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", inflight.load(), o.shutdown_grace);
  shutting_down = true;
  engine.stop_accepting();
  while (!engine.idle() && elapsed() < o.shutdown_grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!engine.idle()) {
    const serve::EngineStats st = engine.stats();
    std::fprintf(stderr, "kvq_serve: cancelling %d running and %d waiting requests\n", st.running, st.waiting);
    engine.cancel_all();
  }
  const double drain = elapsed() + 10.0;
  while ((!engine.idle() || inflight > 0) && elapsed() < drain) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  svr.stop();
  http.join();
  engine.stop();
  const serve::EngineStats st = engine.stats();
  std::fprintf(stderr, "kvq_serve: stopped after %lld steps (%lld decode, %lld prefill tokens)\n", (long long)st.steps,
               (long long)st.decode_tokens, (long long)st.prefill_tokens);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvq_serve: an OpenAI-compatible server on a kvq-quantized KV cache (KVQ_KV_FORMAT=int2|int4|int8|k4v2|none)"};
  app.require_subcommand(1);
  Options o;
  auto common = [&](CLI::App* c) {
    c->add_option("--model", o.model, "GGUF file (SmolLM2-135M-Instruct: examples/smollm2/fetch_model.sh)")->required();
    c->add_option("--device", o.device, "cpu (kvq host reference) or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
    c->add_option("--format", o.format, "KV format (default: $KVQ_KV_FORMAT, else int4)")
        ->check(CLI::IsMember({"int2", "int4", "int8", "k4v2", "none"}));
    c->add_option("--max-batch", o.max_batch, "hot-window slots: sequences running at once (default cpu 8, gpu 128)")->check(CLI::Range(1, 4096));
    c->add_option("--token-budget", o.token_budget, "tokens per step (decode + prefill chunks)")->check(CLI::Range(2, 1 << 20));
    c->add_option("--prefill-chunk", o.prefill_chunk,
                  "prompt tokens per prefill chunk: prompts are cut at its multiples whatever the load (default token budget - max batch)")
        ->check(CLI::Range(1, 1 << 20));
    c->add_option("--kv-memory-mib", o.kv_memory_mib, "memory for the KV cache (default cpu 1024, gpu half the free memory)")->check(CLI::Range(1.0, 1e9));
    c->add_option("--max-seq-len", o.max_seq_len,
                  "prompt + completion limit per request (default cpu 2048, gpu the model's context; more than the model's "
                  "context is honoured: RoPE extrapolates)")->check(CLI::Range(int64_t(2), int64_t(1) << 30));
    c->add_option("--threads", o.threads, "CPU threads (0: all cores)");
    c->add_option("--max-waiting", o.max_waiting, "requests waiting for admission at most")->check(CLI::Range(0, 1 << 20));
    c->add_flag("--no-graphs", o.no_graphs, "GPU: do not capture decode steps in CUDA graphs");
    c->add_flag("--batch-variant", o.batch_variant,
                "GPU: a decode plan per batch size and cuBLAS's GEMM choice per step (faster for few long sequences; "
                "a fixed-seed request's tokens may then depend on the batch)");
  };
  CLI::App* srv = app.add_subcommand("serve", "run the HTTP server until SIGINT / SIGTERM");
  common(srv);
  srv->add_option("--host", o.host, "address to listen on");
  srv->add_option("--port", o.port, "port (0: any free port, printed)")->check(CLI::Range(0, 65535));
  srv->add_option("--max-concurrent", o.max_concurrent, "generation requests in flight at most (429 beyond)")->check(CLI::Range(1, 100000));
  srv->add_option("--default-max-tokens", o.default_max_tokens, "chat completions without max_tokens")->check(CLI::Range(1, 1 << 30));
  srv->add_option("--shutdown-grace", o.shutdown_grace, "seconds to finish in-flight requests on SIGINT/SIGTERM before cancelling them")->check(CLI::Range(0.0, 3600.0));
  srv->add_option("--served-model-name", o.served_name, "model id of /v1/models (default: the file name)");
  CLI::App* gen = app.add_subcommand("generate", "run prompts through the engine and print one JSON line each");
  common(gen);
  gen->add_option("--prompt", o.prompts, "prompt text (repeatable)")->required();
  gen->add_flag("--chat", o.chat, "wrap each prompt as a user message in the model's chat template");
  gen->add_flag("--batched", o.batched, "submit every prompt at once (default: one after the other, each alone)");
  gen->add_option("--max-tokens", o.max_tokens, "tokens to generate at most")->check(CLI::Range(1, 1 << 30));
  gen->add_option("--temperature", o.temperature, "0: greedy")->check(CLI::Range(0.0, 2.0));
  gen->add_option("--top-p", o.top_p)->check(CLI::Range(0.0, 1.0));
  gen->add_option("--seed", o.seed);
  gen->add_option("--stop", o.stop, "stop string (repeatable)");
  gen->add_flag("--ignore-eos", o.ignore_eos);
  CLI11_PARSE(app, argc, argv);
  try {
    return srv->parsed() ? run_serve(o) : run_generate(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvq_serve: error: %s\n", e.what());
    return 1;
  }
}

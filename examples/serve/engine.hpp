// engine.hpp - a continuous-batching engine over a kvq cache: requests join and leave between
// steps; each step packs one decode token of every running sequence plus chunked-prefill pieces of
// the sequences still reading their prompts, under a token budget, into one forward call of a
// Backend (the CPU backend: smollm2's model on kvq's host reference; the GPU backend: one
// kvq::Handle call per layer for the decode tokens and one for the prefill chunks, engine_gpu.hpp).
//
// Chunked prefill: a prompt is read in chunks of EngineConfig::prefill_chunk tokens, [0, C),
// [C, 2C), ..., the same cuts alone and under any load. Where a prompt is cut changes its result
// (in kvq's chunked-prefill contract a chunk's queries share one cold boundary, so with a quantized
// cache a token may see a neighbour quantized in one cut and exact in another): with cuts that
// follow the budget left over, a fixed-seed request would sample other tokens under load. A chunk
// that does not fit in what is left of a step's budget waits for the next step.
//
// Admission: a waiting request starts when a hot-window slot is free and the page allocator can
// reserve every cold page it may ever need (kvq::cold_pages_for(prompt + max_tokens), the capacity
// planner's count); until then it waits, first come first served. A request that could never fit
// (longer than the per-sequence maximum, or needing more pages than the pool holds) is refused at
// submission: nothing is silently truncated. Pages are handed to a sequence when they turn cold
// (kvq::cold_pages_needed before each step), out of its reservation, and come back when it ends.
//
// Threading: submit() and cancel() may be called from any thread; step() (or the thread started
// by start()) runs the scheduler, and a request's Sink is called on that thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <kvq/kvq.hpp>

namespace serve {

// One sequence's part of a step: `count` tokens at positions [pos, pos + count) of the sequence in
// hot-window slot `slot` (pos = tokens already in its cache). `pages`: its block-table row (page ids
// of its cold pages, in token order), already holding every page this step's append turns cold.
struct StepSeq {
  int slot = 0;
  int64_t pos = 0;
  const int32_t* tokens = nullptr;
  int count = 0;
  const std::vector<int32_t>* pages = nullptr;
  bool want_logits = false;  // the logits of the sequence's last token are needed
};

// The forward pass behind the engine. decode: one token per sequence; prefill: prompt chunks.
// logits: [n][vocab], one row per sequence with want_logits, decode sequences first, then prefill,
// each in the given order. Throws smollm2::Error (the step is then lost: the engine fails the
// requests of that step).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int vocab() const = 0;
  virtual void forward(const std::vector<StepSeq>& decode, const std::vector<StepSeq>& prefill,
                       std::vector<float>& logits) = 0;
  // The sequence of `slot` ended: the next one in that slot starts empty.
  virtual void release(int slot) = 0;
};

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax, the lowest id on ties)
  float top_p = 1.0f;        // nucleus: the smallest set of likeliest tokens whose mass reaches top_p
  uint64_t seed = 0;         // the request's random stream (same seed, same draws)
};

struct RequestSpec {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings: output ends before the first occurrence
  bool ignore_eos = false;
};

enum class Finish { kNone, kStop, kLength, kCancelled, kError };
const char* finish_name(Finish f);  // "stop", "length", "cancelled", "error" (OpenAI's finish_reason)

// What a request's sink receives after each step that moved it: the tokens sampled in that step,
// the text they completed (held back while it may still turn into a stop string or an incomplete
// UTF-8 character), and, once, finished with the reason and counts.
struct Event {
  std::vector<int32_t> tokens;
  std::string text;
  bool finished = false;
  Finish reason = Finish::kNone;
  std::string error;  // kError only
  int prompt_tokens = 0, completion_tokens = 0;
};
using Sink = std::function<void(const Event&)>;
using Detokenizer = std::function<std::string(const std::vector<int32_t>&)>;

struct EngineConfig {
  int max_batch = 8;           // hot-window slots: sequences running at once
  int token_budget = 8192;     // tokens per step: decode tokens + prefill chunks
  // Prompt tokens per chunk: a prompt is cut at multiples of it, whatever else runs (0:
  // token_budget - max_batch, the largest chunk that always fits beside a full decode batch).
  int prefill_chunk = 0;
  int64_t num_pages = 0;       // cold pages of the pool (every layer: one page id serves all layers)
  int page = 64, residual = 128;
  int64_t max_seq_len = 2048;  // prompt + max_tokens of one request
  int max_waiting = 1024;      // requests waiting for admission beyond which submit refuses
  std::vector<int32_t> eos;    // tokens that end a sequence (unless ignore_eos)
};

struct EngineStats {
  int64_t steps = 0, decode_tokens = 0, prefill_tokens = 0;
  int running = 0, waiting = 0;
  int64_t pages_free = 0, pages_reserved = 0;
  int max_running_seen = 0;
};

// A request's random stream: splitmix64, the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
 private:
  uint64_t s_;
};
// Samples a token from a row of logits (exposed for tests), one draw of rng per token: greedy, or
// Gumbel-max over the top-p nucleus (see engine.cpp).
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, Rng& rng);

class Engine {
 public:
  // Throws smollm2::Error for an inconsistent configuration.
  Engine(Backend& backend, const EngineConfig& config, Detokenizer detok = nullptr);
  ~Engine();

  // Queues a request; returns its id (> 0), or 0 with *why set when it is refused (prompt empty or
  // too long, max_tokens < 1, more cold pages than the pool holds, too many waiting, shutting down).
  // The sink is called from the engine's thread.
  uint64_t submit(RequestSpec spec, Sink sink, std::string* why);
  // Ends a request at the next step (its sink gets finished = true, reason kCancelled).
  void cancel(uint64_t id);
  // Every request (running or waiting) cancelled at the next step; submit refuses from now on.
  void cancel_all();
  void stop_accepting();

  // One scheduler step on the calling thread: admissions, one forward, sampling, events. false when
  // there was nothing to run.
  bool step();
  // Or: a thread that steps while there is work and sleeps otherwise; stop() joins it.
  void start();
  void stop();
  bool idle() const;
  EngineStats stats() const;
  const EngineConfig& config() const { return cfg_; }
  // The cold pages a request of `tokens` tokens (prompt + max_tokens) reserves.
  int64_t pages_for(int64_t tokens) const;

  // Trace of the last step, for tests: per sequence (request id, tokens in the step, decode?).
  struct StepEntry {
    uint64_t id;
    int count;
    bool decode;
  };
  const std::vector<StepEntry>& last_step() const { return last_step_; }

 private:
  struct Seq;
  void admit_locked();
  int next_chunk(const Seq& s) const;  // prompt tokens of s's next chunk (on the prefill_chunk grid)
  void finish(Seq& s, Finish reason, const std::string& error = "");
  void on_token(Seq& s, int32_t token, Event& ev);
  void run();

  Backend& backend_;
  EngineConfig cfg_;
  Detokenizer detok_;
  mutable std::mutex mu_;  // waiting_, cancels_, accepting_, next_id_, stats_ (the rest: engine thread only)
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // admission order
  std::vector<uint64_t> cancels_;
  bool cancel_all_ = false, accepting_ = true, stop_ = false;
  uint64_t next_id_ = 1;
  std::vector<int> free_slots_;
  std::vector<int32_t> free_pages_;
  int64_t reserved_ = 0;  // pages promised to running sequences, not yet handed out
  EngineStats stats_;
  std::vector<StepEntry> last_step_;
  std::thread thread_;
};

}  // namespace serve

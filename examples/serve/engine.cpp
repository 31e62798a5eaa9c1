// engine.cpp - the continuous-batching scheduler of engine.hpp.
#include "engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "gguf.hpp"  // smollm2::Error

namespace serve {

using smollm2::Error;

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kStop: return "stop";
    case Finish::kLength: return "length";
    case Finish::kCancelled: return "cancelled";
    case Finish::kError: return "error";
    default: return "none";
  }
}

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

namespace {

// The tokens of the top-p nucleus: the smallest set of likeliest tokens (ties by id) whose
// probability at temperature T reaches top_p. All of them when top_p >= 1.
std::vector<char> nucleus(const float* logits, int vocab, const SamplingParams& p, float top) {
  std::vector<char> keep(size_t(vocab), 1);
  if (!(p.top_p < 1.0f)) return keep;
  const double inv_t = 1.0 / double(p.temperature);
  std::vector<std::pair<double, int32_t>> probs(static_cast<size_t>(vocab));
  double total = 0.0;
  for (int i = 0; i < vocab; ++i) {
    const double e = std::exp((double(logits[i]) - double(top)) * inv_t);
    probs[size_t(i)] = {e, int32_t(i)};
    total += e;
  }
  std::sort(probs.begin(), probs.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  const double top_p = std::max(double(p.top_p), 1e-9);
  std::fill(keep.begin(), keep.end(), 0);
  double mass = 0.0;
  for (size_t k = 0; k < probs.size() && (k == 0 || mass < top_p * total); ++k) {
    mass += probs[k].first;
    keep[size_t(probs[k].second)] = 1;
  }
  return keep;
}

// Gumbel(0, 1) noise of token `id` for the draw `key`: -log(-log(u)), u in (0, 1) a hash of both.
double gumbel(uint64_t key, int32_t id) {
  Rng h(key ^ (uint64_t(uint32_t(id)) * 0xd1b54a32d192ed03ull));
  const double u = (double(h.next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  return -std::log(-std::log(u));
}

}  // namespace

// Gumbel-max: the token of the nucleus maximising logit / T + G(id), with G a hash of one draw of
// the request's stream and the token id: a draw from softmax(logits / T) over the nucleus. Why not
// one uniform against the cumulative distribution: a change of the logits in their last bits
// (another batch on a GPU) reorders near-equal probabilities, of which a flat distribution has
// many, and moves every boundary after them, so the draw often lands on another token; here the
// token changes only when the two best perturbed scores are closer than the change (README.md).
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, Rng& rng) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  if (!(p.temperature > 0.0f)) return best;
  const std::vector<char> keep = nucleus(logits, vocab, p, logits[best]);
  const uint64_t key = rng.next();
  const double inv_t = 1.0 / double(p.temperature);
  int32_t pick = best;
  double pick_score = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) {
    if (!keep[size_t(i)]) continue;
    const double score = double(logits[i]) * inv_t + gumbel(key, int32_t(i));
    if (score > pick_score) pick_score = score, pick = int32_t(i);
  }
  return pick;
}

namespace {

// Bytes at the end of `s` that start an incomplete UTF-8 character (0 when it ends complete).
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// The longest suffix of `s` (starting at or after `from`) that is a proper prefix of a stop string.
size_t stop_prefix_tail(const std::string& s, size_t from, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& st : stops)
    for (size_t n = std::min(st.size() - 1, s.size() - from); n > best; --n)
      if (s.compare(s.size() - n, n, st, 0, n) == 0) {
        best = n;
        break;
      }
  return best;
}

}  // namespace

struct Engine::Seq {
  uint64_t id = 0;
  RequestSpec spec;
  Sink sink;
  Rng rng{0};
  int slot = -1;
  int64_t len = 0, cold = 0;  // tokens in the cache, of them cold
  size_t prefilled = 0;       // prompt tokens fed
  std::vector<int32_t> pages;
  int64_t reserve = 0;  // pages still promised to it
  std::vector<int32_t> generated;
  std::string text;  // detokenized output (EOS excluded)
  size_t emitted = 0;
  bool done = false;
  Finish reason = Finish::kNone;
  std::string error;
};

Engine::Engine(Backend& backend, const EngineConfig& config, Detokenizer detok)
    : backend_(backend), cfg_(config), detok_(std::move(detok)) {
  if (cfg_.max_batch < 1 || cfg_.token_budget <= cfg_.max_batch || cfg_.page <= 0 || cfg_.residual < 0 ||
      cfg_.residual % cfg_.page != 0 || cfg_.num_pages < 0 || cfg_.max_seq_len < 2 || cfg_.max_waiting < 0)
    throw Error("engine: inconsistent configuration (max_batch >= 1, token_budget > max_batch, R a multiple of the page)");
  if (cfg_.prefill_chunk == 0) cfg_.prefill_chunk = cfg_.token_budget - cfg_.max_batch;
  // The oldest prompt's next chunk must fit beside a full decode batch, or it could wait forever.
  if (cfg_.prefill_chunk < 1 || cfg_.prefill_chunk > cfg_.token_budget - cfg_.max_batch)
    throw Error("engine: prefill_chunk must be in [1, token_budget - max_batch] (" +
                std::to_string(cfg_.token_budget - cfg_.max_batch) + ")");
  for (int s = cfg_.max_batch - 1; s >= 0; --s) free_slots_.push_back(s);
  for (int64_t p = cfg_.num_pages - 1; p >= 0; --p) free_pages_.push_back(int32_t(p));
  stats_.pages_free = cfg_.num_pages;
}

Engine::~Engine() { stop(); }

int64_t Engine::pages_for(int64_t tokens) const { return kvq::cold_after(tokens, 0, cfg_.residual, cfg_.page) / cfg_.page; }

uint64_t Engine::submit(RequestSpec spec, Sink sink, std::string* why) {
  auto refuse = [&](const std::string& w) -> uint64_t {
    if (why) *why = w;
    return 0;
  };
  const int64_t total = int64_t(spec.prompt.size()) + spec.max_tokens;
  if (spec.prompt.empty()) return refuse("the prompt is empty");
  if (spec.max_tokens < 1) return refuse("max_tokens must be at least 1");
  for (int32_t t : spec.prompt)
    if (t < 0 || t >= backend_.vocab()) return refuse("token id " + std::to_string(t) + " out of range");
  if (total > cfg_.max_seq_len)
    return refuse("prompt (" + std::to_string(spec.prompt.size()) + " tokens) + max_tokens (" + std::to_string(spec.max_tokens) +
                  ") = " + std::to_string(total) + " tokens, more than the maximum sequence length " +
                  std::to_string(cfg_.max_seq_len));
  if (pages_for(total) > cfg_.num_pages)
    return refuse("the request needs " + std::to_string(pages_for(total)) + " cold pages, the pool holds " +
                  std::to_string(cfg_.num_pages));
  if (!spec.stop.empty() && !detok_) return refuse("stop strings need a tokenizer");
  for (const std::string& st : spec.stop)
    if (st.empty()) return refuse("a stop string is empty");
  auto s = std::make_unique<Seq>();
  s->spec = std::move(spec);
  s->sink = std::move(sink);
  s->rng = Rng(s->spec.sampling.seed);
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return refuse("the server is shutting down");
  if (int(waiting_.size()) >= cfg_.max_waiting) return refuse("too many requests waiting");
  s->id = next_id_++;
  const uint64_t id = s->id;
  waiting_.push_back(std::move(s));
  stats_.waiting = int(waiting_.size());
  cv_.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  cv_.notify_all();
}

void Engine::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
  cancel_all_ = true;
  cv_.notify_all();
}

void Engine::stop_accepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

void Engine::admit_locked() {
  while (!waiting_.empty() && !free_slots_.empty()) {
    Seq& s = *waiting_.front();
    const int64_t need = pages_for(int64_t(s.spec.prompt.size()) + s.spec.max_tokens);
    if (int64_t(free_pages_.size()) - reserved_ < need) break;  // first come first served: the head waits
    s.slot = free_slots_.back();
    free_slots_.pop_back();
    s.reserve = need;
    reserved_ += need;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

int Engine::next_chunk(const Seq& s) const {
  // Prompts are fed whole chunks from the start, so `prefilled` is on the grid.
  return int(std::min<size_t>(size_t(cfg_.prefill_chunk), s.spec.prompt.size() - s.prefilled));
}

void Engine::finish(Seq& s, Finish reason, const std::string& error) {
  s.done = true;
  s.reason = reason;
  s.error = error;
}

void Engine::on_token(Seq& s, int32_t token, Event& ev) {
  s.generated.push_back(token);
  ev.tokens.push_back(token);
  const bool eos = !s.spec.ignore_eos && std::find(cfg_.eos.begin(), cfg_.eos.end(), token) != cfg_.eos.end();
  if (!eos && detok_) s.text += detok_({token});
  if (!eos && !s.spec.stop.empty()) {
    size_t at = std::string::npos;
    for (const std::string& st : s.spec.stop) at = std::min(at, s.text.find(st, s.emitted));
    if (at != std::string::npos) {
      ev.text += s.text.substr(s.emitted, at - s.emitted);
      s.text.resize(at);
      s.emitted = at;
      finish(s, Finish::kStop);
      return;
    }
  }
  const bool last = eos || int(s.generated.size()) >= s.spec.max_tokens;
  const size_t hold = last ? 0
                           : std::max(incomplete_utf8_tail(s.text), stop_prefix_tail(s.text, s.emitted, s.spec.stop));
  const size_t upto = std::max(s.emitted, s.text.size() - std::min(hold, s.text.size()));
  ev.text += s.text.substr(s.emitted, upto - s.emitted);
  s.emitted = upto;
  if (eos) finish(s, Finish::kStop);
  else if (last) finish(s, Finish::kLength);
}

bool Engine::step() {
  std::vector<std::pair<Seq*, Event>> events;
  std::vector<std::unique_ptr<Seq>> dropped;  // cancelled while waiting
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto cancelled = [&](uint64_t id) {
      return cancel_all_ || std::find(cancels_.begin(), cancels_.end(), id) != cancels_.end();
    };
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (cancelled((*it)->id)) {
        dropped.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& s : running_)
      if (cancelled(s->id)) finish(*s, Finish::kCancelled);
    cancels_.clear();
    cancel_all_ = false;
    admit_locked();
  }
  for (auto& s : dropped) finish(*s, Finish::kCancelled);

  // The step: every decoding sequence's pending token, then the next prompt chunk of each sequence
  // still reading its prompt, in admission order, where it fits in what is left of the budget.
  std::vector<StepSeq> decode, prefill;
  std::vector<Seq*> dseq, pseq;
  int budget = cfg_.token_budget;
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.done || s.prefilled < s.spec.prompt.size()) continue;
    decode.push_back(StepSeq{s.slot, s.len, &s.generated.back(), 1, &s.pages, true});
    dseq.push_back(&s);
    --budget;
  }
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.done || s.prefilled >= s.spec.prompt.size()) continue;
    const int n = next_chunk(s);
    if (n > budget) continue;  // waits: a smaller piece would cut the prompt elsewhere than alone
    budget -= n;
    const bool completes = s.prefilled + size_t(n) == s.spec.prompt.size();
    prefill.push_back(StepSeq{s.slot, s.len, s.spec.prompt.data() + s.prefilled, n, &s.pages, completes});
    pseq.push_back(&s);
  }
  last_step_.clear();
  for (size_t i = 0; i < dseq.size(); ++i) last_step_.push_back(StepEntry{dseq[i]->id, 1, true});
  for (size_t i = 0; i < pseq.size(); ++i) last_step_.push_back(StepEntry{pseq[i]->id, prefill[i].count, false});

  if (!decode.empty() || !prefill.empty()) {
    // Pages for what this step turns cold, out of each sequence's reservation.
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto grant = [&](Seq& s, int count) {
        const int64_t need = kvq::cold_pages_needed(s.len, s.cold, count, cfg_.residual, cfg_.page);
        for (int64_t i = 0; i < need; ++i) {
          s.pages.push_back(free_pages_.back());
          free_pages_.pop_back();
        }
        s.reserve -= need;
        reserved_ -= need;
      };
      for (size_t i = 0; i < dseq.size(); ++i) grant(*dseq[i], 1);
      for (size_t i = 0; i < pseq.size(); ++i) grant(*pseq[i], prefill[i].count);
    }
    std::vector<float> logits;
    std::string failure;
    try {
      backend_.forward(decode, prefill, logits);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    const int vocab = backend_.vocab();
    size_t row = 0;
    auto advance = [&](Seq& s, const StepSeq& st) {
      s.len += st.count;
      s.cold = kvq::cold_after(s.len, s.cold, cfg_.residual, cfg_.page);
      if (!failure.empty()) {
        finish(s, Finish::kError, failure);
        events.push_back({&s, Event{}});
        return;
      }
      if (!st.want_logits) return;
      Event ev;
      on_token(s, sample_token(logits.data() + row * size_t(vocab), vocab, s.spec.sampling, s.rng), ev);
      ++row;
      events.push_back({&s, std::move(ev)});
    };
    for (size_t i = 0; i < dseq.size(); ++i) advance(*dseq[i], decode[i]);
    for (size_t i = 0; i < pseq.size(); ++i) {
      pseq[i]->prefilled += size_t(prefill[i].count);
      advance(*pseq[i], prefill[i]);
    }
  }
  // Sequences that ended this step (cancelled ones included): events, then slot and pages back.
  for (auto& sp : running_)
    if (sp->done && std::none_of(events.begin(), events.end(), [&](const auto& e) { return e.first == sp.get(); }))
      events.push_back({sp.get(), Event{}});
  for (auto& s : dropped) events.push_back({s.get(), Event{}});
  for (auto& [s, ev] : events) {
    ev.prompt_tokens = int(s->spec.prompt.size());
    ev.completion_tokens = int(s->generated.size());
    if (s->done) {
      ev.finished = true;
      ev.reason = s->reason;
      ev.error = s->error;
      if (s->reason == Finish::kCancelled || s->reason == Finish::kError) {
        ev.text += s->text.substr(s->emitted);  // what was held back
        s->emitted = s->text.size();
      }
    }
    if (s->sink) {
      try {
        s->sink(ev);
      } catch (...) {
        // a sink's failure (a closed connection) does not stop the engine
      }
    }
  }
  const bool worked = !decode.empty() || !prefill.empty();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& sp : running_) {
      if (!sp->done) continue;
      backend_.release(sp->slot);
      free_slots_.push_back(sp->slot);
      for (int32_t p : sp->pages) free_pages_.push_back(p);
      reserved_ -= sp->reserve;
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& s) { return s->done; }), running_.end());
    if (worked) {
      ++stats_.steps;
      stats_.decode_tokens += int64_t(decode.size());
      for (const StepSeq& p : prefill) stats_.prefill_tokens += p.count;
    }
    stats_.running = int(running_.size());
    stats_.waiting = int(waiting_.size());
    stats_.max_running_seen = std::max(stats_.max_running_seen, int(decode.size() + prefill.size()));
    stats_.pages_free = int64_t(free_pages_.size());
    stats_.pages_reserved = reserved_;
  }
  return worked || !events.empty();
}

void Engine::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || stats_.running > 0 || !cancels_.empty() || cancel_all_; });
      if (stop_) return;
    }
    step();
  }
}

void Engine::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.empty() && stats_.running == 0;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace serve

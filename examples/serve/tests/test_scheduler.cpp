// The scheduler of examples/serve on a scripted backend: its "model" answers with logits that are a
// hash of everything the slot's cache holds and of where it was cut into steps (as with kvq's
// chunked prefill, where a chunk's queries share one cold boundary), and it checks every step
// against what the engine promised (positions, the token budget, page ids owned by one sequence
// each, the block-table row holding every page the append turns cold).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine.hpp"

namespace {

using serve::Engine;
using serve::EngineConfig;
using serve::Event;
using serve::Finish;
using serve::RequestSpec;
using serve::StepSeq;

constexpr int kVocab = 64;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

class ScriptedBackend final : public serve::Backend {
 public:
  explicit ScriptedBackend(const EngineConfig& c)
      : cfg_(c), history_(size_t(c.max_batch)), cuts_(size_t(c.max_batch)), cold_(size_t(c.max_batch), 0) {}
  int vocab() const override { return kVocab; }

  void forward(const std::vector<StepSeq>& decode, const std::vector<StepSeq>& prefill, std::vector<float>& logits) override {
    ++calls;
    int tokens = 0;
    std::set<int> slots;
    logits.clear();
    for (const StepSeq& s : decode) REQUIRE(s.count == 1);
    for (const auto* list : {&decode, &prefill})
      for (const StepSeq& s : *list) {
        REQUIRE(s.slot >= 0);
        REQUIRE(s.slot < cfg_.max_batch);
        REQUIRE(slots.insert(s.slot).second);  // distinct slots in a step
        auto& h = history_[size_t(s.slot)];
        REQUIRE(int64_t(h.size()) == s.pos);
        h.insert(h.end(), s.tokens, s.tokens + s.count);
        cuts_[size_t(s.slot)].push_back(int64_t(h.size()));
        tokens += s.count;
        cold_[size_t(s.slot)] = kvq::cold_after(int64_t(h.size()), cold_[size_t(s.slot)], cfg_.residual, cfg_.page);
        REQUIRE(int64_t(s.pages->size()) == cold_[size_t(s.slot)] / cfg_.page);  // exactly the cold pages
        pages_[s.slot] = *s.pages;
      }
    // Page ids: in range and each owned by one live sequence.
    std::set<int32_t> seen;
    for (const auto& [slot, ids] : pages_)
      for (int32_t p : ids) {
        REQUIRE(p >= 0);
        REQUIRE(p < cfg_.num_pages);
        REQUIRE(seen.insert(p).second);
      }
    REQUIRE(tokens <= cfg_.token_budget);
    max_tokens = std::max(max_tokens, tokens);
    for (const auto* list : {&decode, &prefill})
      for (const StepSeq& s : *list) {
        if (!s.want_logits) continue;
        uint64_t h = 1;
        for (int32_t t : history_[size_t(s.slot)]) h = mix(h, uint64_t(t));
        for (int64_t cut : cuts_[size_t(s.slot)]) h = mix(h, uint64_t(cut));
        for (int v = 0; v < kVocab; ++v) logits.push_back(float(mix(h, uint64_t(v)) % 1000) / 100.0f);
      }
  }
  void release(int slot) override {
    history_[size_t(slot)].clear();
    cuts_[size_t(slot)].clear();
    cold_[size_t(slot)] = 0;
    pages_.erase(slot);
  }

  int calls = 0, max_tokens = 0;

 private:
  EngineConfig cfg_;
  std::vector<std::vector<int32_t>> history_;
  std::vector<std::vector<int64_t>> cuts_;  // per slot: its length after each step
  std::vector<int64_t> cold_;
  std::map<int, std::vector<int32_t>> pages_;
};

struct Result {
  std::vector<int32_t> tokens;
  std::string text, streamed;
  Finish reason = Finish::kNone;
  int events = 0, completion = 0;
};

RequestSpec request(int prompt_len, int max_tokens, int32_t salt, float temperature = 0.0f, uint64_t seed = 0) {
  RequestSpec r;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(int32_t((i * 7 + salt) % kVocab));
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = seed;
  return r;
}

EngineConfig small_config() {
  EngineConfig c;
  c.max_batch = 4;
  c.token_budget = 16;
  c.page = 16;
  c.residual = 16;
  c.num_pages = 64;
  c.max_seq_len = 512;
  return c;
}

// Submits, steps until idle, returns the results in submission order.
struct Harness {
  explicit Harness(const EngineConfig& c, serve::Detokenizer d = nullptr) : cfg(c), backend(c), engine(backend, c, std::move(d)) {}
  uint64_t submit(RequestSpec r) {
    const size_t i = results.size();
    results.emplace_back();
    std::string why;
    const uint64_t id = engine.submit(std::move(r), [this, i](const Event& ev) {
      Result& res = results[i];
      ++res.events;
      res.tokens.insert(res.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      res.streamed += ev.text;
      res.completion = ev.completion_tokens;
      if (ev.finished) res.reason = ev.reason;
    }, &why);
    REQUIRE_MESSAGE(id != 0, why);
    ids.push_back(id);
    return id;
  }
  int run(int max_steps = 100000) {
    int n = 0;
    while (engine.step() && n < max_steps) ++n;
    return n;
  }
  EngineConfig cfg;
  ScriptedBackend backend;
  Engine engine;
  std::deque<Result> results;
  std::vector<uint64_t> ids;
};

std::vector<int32_t> alone(const EngineConfig& c, const RequestSpec& r) {
  Harness h(c);
  h.submit(r);
  h.run();
  return h.results[0].tokens;
}

}  // namespace

TEST_CASE("chunked prefill: prompts cut on the chunk grid under the token budget, outputs equal each request alone") {
  EngineConfig c = small_config();
  c.prefill_chunk = 8;
  const std::vector<RequestSpec> reqs = {request(40, 6, 1), request(10, 9, 2), request(5, 3, 3), request(23, 12, 4)};
  Harness h(c);
  for (const auto& r : reqs) h.submit(r);
  // Every prompt piece is the request's next chunk of the grid: min(8, what is left of its prompt).
  std::map<uint64_t, size_t> fed;
  auto step = [&] {
    const bool worked = h.engine.step();
    for (const auto& e : h.engine.last_step()) {
      if (e.decode) continue;
      const size_t i = size_t(std::find(h.ids.begin(), h.ids.end(), e.id) - h.ids.begin());
      CHECK(size_t(e.count) == std::min<size_t>(8, reqs[i].prompt.size() - fed[e.id]));
      fed[e.id] += size_t(e.count);
    }
    return worked;
  };
  REQUIRE(step());
  // First step: no decode yet; a chunk of the first prompt and one of the second fill the budget.
  REQUIRE(h.engine.last_step().size() == 2);
  CHECK(h.engine.last_step()[0].count == 8);
  CHECK(h.engine.last_step()[1].count == 8);
  REQUIRE(step());
  // The second prompt's last 2 tokens and the third prompt whole; the fourth prompt's first chunk
  // (8) does not fit in the 1 token left and waits, rather than be cut elsewhere than alone.
  REQUIRE(h.engine.last_step().size() == 3);
  CHECK(h.engine.last_step()[1].count == 2);
  CHECK(h.engine.last_step()[2].count == 5);
  REQUIRE(step());
  // The second and third sequences decode (first in the step), the first prompt gets its third
  // chunk, and the fourth still waits (6 left).
  REQUIRE(h.engine.last_step().size() == 3);
  CHECK(h.engine.last_step()[0].decode);
  CHECK(h.engine.last_step()[1].decode);
  CHECK(h.engine.last_step()[2].count == 8);
  while (step()) {
  }
  CHECK(h.backend.max_tokens == 16);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(h.results[i].reason == Finish::kLength);
    CHECK(int(h.results[i].tokens.size()) == reqs[i].max_tokens);
    CHECK(h.results[i].completion == reqs[i].max_tokens);
    CHECK(h.results[i].tokens == alone(c, reqs[i]));
  }
  const serve::EngineStats st = h.engine.stats();
  CHECK(st.pages_free == c.num_pages);
  CHECK(st.pages_reserved == 0);
  CHECK(st.prefill_tokens == 78);
  // A chunk must fit beside a full decode batch (16 - 4 here), or the oldest prompt could wait forever.
  EngineConfig wide = small_config();
  wide.prefill_chunk = 13;
  ScriptedBackend b(wide);
  CHECK_THROWS_WITH(Engine(b, wide), doctest::Contains("prefill_chunk"));
}

TEST_CASE("a request waits while the pages are short and is admitted when they come back") {
  EngineConfig c = small_config();
  Harness probe(c);
  const int64_t need_a = probe.engine.pages_for(60 + 20), need_b = probe.engine.pages_for(50 + 10);
  REQUIRE(need_a >= 3);
  REQUIRE(need_b >= 2);
  c.num_pages = need_a + need_b - 1;  // both cannot run at once
  Harness h(c);
  const uint64_t a = h.submit(request(60, 20, 5));
  const uint64_t b = h.submit(request(50, 10, 6));
  bool b_ran_with_a = false, a_done_before_b = false;
  int steps = 0;
  while (h.engine.step()) {
    ++steps;
    bool has_a = false, has_b = false;
    for (const auto& e : h.engine.last_step()) {
      has_a |= e.id == a;
      has_b |= e.id == b;
    }
    b_ran_with_a |= has_a && has_b;
    if (has_b && h.results[0].reason != Finish::kNone) a_done_before_b = true;
    if (!has_b && h.results[0].reason == Finish::kNone) CHECK(h.engine.stats().waiting == 1);
  }
  CHECK_FALSE(b_ran_with_a);
  CHECK(a_done_before_b);
  CHECK(h.results[0].tokens.size() == 20);
  CHECK(h.results[1].tokens.size() == 10);
  CHECK(h.results[1].tokens == alone(small_config(), request(50, 10, 6)));
  // A request that could never fit is refused at once, with the reason.
  std::string why;
  CHECK(h.engine.submit(request(400, 100, 1), nullptr, &why) == 0);
  CHECK(why.find("cold pages") != std::string::npos);
  CHECK(h.engine.submit(request(500, 100, 1), nullptr, &why) == 0);
  CHECK(why.find("maximum sequence length") != std::string::npos);
  CHECK(h.engine.submit(RequestSpec{}, nullptr, &why) == 0);
  CHECK(why.find("empty") != std::string::npos);
}

TEST_CASE("hot-window slots bound the running sequences and a later request takes a freed slot") {
  EngineConfig c = small_config();
  c.max_batch = 2;
  c.token_budget = 64;
  Harness h(c);
  h.submit(request(8, 4, 1));
  h.submit(request(8, 12, 2));
  const uint64_t third = h.submit(request(8, 5, 3));
  int max_running = 0;
  bool third_seen_early = false;
  while (h.engine.step()) {
    max_running = std::max(max_running, int(h.engine.last_step().size()));
    for (const auto& e : h.engine.last_step())
      if (e.id == third && h.results[0].reason == Finish::kNone && h.results[1].reason == Finish::kNone) third_seen_early = true;
  }
  CHECK(max_running == 2);
  CHECK_FALSE(third_seen_early);
  CHECK(h.results[2].tokens == alone(c, request(8, 5, 3)));
}

TEST_CASE("a request leaving mid-batch frees its slot and pages and the others are unaffected") {
  EngineConfig c = small_config();
  Harness h(c);
  const std::vector<RequestSpec> reqs = {request(30, 40, 1), request(20, 40, 2), request(12, 40, 3)};
  for (const auto& r : reqs) h.submit(r);
  for (int i = 0; i < 12; ++i) REQUIRE(h.engine.step());
  const size_t before = h.results[1].tokens.size();
  CHECK(before > 0);
  h.engine.cancel(h.ids[1]);
  h.run();
  CHECK(h.results[1].reason == Finish::kCancelled);
  CHECK(h.results[1].tokens.size() < 40);
  CHECK(h.results[0].tokens == alone(c, reqs[0]));
  CHECK(h.results[2].tokens == alone(c, reqs[2]));
  CHECK(h.engine.stats().pages_free == c.num_pages);
  // Cancel a waiting request, and everything on shutdown.
  Harness w(c);
  w.submit(request(10, 5, 1));
  w.engine.cancel(w.ids[0]);
  w.run();
  CHECK(w.results[0].reason == Finish::kCancelled);
  CHECK(w.results[0].tokens.empty());
  w.submit(request(10, 50, 1));
  w.submit(request(10, 50, 2));
  for (int i = 0; i < 3; ++i) w.engine.step();
  w.engine.cancel_all();
  w.run();
  CHECK(w.results[1].reason == Finish::kCancelled);
  CHECK(w.results[2].reason == Finish::kCancelled);
  std::string why;
  CHECK(w.engine.submit(request(10, 5, 1), nullptr, &why) == 0);
  CHECK(why.find("shutting down") != std::string::npos);
}

TEST_CASE("fixed-seed sampling gives the same tokens alone and batched and differs between seeds") {
  const EngineConfig c = small_config();
  std::vector<RequestSpec> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(request(9 + 5 * i, 15, 1, 0.9f, 1234 + uint64_t(i)));
  Harness h(c);
  for (const auto& r : reqs) h.submit(r);
  h.run();
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(h.results[i].tokens == alone(c, reqs[i]));
  // The same prompt with different seeds: the draws differ (a fixed outcome for these seeds), and
  // the greedy output differs from the sampled one.
  std::set<std::vector<int32_t>> outs;
  for (uint64_t seed = 1; seed <= 4; ++seed) outs.insert(alone(c, request(9, 15, 1, 0.9f, seed)));
  CHECK(outs.size() > 1);
}

TEST_CASE("stop conditions: EOS, max_tokens, stop strings (held back while they may still match)") {
  EngineConfig c = small_config();
  // Token t reads as the letter 'a' + t % 26.
  auto detok = [](const std::vector<int32_t>& t) {
    std::string s;
    for (int32_t x : t) s += char('a' + x % 26);
    return s;
  };
  const RequestSpec base = request(11, 30, 7);
  const std::vector<int32_t> free_run = alone(c, base);
  REQUIRE(free_run.size() == 30);
  std::string full;
  for (int32_t t : free_run) full += char('a' + t % 26);
  {
    // EOS: the 6th token of the free run ends the sequence (counted, not in the text).
    c.eos = {free_run[5]};
    const size_t first = size_t(std::find(free_run.begin(), free_run.end(), free_run[5]) - free_run.begin());
    Harness h(c, detok);
    h.submit(base);
    h.run();
    CHECK(h.results[0].reason == Finish::kStop);
    CHECK(h.results[0].tokens.size() == first + 1);
    CHECK(h.results[0].streamed == full.substr(0, first));
    c.eos.clear();
  }
  {
    // A stop string of three letters from the middle of the output.
    const std::string stop = full.substr(12, 3);
    const size_t at = full.find(stop);
    Harness h(c, detok);
    RequestSpec r = base;
    r.stop = {"zzzzzzzzzz", stop};
    h.submit(r);
    h.run();
    CHECK(h.results[0].reason == Finish::kStop);
    CHECK(h.results[0].streamed == full.substr(0, at));
    CHECK(h.results[0].tokens.size() == at + 3);
  }
  {
    Harness h(c, detok);
    RequestSpec r = base;
    r.max_tokens = 7;
    h.submit(r);
    h.run();
    CHECK(h.results[0].reason == Finish::kLength);
    CHECK(h.results[0].streamed == full.substr(0, 7));
  }
  {
    // ignore_eos keeps going.
    c.eos = {free_run[0]};
    Harness h(c, detok);
    RequestSpec r = base;
    r.ignore_eos = true;
    h.submit(r);
    h.run();
    CHECK(h.results[0].tokens == free_run);
  }
}

TEST_CASE("sample_token: greedy, top-p and temperature") {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, 3.0f, -2.0f};
  serve::Rng rng(7);
  serve::SamplingParams greedy;
  CHECK(serve::sample_token(logits.data(), 5, greedy, rng) == 1);  // lowest id among ties
  serve::SamplingParams narrow{1.0f, 0.3f, 0};
  for (int i = 0; i < 50; ++i) {
    const int32_t t = serve::sample_token(logits.data(), 5, narrow, rng);
    CHECK((t == 1));  // top_p 0.3: only the likeliest token (ties broken by id)
  }
  serve::SamplingParams wide{1.0f, 1.0f, 0};
  std::map<int32_t, int> counts;
  for (int i = 0; i < 4000; ++i) ++counts[serve::sample_token(logits.data(), 5, wide, rng)];
  CHECK(counts[1] > 1400);
  CHECK(counts[3] > 1400);
  CHECK(counts[2] > 200);
  CHECK(counts[4] < 30);
  serve::Rng a(99), b(99);
  for (int i = 0; i < 10; ++i) CHECK(a.uniform() == b.uniform());
}

TEST_CASE("sample_token: logits that differ in their last bits give the same draws") {
  // A flat distribution (many near-equal probabilities, as after a prompt of random tokens) and the
  // same logits moved by up to 1e-4 (a GPU's sums in another order): each seed draws the same token.
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> flat(0.0f, 2.0f), nudge(-1e-4f, 1e-4f);
  std::vector<float> a(4096), b(4096);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = flat(gen);
    b[i] = a[i] + nudge(gen);
  }
  int changed = 0;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const serve::SamplingParams p{0.8f, 1.0f, seed};
    serve::Rng ra(seed), rb(seed);
    changed += serve::sample_token(a.data(), 4096, p, ra) != serve::sample_token(b.data(), 4096, p, rb);
  }
  CHECK(changed <= 2);  // about 0.1 expected: the two best perturbed scores within 2.5e-4
}

#include "backend.hpp"

TEST_CASE("capacity plan: the formats' pages, tokens per sequence against bf16, the longest request") {
  smollm2::LlamaConfig m;  // SmolLM2-135M's cache shape
  m.n_layer = 30;
  m.n_kv_head = 3;
  m.head_dim = 64;
  m.context = 8192;
  const uint64_t budget = 256ull << 20;
  const serve::CapacityPlan none = serve::plan_capacity(m, serve::choose_format("none"), budget, 8, 100000);
  const serve::CapacityPlan int2 = serve::plan_capacity(m, serve::choose_format("int2"), budget, 8, 100000);
  const kvq::ModelShape shape{30, 3, 64};
  // The pool is what is left after the hot windows, in whole pages of each format.
  const uint64_t hot2 = 8 * kvq::hot_bytes_per_sequence(shape, kvq::recommended_int2());
  CHECK(int2.num_pages == int64_t((budget - hot2) / kvq::page_bytes(shape, kvq::recommended_int2())));
  CHECK(int2.tokens_per_seq == kvq::tokens_that_fit(budget, 8, shape, kvq::recommended_int2()));
  // bf16 comparison: the same budget as a dense cache, the same for every format.
  CHECK(none.bf16_tokens_per_seq == int2.bf16_tokens_per_seq);
  CHECK(none.bf16_tokens_per_seq == int64_t(double(budget) / 8 / kvq::bytes_per_token_dense(shape)));
  // INT2 holds about 5x the tokens of "none" (3 bits against 16 an element, hot windows aside).
  CHECK(int2.num_pages > 5 * none.num_pages);
  CHECK(int2.tokens_per_seq > 4 * none.tokens_per_seq);
  // A request may use the whole pool, up to the maximum asked for, beyond the model's trained
  // context (8,192) too: RoPE extrapolates.
  CHECK(none.max_seq_len == std::min<int64_t>(100000, none.num_pages * 64 + 128 + 63));
  CHECK(int2.max_seq_len == std::min<int64_t>(100000, int2.num_pages * 64 + 128 + 63));
  CHECK(int2.max_seq_len > 8192);
  CHECK(serve::plan_capacity(m, serve::choose_format("int2"), budget, 8, 36864).max_seq_len == 36864);
  CHECK(serve::plan_capacity(m, serve::choose_format("int2"), budget, 8, 8192).max_seq_len == 8192);
  CHECK(none.summary.find("bf16 would allow") != std::string::npos);
  // Not even the hot windows fit: refused with the reason.
  CHECK_THROWS_WITH_AS(serve::plan_capacity(m, serve::choose_format("int2"), 1 << 20, 8, 2048),
                       doctest::Contains("hot windows"), smollm2::Error);
  CHECK_THROWS_WITH_AS(serve::choose_format("int3"), doctest::Contains("unknown KV format"), smollm2::Error);
}

// openai.cpp - request parsing, chat template and response JSON of openai.hpp.
#include "openai.hpp"

#include <algorithm>
#include <random>

namespace serve {

namespace {

constexpr const char* kSmolSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

[[noreturn]] void bad(const std::string& message, const std::string& param = "", int status = 400,
                      const std::string& code = "") {
  ApiError e;
  e.status = status;
  e.message = message;
  e.param = param;
  e.code = code;
  throw e;
}

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

int64_t get_int(const json& j, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) bad(std::string("'") + key + "' must be an integer, got " + type_name(*it), key);
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi)
    bad(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v), key);
  return v;
}

double get_number(const json& j, const char* key, double fallback, double lo, double hi) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad(std::string("'") + key + "' must be a number, got " + type_name(*it), key);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) bad(std::string("'") + key + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]", key);
  return v;
}

bool get_bool(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad(std::string("'") + key + "' must be a boolean, got " + type_name(*it), key);
  return it->get<bool>();
}

std::string message_text(const json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad("'" + param + "' must be a string or an array of text parts, got " + type_name(content), param);
  std::string out;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      bad("'" + param + "': only parts {\"type\": \"text\", \"text\": \"...\"} are supported", param);
    out += part["text"].get<std::string>();
  }
  return out;
}

}  // namespace

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ChatTemplate::ChatTemplate(const smollm2::GgufFile& f) : system_(kSmolSystem) {
  if (!f.has("tokenizer.chat_template")) return;  // ChatML with SmolLM2's default system message
  const std::string t = f.get_string("tokenizer.chat_template");
  if (t.find("<|im_start|>") == std::string::npos || t.find("<|im_end|>") == std::string::npos ||
      t.find("message['role']") == std::string::npos || t.find("message['content']") == std::string::npos) {
    ok_ = false;
    why_ = "the model's chat template (tokenizer.chat_template) is not the ChatML form this server implements";
    return;
  }
  // The default system message, when the template inserts one: '<|im_start|>system\n...<|im_end|>'.
  system_.clear();
  const std::string open = "<|im_start|>system";
  const size_t at = t.find(open);
  if (at == std::string::npos || t.find("messages[0]['role'] != 'system'") == std::string::npos) return;
  size_t from = at + open.size();
  if (t.compare(from, 1, "\n") == 0) from += 1;
  else if (t.compare(from, 2, "\\n") == 0) from += 2;
  const size_t end = t.find("<|im_end|>", from);
  if (end != std::string::npos) system_ = t.substr(from, end - from);
}

std::string ChatTemplate::render(const std::vector<Message>& messages) const {
  std::string out;
  if (!system_.empty() && (messages.empty() || messages[0].role != "system"))
    out += "<|im_start|>system\n" + system_ + "<|im_end|>\n";
  for (const Message& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  return out + "<|im_start|>assistant\n";
}

ApiRequest parse_request(const std::string& body, Endpoint endpoint, const ParseContext& ctx) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    bad(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(std::string("the request body must be a JSON object, got ") + type_name(j));
  ApiRequest r;
  r.endpoint = endpoint;
  r.model = ctx.model_name;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) bad(std::string("'model' must be a string, got ") + type_name(j["model"]), "model");
    r.model = j["model"].get<std::string>();
    if (r.model != ctx.model_name)
      bad("the model '" + r.model + "' does not exist (this server runs '" + ctx.model_name + "')", "model", 404, "model_not_found");
  }
  if (get_int(j, "n", 1, 1, 1) != 1) bad("only n = 1 is supported", "n");
  if (j.contains("best_of") && get_int(j, "best_of", 1, 1, 1) != 1) bad("only best_of = 1 is supported", "best_of");
  if (j.contains("logprobs") && !j["logprobs"].is_null() && !(j["logprobs"].is_boolean() && !j["logprobs"].get<bool>()))
    bad("logprobs are not supported", "logprobs");

  // The prompt.
  const smollm2::Tokenizer& tok = *ctx.tokenizer;
  std::vector<int32_t> prompt;
  if (endpoint == Endpoint::kCompletions) {
    if (!j.contains("prompt")) bad("'prompt' is required", "prompt");
    const json& p = j["prompt"];
    if (p.is_string()) {
      prompt = tok.encode(p.get<std::string>(), true);
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      prompt = tok.encode(p[0].get<std::string>(), true);
    } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& v) { return v.is_number_integer(); })) {
      for (const json& v : p) {
        const int64_t id = v.get<int64_t>();
        if (id < 0 || id >= ctx.vocab) bad("'prompt' holds token id " + std::to_string(id) + ", outside [0, " + std::to_string(ctx.vocab) + ")", "prompt");
        prompt.push_back(int32_t(id));
      }
    } else {
      bad(std::string("'prompt' must be a string, an array of one string or an array of token ids, got ") + type_name(p), "prompt");
    }
  } else {
    if (!ctx.chat || !ctx.chat->supported()) bad(ctx.chat ? ctx.chat->why() : "no chat template", "", 400);
    if (!j.contains("messages")) bad("'messages' is required", "messages");
    const json& m = j["messages"];
    if (!m.is_array() || m.empty()) bad("'messages' must be a non-empty array of {role, content}", "messages");
    std::vector<ChatTemplate::Message> msgs;
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!m[i].is_object()) bad("'" + at + "' must be an object, got " + type_name(m[i]), at);
      if (!m[i].contains("role") || !m[i]["role"].is_string()) bad("'" + at + ".role' must be a string", at + ".role");
      const std::string role = m[i]["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant")
        bad("'" + at + ".role' must be system, user or assistant, got '" + role + "'", at + ".role");
      if (!m[i].contains("content")) bad("'" + at + ".content' is required", at + ".content");
      msgs.push_back({role, message_text(m[i]["content"], i)});
    }
    prompt = tok.encode(ctx.chat->render(msgs), true);
  }
  if (prompt.empty()) bad("the prompt is empty", endpoint == Endpoint::kChat ? "messages" : "prompt");
  const int64_t room = ctx.max_seq_len - int64_t(prompt.size());
  if (room < 1)
    bad("the prompt has " + std::to_string(prompt.size()) + " tokens; this server's maximum for prompt + completion is " +
            std::to_string(ctx.max_seq_len) + " tokens",
        endpoint == Endpoint::kChat ? "messages" : "prompt", 400, "context_length_exceeded");

  const char* max_key = endpoint == Endpoint::kChat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t fallback = endpoint == Endpoint::kChat ? std::min<int64_t>(room, ctx.default_max_tokens)
                                                       : std::min<int64_t>(room, 16);
  const int64_t max_tokens = get_int(j, max_key, fallback, 1, INT32_MAX);
  if (max_tokens > room)
    bad("the prompt (" + std::to_string(prompt.size()) + " tokens) plus " + max_key + " (" + std::to_string(max_tokens) +
            ") is more than this server's maximum of " + std::to_string(ctx.max_seq_len) + " tokens",
        max_key, 400, "context_length_exceeded");
  r.spec.prompt = std::move(prompt);
  r.spec.max_tokens = int(max_tokens);
  r.spec.sampling.temperature = float(get_number(j, "temperature", 1.0, 0.0, 2.0));
  r.spec.sampling.top_p = float(get_number(j, "top_p", 1.0, 0.0, 1.0));
  if (!(r.spec.sampling.top_p > 0.0f)) bad("'top_p' must be above 0", "top_p");
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) bad(std::string("'seed' must be an integer, got ") + type_name(j["seed"]), "seed");
    r.spec.sampling.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : uint64_t(j["seed"].get<int64_t>());
  } else {
    std::random_device rd;
    r.spec.sampling.seed = (uint64_t(rd()) << 32) ^ rd();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r.spec.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4 && std::all_of(s.begin(), s.end(), [](const json& v) { return v.is_string(); })) {
      for (const json& v : s) r.spec.stop.push_back(v.get<std::string>());
    } else {
      bad("'stop' must be a string or an array of up to 4 strings", "stop");
    }
    for (const std::string& st : r.spec.stop)
      if (st.empty()) bad("'stop' strings must not be empty", "stop");
  }
  r.spec.ignore_eos = get_bool(j, "ignore_eos", false);
  r.stream = get_bool(j, "stream", false);
  r.return_token_ids = get_bool(j, "return_token_ids", false);
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object()) bad("'stream_options' must be an object", "stream_options");
    r.include_usage = get_bool(j["stream_options"], "include_usage", false);
  }
  return r;
}

namespace {

json finish_json(Finish f) { return f == Finish::kNone ? json(nullptr) : json(finish_name(f)); }

json usage_json(int prompt_tokens, int completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

json response_body(const ApiRequest& r, const std::string& id, int64_t created, const Completed& c) {
  json choice = {{"index", 0}, {"finish_reason", finish_json(c.reason)}};
  if (r.endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    choice["logprobs"] = nullptr;
  } else {
    choice["text"] = c.text;
    choice["logprobs"] = nullptr;
  }
  if (r.return_token_ids) choice["token_ids"] = c.tokens;
  return json{{"id", id},
              {"object", r.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", r.model},
              {"choices", json::array({choice})},
              {"usage", usage_json(c.prompt_tokens, c.completion_tokens)}};
}

json stream_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& text,
                  const std::vector<int32_t>& tokens, bool first, Finish reason) {
  json choice = {{"index", 0}, {"finish_reason", finish_json(reason)}, {"logprobs", nullptr}};
  if (r.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && reason == Finish::kNone)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  if (r.return_token_ids) choice["token_ids"] = tokens;
  return json{{"id", id},
              {"object", r.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", r.model},
              {"choices", json::array({choice})}};
}

json usage_chunk(const ApiRequest& r, const std::string& id, int64_t created, int prompt_tokens, int completion_tokens) {
  return json{{"id", id},
              {"object", r.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", r.model},
              {"choices", json::array()},
              {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace serve

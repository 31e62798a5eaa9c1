// openai.hpp - the OpenAI-compatible request and response bodies of kvq_serve: parsing a
// /v1/completions or /v1/chat/completions body into an engine request (every field checked for
// type and range; an ApiError names the field), SmolLM2's chat template, and the JSON of responses,
// stream chunks and errors. No HTTP here (server.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine.hpp"
#include "gguf.hpp"
#include "tokenizer.hpp"

namespace serve {

using json = nlohmann::json;

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one
  std::string code;   // e.g. "model_not_found", "context_length_exceeded"
};
json error_body(const ApiError& e);

// The chat template of the model: SmolLM2-Instruct's ChatML form (<|im_start|>role\ncontent<|im_end|>\n
// per message, a default system message when the first is not one, then <|im_start|>assistant\n).
// Read from the GGUF metadata tokenizer.chat_template: a template of that form is recognised and its
// default system message taken from it; a file without a template gets ChatML with SmolLM2's
// default; any other template is refused (supported() false, why() says so).
class ChatTemplate {
 public:
  explicit ChatTemplate(const smollm2::GgufFile& file);
  ChatTemplate(bool supported, std::string default_system) : ok_(supported), system_(std::move(default_system)) {}
  bool supported() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& default_system() const { return system_; }
  struct Message {
    std::string role, content;
  };
  std::string render(const std::vector<Message>& messages) const;  // with the generation prompt

 private:
  bool ok_ = true;
  std::string system_, why_;
};

enum class Endpoint { kCompletions, kChat };

// A parsed request body.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  RequestSpec spec;
  bool stream = false, include_usage = false, return_token_ids = false;
  std::string model;
};

struct ParseContext {
  const smollm2::Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;
  std::string model_name;
  int default_max_tokens = 16;
  int64_t max_seq_len = 0;  // prompt + max_tokens limit (the engine's)
  int vocab = 0;
};

// Parses `body` (raw text) for `endpoint`; throws ApiError (400: bad JSON, a field of the wrong
// type or out of range, a prompt longer than the maximum; 404: another model's name).
ApiRequest parse_request(const std::string& body, Endpoint endpoint, const ParseContext& ctx);

// Response bodies. id: "cmpl-..." or "chatcmpl-..."; created: Unix seconds.
struct Completed {
  std::string text;
  std::vector<int32_t> tokens;
  Finish reason = Finish::kNone;
  int prompt_tokens = 0, completion_tokens = 0;
};
json response_body(const ApiRequest& r, const std::string& id, int64_t created, const Completed& c);
// One server-sent event's JSON: a delta (text and tokens; first: the chat role), and the finish
// reason on the last one (Finish::kNone before).
json stream_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& text,
                  const std::vector<int32_t>& tokens, bool first, Finish reason);
json usage_chunk(const ApiRequest& r, const std::string& id, int64_t created, int prompt_tokens, int completion_tokens);
// JSON text that is valid UTF-8 whatever the model produced (bad bytes become U+FFFD).
std::string dump(const json& j);

}  // namespace serve

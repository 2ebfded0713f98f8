// The agent's side of an OpenAI-compatible server: streamed chat completions
// with content, reasoning and tool-call deltas put back together, /tokenize of a
// conversation (Hearth, llama.cpp), and the model's id and window from
// /v1/models. Built on the bench client's endpoint and SSE parsing.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/sse_client.h"

namespace hearth::agent {

// What one streamed chat completion produced.
struct ChatResult {
  bool ok = false;           // HTTP 200 and the stream ended normally
  bool interrupted = false;  // the stop flag closed the request
  bool retryable = false;    // a 5xx, a refused / dropped connection or a cut stream
  int http_status = 0;       // 0: no answer
  std::string error;
  std::string content, reasoning;
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();  // [{id, type, function: {name, arguments}}]
  std::string finish_reason;
  int64_t prompt_tokens = -1, completion_tokens = -1;  // the server's usage (-1: none)
  int64_t drafted = -1, accepted = -1;  // speculative decoding, from Hearth's timings (-1: none)
  int64_t chunks = 0;                                  // streamed events that carried text
  double seconds = 0;                                  // request sent to end
  double first_token_s = -1;                           // request sent to first streamed text
};

// Called with each piece of streamed text (from the request's thread).
struct StreamHandlers {
  std::function<void(const std::string&)> on_content;
  std::function<void(const std::string&)> on_reasoning;
};

// The served model: its id and context window (0 when not reported).
struct ModelInfo {
  std::string id;
  int64_t context_window = 0;
};

// Applies one streamed event (the JSON of a "data:" line) to `r`: text,
// reasoning (reasoning_content or reasoning), tool-call fragments (merged by
// index), finish reason, usage, error objects. Returns true on "[DONE]".
bool apply_chat_event(const std::string& payload, ChatResult& r, const StreamHandlers& h);

class ChatClient {
 public:
  explicit ChatClient(bench::Endpoint ep, double timeout_s = 600)
      : ep_(std::move(ep)), timeout_s_(timeout_s) {}

  // Posts `body` with stream on; returns when the stream ends, fails, or `stop`
  // becomes true (the connection is closed then). Never throws.
  ChatResult chat(nlohmann::ordered_json body, const StreamHandlers& h,
                  const std::atomic<bool>& stop) const;

  // The number of tokens of the rendered conversation (POST /tokenize with
  // messages and tools); nullopt when the server has no such endpoint or fails
  // (`*status`, when given, gets the HTTP status; 0: no answer).
  std::optional<int64_t> count_tokens(const nlohmann::ordered_json& request, int* status = nullptr) const;

  // Whether the served model takes images: POST /tokenize of a user message holding a
  // small generated PNG. true: counted (Hearth with a vision encoder); false: refused
  // with "takes text only" (Hearth without one); nullopt: the server does not say (no
  // such route, no tokens, another error).
  std::optional<bool> takes_images() const;

  // The first model of GET /v1/models with its window (context_length,
  // max_model_len or context_window); throws Error when unreachable or empty.
  ModelInfo model_info() const;

  const bench::Endpoint& endpoint() const { return ep_; }
  // Points the client at another origin (a restarted server's new port); keeps the API key.
  void set_origin(const std::string& url) {
    bench::Endpoint ep = bench::parse_endpoint(url, "server");
    ep.api_key = ep_.api_key;
    ep_ = std::move(ep);
  }

 private:
  bench::Endpoint ep_;
  double timeout_s_;
};

}  // namespace hearth::agent

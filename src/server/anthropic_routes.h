// The HTTP handlers of the Anthropic Messages API of `hearth serve`: POST /v1/messages
// (also ?beta=true) and POST /v1/messages/count_tokens. The HTTP server checks the API
// key and hands the request over; these parse it (anthropic_protocol.h), build the
// prompt with the model's chat template, submit it to the engine and answer, whole or
// as SSE events, from the assistant-output events of the turn.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_prompt.h"
#include "engine/serve_engine.h"
#include "server/anthropic_protocol.h"
#include "server/chat_output.h"
#include "server/chat_request.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/served_model.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace hearth::server {

// True for the paths of the Anthropic routes (their errors take Anthropic's shape).
bool is_anthropic_path(std::string_view path);

// Sends `error` in Anthropic's shape and status (anthropic_error), with Retry-After on
// 429 / 529.
void send_anthropic_error(httplib::Response& res, const ApiError& error);

class AnthropicRoutes {
 public:
  // pick: the model a request's "model" names, leased for the request (throws
  // ApiException: 404 unknown name, 503 still loading), as the OpenAI routes pick it;
  // its chat settings (tools, reasoning, template kwargs) are the OpenAI route's too.
  AnthropicRoutes(ModelPicker pick, ServerMetrics& metrics);
  // POST /v1/messages, already authorized. Thread-safe (called from many HTTP threads).
  void messages(const httplib::Request& req, httplib::Response& res);
  // POST /v1/messages/count_tokens, already authorized: {"input_tokens": N}, N the tokens
  // of the rendered prompt (tools and system included).
  void count_tokens(const httplib::Request& req, httplib::Response& res);

 private:
  // The prompt tokens of a request (prepare_chat's prompt, the prefill appended), how its
  // answer is parsed and what its tool_choice demands.
  struct Prompt {
    std::vector<int32_t> tokens;
    PreparedChat prepared;
    OutputOptions output;
  };
  static Prompt prepare(const ServedModel& m, const AnthropicRequest& request);

  ModelPicker pick_;
  ServerMetrics& metrics_;
};

}  // namespace hearth::server

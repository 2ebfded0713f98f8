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
  // check_model: throws ApiException (404) when a requested "model" name is not served
  // (the server's policy, shared with the OpenAI routes).
  // `settings`: the server's chat settings (tools, reasoning, template kwargs), as the
  // OpenAI route uses them.
  AnthropicRoutes(engine::ServeEngine& engine, const tokenizer::Tokenizer& tok,
                  const engine::ChatPrompt& chat, const ChatSettings& settings,
                  ServerMetrics& metrics, std::string model_id,
                  std::function<void(const std::string&)> check_model);
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
  Prompt prepare(const AnthropicRequest& request) const;

  engine::ServeEngine& engine_;
  const tokenizer::Tokenizer& tok_;
  const engine::ChatPrompt& chat_;
  const ChatSettings& settings_;
  ServerMetrics& metrics_;
  std::string model_id_;
  std::function<void(const std::string&)> check_model_;
};

}  // namespace hearth::server

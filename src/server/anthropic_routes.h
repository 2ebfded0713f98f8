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

// The parser of the assistant's output that the Anthropic routes format from.
// INTEGRATION POINT: until make_output_parser (chat_output.h) is merged this returns a
// local one that only splits <think>...</think> from the content (no tool calls);
// replace its body with `return make_output_parser(options);`.
std::unique_ptr<OutputParser> anthropic_output_parser(const OutputOptions& options);

class AnthropicRoutes {
 public:
  // check_model: throws ApiException (404) when a requested "model" name is not served
  // (the server's policy, shared with the OpenAI routes).
  AnthropicRoutes(engine::ServeEngine& engine, const engine::ChatPrompt& chat,
                  ServerMetrics& metrics, std::string model_id,
                  std::function<void(const std::string&)> check_model);
  // POST /v1/messages, already authorized. Thread-safe (called from many HTTP threads).
  void messages(const httplib::Request& req, httplib::Response& res);
  // POST /v1/messages/count_tokens, already authorized: {"input_tokens": N}, N the tokens
  // of the rendered prompt (tools and system included).
  void count_tokens(const httplib::Request& req, httplib::Response& res);

 private:
  // The prompt tokens of a request and how its answer is parsed.
  // INTEGRATION POINT: with chat_request.h merged this becomes prepare_chat(ChatInputs{
  // messages, tools, tool_choice, parallel_tool_calls, chat_template_kwargs}, chat,
  // settings) (tool injection, system folding, the template's tool format), the prefill
  // appended to its prompt.
  struct Prompt {
    std::vector<int32_t> tokens;
    OutputOptions output;
  };
  Prompt prepare(const AnthropicRequest& request) const;

  engine::ServeEngine& engine_;
  const engine::ChatPrompt& chat_;
  ServerMetrics& metrics_;
  std::string model_id_;
  std::function<void(const std::string&)> check_model_;
};

}  // namespace hearth::server

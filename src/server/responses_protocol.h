// OpenAI's Responses API (POST /v1/responses) of `hearth serve`, without HTTP and without
// a model: the request body parsed and validated into the conversation items and the chat
// fields the shared chat path takes (every error names its field, e.g. input[2].call_id),
// the conversation items turned into OpenAI chat messages, and the Response object and its
// SSE events formatted from the assistant-output events of chat_output.h. Pure code; the
// formatters return compact JSON and never throw on odd token bytes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "grammar/constraint.h"
#include "server/chat_output.h"
#include "server/openai_protocol.h"

namespace hearth::server {

// ---------------------------------------------------------------------------
// Requests

// reasoning.effort in Hearth's terms: "none" / "minimal" turn thinking off (the chat
// template's enable_thinking false); "low" / "medium" turn it on with a cap on reasoning
// tokens; "high" / "xhigh" turn it on with the server's --reasoning-budget (no cap unless
// the server sets one).
inline constexpr int32_t kReasoningBudgetLow = 1024;
inline constexpr int32_t kReasoningBudgetMedium = 4096;

// A Responses request. `items` is the request's own input in a canonical form (the
// conversation items this module keeps, validated): {"type": "message", "role", "content":
// text}, {"type": "function_call", "call_id", "name", "arguments": text}, {"type":
// "function_call_output", "call_id", "output": text}, {"type": "reasoning", "text"}; a
// user message's content or an output with input_image parts is instead the list of its
// parts ({"type": "text", "text"} and image_part()s, in order).
struct ResponsesRequest {
  std::optional<std::string> model;
  std::optional<std::string> instructions;
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  // The function tools in the chat shape [{"type": "function", "function": {name,
  // description?, parameters?}}] (null when none) and as the Response echoes them.
  nlohmann::ordered_json tools;
  nlohmann::ordered_json tools_echo = nlohmann::ordered_json::array();
  ToolChoice tool_choice;
  nlohmann::ordered_json tool_choice_echo = "auto";
  std::optional<bool> parallel_tool_calls;  // unset: not sent
  std::optional<int32_t> max_output_tokens;
  engine::SamplerParams sampler = server_sampler_defaults();
  std::optional<double> temperature, top_p;  // as sent (echoed)
  // text.format json_object / json_schema; unset: free text.
  std::optional<grammar::ConstraintSpec> constraint;
  nlohmann::ordered_json text_echo = {{"format", {{"type", "text"}}}};
  // reasoning: the template's enable_thinking (unset: its default) and the reasoning cap
  // (< 0: the server's).
  std::optional<bool> enable_thinking;
  int32_t reasoning_budget = -1;
  nlohmann::ordered_json reasoning_echo;  // {"effort", "summary"} or null
  bool stream = false;
  bool speculative = true;  // Hearth's "speculative": false turns speculative decoding off (as on /v1/chat/completions)
  bool store = false;  // stateless unless asked
  std::optional<std::string> previous_response_id;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::optional<std::string> user;
};

// Parses and validates a body. Throws ApiException (400, the message and `param` naming
// the field by its path) on malformed JSON, a missing or empty input, a wrong type or value,
// a file / audio part, an image part outside user input and function call outputs, a hosted tool (web_search, file_search, ...),
// a tool_choice naming an unknown function, background mode or a conversation. Unknown
// fields are ignored; null means absent.
ResponsesRequest parse_responses_request(std::string_view body);

// The chat messages (OpenAI's shape, as messages_for_template gives them) of a
// conversation: `instructions` as a system message first, then `items` (canonical, see
// ResponsesRequest) in order. Consecutive function_call items become one assistant
// message's tool_calls (joined to the assistant message right before them); reasoning text
// becomes the next assistant message's reasoning_content (dropped when no assistant turn
// follows); function_call_output items become tool messages. Never throws.
nlohmann::ordered_json conversation_messages(const std::optional<std::string>& instructions,
                                             const nlohmann::ordered_json& items);

// Output items of a Response (reasoning, message, function_call) in the canonical item
// form, for the next turn of a stored conversation.
nlohmann::ordered_json canonical_items(const nlohmann::ordered_json& output);

// ---------------------------------------------------------------------------
// Responses

// What the Response object of one request shares.
struct ResponsesContext {
  std::string id;  // "resp_" + 24 alphanumerics
  int64_t created_at = 0;
  std::string model;
  nlohmann::ordered_json echo;  // the request fields the Response repeats (response_echo)
};

// The request fields every Response object repeats: instructions, tools, tool_choice,
// parallel_tool_calls, temperature, top_p, max_output_tokens, previous_response_id,
// reasoning, text, store, metadata, user.
nlohmann::ordered_json response_echo(const ResponsesRequest& request);

// {"input_tokens", "input_tokens_details": {"cached_tokens", "cache_write_tokens": 0},
// "output_tokens", "output_tokens_details": {"reasoning_tokens"}, "total_tokens"}.
nlohmann::ordered_json responses_usage(const engine::Final& final, int64_t reasoning_tokens);

// The Response object: status "in_progress" with no output and null usage before the end.
nlohmann::ordered_json response_object(const ResponsesContext& ctx, std::string_view status,
                                       const nlohmann::ordered_json& output);

// Turns one request's output events into Response output items and, when `sse`, the SSE
// events of a streamed response, in the documented order:
//   start():   response.created, response.in_progress
//   events():  per item response.output_item.added; reasoning: response.content_part.added
//              (reasoning_text), response.reasoning_text.delta...; message:
//              response.content_part.added (output_text), response.output_text.delta...;
//              function call: response.function_call_arguments.delta...; when the item
//              ends: the .done events, response.content_part.done, response.output_item.done
//   finish():  closes the open item; response.completed, or response.incomplete with
//              incomplete_details {"reason": "max_output_tokens"} when the engine stopped
//              at the token limit ("length")
//   failed():  response.failed with the error (the engine failed)
// Every event carries a sequence_number (0, 1, ...); items an output_index, their parts
// content_index 0 and item_id. Text that is only whitespace before another item opens no
// message. A tool call cut by the end of generation never becomes an item. Not
// thread-safe; one per request.
class ResponsesStream {
 public:
  ResponsesStream(ResponsesContext ctx, bool sse) : ctx_(std::move(ctx)), sse_(sse) {}
  std::string start();
  std::string events(const std::vector<OutputEvent>& events);
  // `reasoning_tokens`: the output tokens spent in reasoning (usage).
  std::string finish(const engine::Final& final, int64_t reasoning_tokens);
  std::string failed(const ApiError& error);

  // After finish() / failed(): the final Response object.
  const nlohmann::ordered_json& response() const { return response_; }
  const nlohmann::ordered_json& output() const { return output_; }
  const std::string& reasoning_text() const { return reasoning_; }
  int cut_calls() const { return cut_calls_; }

 private:
  enum class Open { kNone, kReasoning, kMessage, kCall };
  std::string emit(const char* type, nlohmann::ordered_json data);
  std::string open_item(Open kind, nlohmann::ordered_json item);
  std::string close_item(bool incomplete);
  std::string text(Open kind, const std::string& text);

  ResponsesContext ctx_;
  bool sse_;
  int64_t seq_ = 0;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json response_;
  Open open_ = Open::kNone;
  std::string item_text_;   // the open item's text / arguments so far
  std::string pending_ws_;  // whitespace content not yet sent (no message opened for it)
  int open_call_ = -1;      // OutputEvent index of the open function call
  std::string reasoning_;   // all reasoning text
  int cut_calls_ = 0;
};

}  // namespace hearth::server

// The Anthropic Messages protocol of `hearth serve` (POST /v1/messages and
// /v1/messages/count_tokens), without HTTP and without a model: request bodies parsed
// and validated into the OpenAI-shaped messages and tools the chat template gets (every
// error names its field), errors in Anthropic's shape, and the response message and
// its SSE events formatted from the assistant-output events of chat_output.h. Pure
// functions; formatters return compact JSON and never throw on odd token bytes.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "server/chat_output.h"
#include "server/openai_protocol.h"

namespace hearth::server {

// ---------------------------------------------------------------------------
// Errors (ApiError / ApiException of openai_protocol.h carry them; the Anthropic routes
// translate them on the way out)

// The error in Anthropic's terms: the type follows the status (400 invalid_request_error,
// 401 authentication_error, 403 permission_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 500 api_error); a full server (429
// "server_overloaded") or one shutting down (503) becomes 529 overloaded_error.
ApiError anthropic_error(const ApiError& error);
// {"type": "error", "error": {"type", "message"}} of anthropic_error(error).
std::string anthropic_error_body(const ApiError& error);
// 400 "prompt is too long: N tokens > M maximum" (the text clients compact on).
ApiError prompt_too_long(int64_t prompt_tokens, int64_t max_prompt_tokens);

// ---------------------------------------------------------------------------
// Requests

enum class AnthropicEndpoint {
  kMessages,     // /v1/messages: max_tokens required
  kCountTokens,  // /v1/messages/count_tokens: max_tokens and sampling fields ignored
};

// A Messages request in Hearth's terms.
struct AnthropicRequest {
  std::optional<std::string> model;
  // The chat template's messages, OpenAI-shaped: the system text (top-level `system` and
  // system messages inside `messages`, joined by a blank line) first, then user /
  // assistant turns; tool_use blocks become assistant "tool_calls" (arguments as an
  // object), tool_result blocks "tool" messages, thinking blocks "reasoning_content".
  // Image blocks (user messages, tool results) make the content a list of parts
  // ({"type": "text", "text"} and image_part()s, in order).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // A last assistant message of text only is not a turn but the start of the answer
  // (Anthropic's prefill): removed from `messages`, its text follows the generation prompt
  // and the model continues it (the response holds only the continuation).
  std::string prefill;
  // OpenAI tools [{"type": "function", "function": {name, description, parameters}}];
  // null when the request has none.
  nlohmann::ordered_json tools;
  // OpenAI tool_choice: "auto" | "none" | "required" | {"type": "function", "function":
  // {"name"}}; null when absent.
  nlohmann::ordered_json tool_choice;
  std::optional<bool> parallel_tool_calls;  // !tool_choice.disable_parallel_tool_use; unset: not sent
  int32_t max_tokens = 0;           // /v1/messages: >= 1; count_tokens: 0
  engine::SamplerParams sampler = server_sampler_defaults();  // seed left 0
  std::vector<std::string> stop_sequences;                    // non-empty strings
  bool stream = false;
  bool speculative = true;  // Hearth's "speculative": false turns speculative decoding off (as on /v1/chat/completions)
  // {"enable_thinking": bool}: true for thinking enabled / adaptive, false when disabled
  // or absent (Anthropic's default is no thinking, whatever the template's default).
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::optional<int32_t> thinking_budget;  // thinking.budget_tokens (type "enabled")
  // output_config.format {"type": "json_schema", "schema"} as an OpenAI response_format
  // {"type": "json_schema", "json_schema": {"name", "schema"}}; null when absent.
  nlohmann::ordered_json response_format;
};

// Parse and validate a body. Throws ApiException (400; the message names the field by
// its path, e.g. "messages[1].content[0].type") on malformed JSON (with the byte
// offset), a wrong type, a value out of range, a document block, an image block outside
// user messages and tool results or with bad base64 data (its offset named), a server
// tool, a tool_choice naming an unknown tool, a conversation
// with no user or assistant message. cache_control, metadata, context_management,
// output_config (other than its format), citations, signatures and unknown fields are
// accepted and ignored; null means absent.
AnthropicRequest parse_anthropic_request(std::string_view body, AnthropicEndpoint endpoint);

// The chat template's extra variables of a request: "tools" when there are tools, and
// the chat_template_kwargs keys (e.g. "enable_thinking").
nlohmann::ordered_json anthropic_template_extra(const AnthropicRequest& request);

// ---------------------------------------------------------------------------
// Responses

// The text sent as a thinking block's signature (Hearth signs nothing: clients only
// need one to be there, and Hearth ignores signatures it gets back).
inline constexpr std::string_view kThinkingSignature = "hearth-local-unsigned";

// What the response of one request shares.
struct AnthropicContext {
  std::string id;     // "msg_" + 24 alphanumerics (make_response_id("msg_"))
  std::string model;  // echoed as the request named it
};

// An OutputEvent tool-call id in Anthropic's form ("call_X" -> "toolu_X"; others kept).
std::string anthropic_tool_id(std::string_view id);

// stop_reason of a Final: "stop_sequence" (a stop string ended it), "tool_use" (the turn
// made a tool call), "end_turn", "max_tokens"; nullopt when the request failed (send
// final_error in Anthropic's shape instead).
std::optional<std::string> anthropic_stop_reason(const engine::Final& final, bool made_tool_call);
// {"input_tokens", "cache_creation_input_tokens": 0, "cache_read_input_tokens",
// "output_tokens"}: input = the prompt minus its prefix-cache hit, cache_read = the hit.
nlohmann::ordered_json anthropic_usage(const engine::Final& final);

// Non-streamed: the whole message {id, type, role, model, content[], stop_reason,
// stop_sequence, usage} from every event of the turn, in order (thinking blocks from
// kReasoning, text blocks from kContent, tool_use blocks from the tool-call events).
std::string anthropic_message(const AnthropicContext& ctx, const std::vector<OutputEvent>& events,
                              const engine::Final& final);

// "event: NAME\ndata: JSON\n\n".
std::string sse_event(std::string_view name, const nlohmann::ordered_json& data);
// event: ping.
std::string anthropic_ping();

// The SSE events of one streamed message, in order: start(), then events() for every
// batch of output events (blocks open, grow by deltas and close as the kind changes),
// then finish() (closes the open block, message_delta, message_stop) or error().
// Not thread-safe; one per request.
class AnthropicStream {
 public:
  explicit AnthropicStream(AnthropicContext ctx) : ctx_(std::move(ctx)) {}
  // message_start: empty content; usage input_tokens = prompt_tokens - cached_tokens,
  // cache_read_input_tokens = cached_tokens (the split message_delta reports again).
  std::string start(int64_t prompt_tokens, int64_t cached_tokens);
  // content_block_start / content_block_delta (text_delta, thinking_delta,
  // input_json_delta) / content_block_stop (a thinking block gets its signature_delta
  // first) for these events; empty texts open nothing.
  std::string events(const std::vector<OutputEvent>& events);
  // Closes the open block; message_delta {stop_reason, stop_sequence} with the cumulative
  // usage; message_stop. A Final without a stop reason gives error() of final_error.
  std::string finish(const engine::Final& final);
  // event: error in Anthropic's shape (the stream ends after it).
  std::string error(const ApiError& error) const;
  bool made_tool_call() const { return made_tool_call_; }

 private:
  enum class Open { kNone, kText, kThinking, kToolUse };
  std::string close_block();
  std::string open_block(Open kind, const nlohmann::ordered_json& block);

  AnthropicContext ctx_;
  Open open_ = Open::kNone;
  int block_ = -1;                 // index of the open (or last) block
  std::map<int, int> tool_block_;  // OutputEvent tool index -> block index
  int open_tool_ = -1;             // tool index of the open tool_use block
  bool made_tool_call_ = false;
};

}  // namespace hearth::server

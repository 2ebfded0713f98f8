// The OpenAI-compatible protocol of `hearth serve`, without HTTP and without a model:
// request bodies of /v1/chat/completions and /v1/completions parsed and validated
// into ParsedRequest (every error names its field), and the response bodies and SSE
// chunks formatted from the engine's Delta / Final records. Pure functions; every
// formatter returns compact JSON and never throws on odd token bytes (text that is
// not valid UTF-8 is sent with U+FFFD in place of the bad bytes).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"
#include "grammar/constraint.h"
#include "server/chat_output.h"

namespace hearth::server {

// ---------------------------------------------------------------------------
// Errors

// An error response: HTTP status and the fields of {"error": {...}}. `param` and
// `code` are sent as null when empty.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

class ApiException : public std::exception {
 public:
  explicit ApiException(ApiError error) : error_(std::move(error)) {}
  const ApiError& error() const { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  ApiError error_;
};

// The usual errors, with OpenAI's types and codes.
ApiError invalid_request(std::string message, std::string param = {});       // 400
ApiError model_not_found(const std::string& model);                          // 404 model_not_found
ApiError context_length_exceeded(int64_t prompt_tokens, int64_t max_tokens,  // 400
                                 int64_t n_ctx);
ApiError payload_too_large(size_t body_bytes, size_t limit_bytes);  // 413
ApiError authentication_failed(std::string message);                // 401
ApiError server_overloaded(std::string message);                    // 429 (send Retry-After)
ApiError server_error(std::string message);                         // 500
// 503: the engine no longer runs; `failure` is why (engine fault), empty when shutting down.
ApiError engine_stopped(const std::string& failure);

// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& error);

// ---------------------------------------------------------------------------
// Requests

// One chat message, its content flattened to a string (text parts joined).
struct ChatMessage {
  std::string role;                    // system | user | assistant | tool | developer
  std::optional<std::string> content;  // unset: null/absent (assistant messages only)
  // A content with images (user and tool messages): every part in order, text parts
  // {"type": "text", "text"} and image_part()s; null for text-only content.
  nlohmann::ordered_json parts;
  std::optional<std::string> name;
  // Assistant calls, null when absent: [{id, type: "function", function: {name,
  // arguments}}], `arguments` an object when the request's JSON string parsed as one (the
  // templates iterate over it), else the string as sent.
  nlohmann::ordered_json tool_calls;
  std::optional<std::string> tool_call_id;
  std::optional<std::string> reasoning_content;  // "reasoning_content" or "reasoning"
};

// tool_choice: "auto" (default with tools), "none", "required", or a named function.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed
};

// OpenAI's sampling defaults, not `hearth run`'s: temperature 1, top_p 1, top_k 0 (off),
// min_p 0, penalties off; seed 0 (see ParsedRequest::seed).
engine::SamplerParams server_sampler_defaults();

struct ParsedRequest {
  bool chat = true;  // /v1/chat/completions; false: /v1/completions
  std::optional<std::string> model;

  std::vector<ChatMessage> messages;   // chat: non-empty
  nlohmann::ordered_json tools;        // chat: "tools" (validated function tools); null if absent
  ToolChoice tool_choice;              // chat: validated against tools
  std::optional<bool> parallel_tool_calls;  // unset: not sent (see ChatInputs)
  nlohmann::ordered_json chat_template_kwargs;  // chat: an object, or null
  std::optional<bool> parse_reasoning;  // chat: "reasoning_format" none (false) / auto (true)
  std::string prompt_text;             // completions: the prompt as text, or
  std::vector<int32_t> prompt_tokens;  //   as token ids (then prompt_is_tokens)
  bool prompt_is_tokens = false;

  std::optional<int32_t> max_tokens;  // max_completion_tokens, else max_tokens; >= 1
  engine::SamplerParams sampler = server_sampler_defaults();  // seed left 0
  std::optional<uint64_t> seed;   // unset: the caller picks a random seed
  std::vector<std::string> stop;  // up to 4, no empty strings

  bool logprobs = false;     // chat: logprobs; completions: logprobs given (0..20)
  int32_t top_logprobs = 0;  // 0..20
  bool stream = false;
  bool speculative = true;  // "speculative": false turns speculative decoding off for the request
  bool include_usage = false;  // stream_options.include_usage
  // response_format (json_object / json_schema); unset: free text (response_format.h).
  std::optional<grammar::ConstraintSpec> constraint;

  // GenRequest::top_logprobs: -1 without logprobs, else the top count.
  int32_t engine_top_logprobs() const { return logprobs ? top_logprobs : -1; }
};

// Parse and validate a request body. Throw ApiException (400, naming the field in the
// message and in `param`) on malformed JSON (with the byte offset), a body that is not
// an object, nesting deeper than tmpl::kMaxJsonDepth, a wrong type or a value out of
// range. Unknown fields are ignored; null means unset.
ParsedRequest parse_chat_request(std::string_view body);
// A request body that must be a JSON object (same checks and errors as above).
nlohmann::ordered_json parse_json_object(std::string_view body);
ParsedRequest parse_completion_request(std::string_view body);

// The "messages" value for the chat template: [{role, content (a string; null is ""; the
// parts when there are images), name?, tool_calls?, tool_call_id?, reasoning_content?},
// ...]. (Tools: see chat_request.h.)
nlohmann::ordered_json messages_for_template(const ParsedRequest& request);

// An image content part as every request parser writes it into the template's messages
// (OpenAI image_url, Anthropic image, Responses input_image): {"type": "image", "url": a
// data:, file:// or http(s):// URL, "where": its content part ("messages[1].content[0]"),
// "param": the field holding the URL ("messages[1].content[0].image_url")}. load_images
// reads them, prepare_chat gives the template {"type": "image"} in their place.
nlohmann::ordered_json image_part(std::string url, std::string where, std::string param);
// True for an image_part().
bool is_image_part(const nlohmann::ordered_json& part);

// ---------------------------------------------------------------------------
// Responses

// Raw bytes of a token's piece (may be part of a UTF-8 character).
using TokenText = std::function<std::string(int32_t)>;

// What every response / chunk of one request shares.
struct ResponseContext {
  std::string id;       // "chatcmpl-..." / "cmpl-..." (make_response_id)
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool logprobs = false;       // send log-probabilities (needs token_text)
  bool include_usage = false;  // streams: "usage": null on each chunk, then a usage chunk
  TokenText token_text;
};

// prefix + 24 random alphanumerics, e.g. make_response_id("chatcmpl-").
std::string make_response_id(std::string_view prefix);
int64_t unix_time_now();

// `text` with every byte that is not part of a valid UTF-8 sequence replaced by U+FFFD.
std::string sanitize_utf8(std::string_view text);

// finish_reason for a Final: "stop" / "length"; nullopt for "cancelled" / "error" (the
// request failed: send final_error instead).
std::optional<std::string> finish_reason(const engine::Final& final);
// The error for a Final without a finish reason (500 server_error; message from
// Final::error, or "request cancelled").
ApiError final_error(const engine::Final& final);

// {"queue_ms", "prompt_n", "cached_n", "prompt_ms", "prompt_per_second", "predicted_n",
//  "predicted_ms", "predicted_per_second", "ttft_ms"}.
nlohmann::ordered_json timings_json(const engine::Timings& t);
// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}.
nlohmann::ordered_json usage_json(const engine::Final& final);

// Chat, non-streamed: the whole completion (`tokens`: every generated token, for logprobs).
std::string chat_completion(const ResponseContext& ctx, std::string_view content,
                            std::span<const engine::TokenOut> tokens, const engine::Final& final);
// The same from a parsed turn: message.content (null when there are tool calls and no
// text), reasoning_content and reasoning (when any), tool_calls; finish_reason
// "tool_calls" when the turn stopped on its own after calls.
std::string chat_completion(const ResponseContext& ctx, const ParsedOutput& output,
                            std::span<const engine::TokenOut> tokens, const engine::Final& final);
// Chat stream, in order: chat_chunk_role, chat_chunk_delta per Delta (skip empty ones) or
// chat_chunks_events per Delta's parsed events, chat_chunk_finish, chat_chunk_usage when
// ctx.include_usage, then sse_done().
std::string chat_chunk_role(const ResponseContext& ctx);
std::string chat_chunk_delta(const ResponseContext& ctx, const engine::Delta& delta);
// One chunk per event: {"content"}, {"reasoning_content", "reasoning"}, a tool call's
// {"tool_calls": [{index, id, type, function: {name, arguments: ""}}]} and then its
// {"tool_calls": [{index, function: {arguments}}]} fragments. `tokens` (this Delta's)
// carry the logprobs on the first chunk (an empty-content chunk when there is no event).
std::vector<std::string> chat_chunks_events(const ResponseContext& ctx,
                                            std::span<const OutputEvent> events,
                                            std::span<const engine::TokenOut> tokens);
std::string chat_chunk_finish(const ResponseContext& ctx, const engine::Final& final,
                              bool had_tool_calls = false);
std::string chat_chunk_usage(const ResponseContext& ctx, const engine::Final& final);

// Text completion, non-streamed.
std::string text_completion(const ResponseContext& ctx, std::string_view text,
                            std::span<const engine::TokenOut> tokens, const engine::Final& final);
// Text completion stream: text_chunk_delta per Delta (text_offset: bytes of token text
// sent so far, start at 0), text_chunk_finish, text_chunk_usage when asked, sse_done().
std::string text_chunk_delta(const ResponseContext& ctx, const engine::Delta& delta,
                             size_t& text_offset);
std::string text_chunk_finish(const ResponseContext& ctx, const engine::Final& final);
std::string text_chunk_usage(const ResponseContext& ctx, const engine::Final& final);

// Server-sent events.
std::string sse_data(std::string_view json);  // "data: <json>\n\n"
std::string sse_done();                       // "data: [DONE]\n\n"

// Compact JSON text of j; invalid UTF-8 in strings becomes U+FFFD (never throws).
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace hearth::server

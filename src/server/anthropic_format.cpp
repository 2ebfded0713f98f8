// Errors and response formatting of the Anthropic Messages protocol; see
// anthropic_protocol.h.
#include <map>

#include "server/anthropic_protocol.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------
// Errors

ApiError anthropic_error(const ApiError& e) {
  ApiError a = e;
  if ((e.status == 429 && e.code == "server_overloaded") || e.status == 503 || e.status == 529) {
    // A draining server keeps 503, which load balancers retry on another replica.
    a.status = e.code == "server_draining" ? 503 : 529;
    a.type = "overloaded_error";
    return a;
  }
  switch (e.status) {
    case 400:
      a.type = "invalid_request_error";
      break;
    case 401:
      a.type = "authentication_error";
      break;
    case 403:
      a.type = "permission_error";
      break;
    case 404:
      a.type = "not_found_error";
      break;
    case 413:
      a.type = "request_too_large";
      break;
    case 429:
      a.type = "rate_limit_error";
      break;
    default:
      a.type = e.status >= 500 ? "api_error" : "invalid_request_error";
      break;
  }
  return a;
}

std::string anthropic_error_body(const ApiError& error) {
  const ApiError a = anthropic_error(error);
  json err = json::object();
  err["type"] = a.type;
  err["message"] = sanitize_utf8(a.message);
  return dump_json(json{{"type", "error"}, {"error", std::move(err)}});
}

ApiError prompt_too_long(int64_t prompt_tokens, int64_t max_prompt_tokens) {
  return ApiError{400,
                  "prompt is too long: " + std::to_string(prompt_tokens) + " tokens > " +
                      std::to_string(max_prompt_tokens) + " maximum",
                  "invalid_request_error", "messages", "context_length_exceeded"};
}

// ---------------------------------------------------------------------------
// Responses

std::string anthropic_tool_id(std::string_view id) {
  if (id.substr(0, 5) == "call_") return "toolu_" + std::string(id.substr(5));
  return std::string(id);
}

std::optional<std::string> anthropic_stop_reason(const engine::Final& f, bool made_tool_call) {
  if (f.finish_reason == "length") return "max_tokens";
  if (f.finish_reason != "stop") return std::nullopt;
  if (made_tool_call) return "tool_use";  // the client must run the call, whatever ended the turn
  if (!f.stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

json anthropic_usage(const engine::Final& f) {
  json u = json::object();
  u["input_tokens"] = f.prompt_tokens - f.cached_tokens;
  u["cache_creation_input_tokens"] = 0;
  u["cache_read_input_tokens"] = f.cached_tokens;
  u["output_tokens"] = f.completion_tokens;
  return u;
}

namespace {

json stop_sequence_json(const std::optional<std::string>& reason, const engine::Final& f) {
  return reason && *reason == "stop_sequence" ? json(sanitize_utf8(f.stop_sequence))
                                              : json(nullptr);
}

}  // namespace

std::string anthropic_message(const AnthropicContext& ctx, const std::vector<OutputEvent>& events,
                              const engine::Final& f) {
  json content = json::array();
  std::map<int, size_t> tool_block;  // tool index -> position in content
  std::map<int, std::string> args;   // tool index -> its arguments so far
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
      case OutputEvent::Kind::kContent: {
        if (e.text.empty()) break;
        const bool thinking = e.kind == OutputEvent::Kind::kReasoning;
        const char* type = thinking ? "thinking" : "text";
        if (content.empty() || content.back()["type"] != type) {
          json b = json{{"type", type}, {type, ""}};
          if (thinking) b["signature"] = kThinkingSignature;
          content.push_back(std::move(b));
        }
        content.back()[type] = content.back()[type].get<std::string>() + e.text;
        break;
      }
      case OutputEvent::Kind::kToolCallBegin:
        tool_block[e.index] = content.size();
        args[e.index];
        content.push_back(json{{"type", "tool_use"},
                               {"id", anthropic_tool_id(e.id)},
                               {"name", sanitize_utf8(e.name)},
                               {"input", json::object()}});
        break;
      case OutputEvent::Kind::kToolCallArgs:
        if (tool_block.count(e.index) != 0) args[e.index] += e.text;
        break;
      case OutputEvent::Kind::kToolCallEnd:
      case OutputEvent::Kind::kToolCallCut:  // not a call: dropped (stop_reason max_tokens)
        break;
    }
  }
  for (const auto& [index, at] : tool_block) {
    // A value split inside a UTF-8 character is repaired (U+FFFD), as on the OpenAI route.
    const std::string text = sanitize_utf8(args[index]);
    if (text.empty()) continue;
    json input = json::parse(text, nullptr, false);
    if (input.is_object()) {
      content[at]["input"] = std::move(input);
    } else {
      // Not the object the parser promises: the text is kept, never dropped.
      content[at] = json{{"type", "text"}, {"text", text}};
    }
  }
  for (json& b : content) {
    if (b["type"] == "text") b["text"] = sanitize_utf8(b["text"].get<std::string>());
    if (b["type"] == "thinking") b["thinking"] = sanitize_utf8(b["thinking"].get<std::string>());
  }
  const bool made_tool_call = !tool_block.empty();
  const auto reason = anthropic_stop_reason(f, made_tool_call);
  json j = json::object();
  j["id"] = ctx.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = ctx.model;
  j["content"] = std::move(content);
  j["stop_reason"] = reason ? json(*reason) : json(nullptr);
  j["stop_sequence"] = stop_sequence_json(reason, f);
  j["usage"] = anthropic_usage(f);
  return dump_json(j);
}

std::string sse_event(std::string_view name, const json& data) {
  std::string out;
  out += "event: ";
  out += name;
  out += "\ndata: ";
  out += dump_json(data);
  out += "\n\n";
  return out;
}

std::string anthropic_ping() { return sse_event("ping", json{{"type", "ping"}}); }

std::string AnthropicStream::start(int64_t prompt_tokens, int64_t cached_tokens) {
  json usage = json::object();
  usage["input_tokens"] = prompt_tokens - cached_tokens;
  usage["cache_creation_input_tokens"] = 0;
  usage["cache_read_input_tokens"] = cached_tokens;
  usage["output_tokens"] = 0;
  json m = json::object();
  m["id"] = ctx_.id;
  m["type"] = "message";
  m["role"] = "assistant";
  m["model"] = ctx_.model;
  m["content"] = json::array();
  m["stop_reason"] = nullptr;
  m["stop_sequence"] = nullptr;
  m["usage"] = std::move(usage);
  return sse_event("message_start", json{{"type", "message_start"}, {"message", std::move(m)}});
}

std::string AnthropicStream::open_block(Open kind, const json& block) {
  std::string out = close_block();
  open_ = kind;
  ++block_;
  out +=
      sse_event("content_block_start",
                json{{"type", "content_block_start"}, {"index", block_}, {"content_block", block}});
  return out;
}

std::string AnthropicStream::close_block() {
  if (open_ == Open::kNone) return {};
  std::string out;
  if (open_ == Open::kThinking) {
    out += sse_event(
        "content_block_delta",
        json{{"type", "content_block_delta"},
             {"index", block_},
             {"delta", {{"type", "signature_delta"}, {"signature", kThinkingSignature}}}});
  }
  out += sse_event("content_block_stop", json{{"type", "content_block_stop"}, {"index", block_}});
  open_ = Open::kNone;
  open_tool_ = -1;
  return out;
}

std::string AnthropicStream::events(const std::vector<OutputEvent>& events) {
  std::string out;
  auto delta = [&](int index, json d) {
    out +=
        sse_event("content_block_delta",
                  json{{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(d)}});
  };
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
        if (e.text.empty()) break;
        if (open_ != Open::kThinking) {
          out += open_block(Open::kThinking,
                            json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        }
        delta(block_, json{{"type", "thinking_delta"}, {"thinking", sanitize_utf8(e.text)}});
        break;
      case OutputEvent::Kind::kContent:
        if (e.text.empty()) break;
        if (open_ != Open::kText)
          out += open_block(Open::kText, json{{"type", "text"}, {"text", ""}});
        delta(block_, json{{"type", "text_delta"}, {"text", sanitize_utf8(e.text)}});
        break;
      case OutputEvent::Kind::kToolCallBegin:
        out += open_block(Open::kToolUse, json{{"type", "tool_use"},
                                               {"id", anthropic_tool_id(e.id)},
                                               {"name", sanitize_utf8(e.name)},
                                               {"input", json::object()}});
        open_tool_ = e.index;
        tool_block_[e.index] = block_;
        made_tool_call_ = true;
        break;
      case OutputEvent::Kind::kToolCallArgs: {
        if (e.text.empty()) break;
        auto it = tool_block_.find(e.index);
        if (it == tool_block_.end()) break;  // arguments of a call that never began
        delta(it->second,
              json{{"type", "input_json_delta"}, {"partial_json", sanitize_utf8(e.text)}});
        break;
      }
      case OutputEvent::Kind::kToolCallEnd:
        if (open_ == Open::kToolUse && open_tool_ == e.index) out += close_block();
        break;
      case OutputEvent::Kind::kToolCallCut:  // (never begun in the stream)
        break;
    }
  }
  return out;
}

std::string AnthropicStream::finish(const engine::Final& f) {
  const auto reason = anthropic_stop_reason(f, made_tool_call_);
  if (!reason) return error(final_error(f));
  std::string out = close_block();
  json d = json::object();
  d["stop_reason"] = *reason;
  d["stop_sequence"] = stop_sequence_json(reason, f);
  out += sse_event(
      "message_delta",
      json{{"type", "message_delta"}, {"delta", std::move(d)}, {"usage", anthropic_usage(f)}});
  out += sse_event("message_stop", json{{"type", "message_stop"}});
  return out;
}

std::string AnthropicStream::error(const ApiError& error) const {
  return sse_event("error", json::parse(anthropic_error_body(error)));
}

}  // namespace hearth::server

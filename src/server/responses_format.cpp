// The Response object and its SSE events; see responses_protocol.h.
#include <string>

#include "server/anthropic_protocol.h"  // sse_event
#include "server/responses_protocol.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

namespace {

bool all_space(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') return false;
  }
  return true;
}

}  // namespace

json response_echo(const ResponsesRequest& r) {
  json e = json::object();
  e["instructions"] = r.instructions ? json(*r.instructions) : json(nullptr);
  e["max_output_tokens"] = r.max_output_tokens ? json(*r.max_output_tokens) : json(nullptr);
  // Unset: parallel calls, except under a forced tool_choice (one call), as the chat path decides.
  const bool forced = r.tool_choice.mode == ToolChoice::Mode::kRequired || r.tool_choice.mode == ToolChoice::Mode::kNamed;
  e["parallel_tool_calls"] = r.parallel_tool_calls.value_or(!forced);
  e["previous_response_id"] = r.previous_response_id ? json(*r.previous_response_id) : json(nullptr);
  e["reasoning"] = r.reasoning_echo;
  e["store"] = r.store;
  e["temperature"] = r.temperature ? json(*r.temperature) : json(1.0);
  e["text"] = r.text_echo;
  e["tool_choice"] = r.tool_choice_echo;
  e["tools"] = r.tools_echo;
  e["top_p"] = r.top_p ? json(*r.top_p) : json(1.0);
  e["user"] = r.user ? json(*r.user) : json(nullptr);
  e["metadata"] = r.metadata;
  return e;
}

json responses_usage(const engine::Final& f, int64_t reasoning_tokens) {
  json u = json::object();
  u["input_tokens"] = f.prompt_tokens;
  u["input_tokens_details"] = json{{"cached_tokens", f.cached_tokens}, {"cache_write_tokens", 0}};
  u["output_tokens"] = f.completion_tokens;
  u["output_tokens_details"] = json{{"reasoning_tokens", reasoning_tokens}};
  u["total_tokens"] = f.prompt_tokens + f.completion_tokens;
  return u;
}

json response_object(const ResponsesContext& ctx, std::string_view status, const json& output) {
  auto echo = [&](const char* key) {
    auto it = ctx.echo.find(key);
    return it == ctx.echo.end() ? json(nullptr) : *it;
  };
  json j = json::object();
  j["id"] = ctx.id;
  j["object"] = "response";
  j["created_at"] = ctx.created_at;
  j["status"] = status;
  j["background"] = false;
  j["error"] = nullptr;
  j["incomplete_details"] = nullptr;
  j["instructions"] = echo("instructions");
  j["max_output_tokens"] = echo("max_output_tokens");
  j["model"] = ctx.model;
  j["output"] = output;
  j["parallel_tool_calls"] = ctx.echo.value("parallel_tool_calls", true);
  j["previous_response_id"] = echo("previous_response_id");
  j["reasoning"] = echo("reasoning");
  j["store"] = ctx.echo.value("store", false);
  j["temperature"] = echo("temperature");
  j["text"] = echo("text");
  j["tool_choice"] = ctx.echo.contains("tool_choice") ? ctx.echo["tool_choice"] : json("auto");
  j["tools"] = ctx.echo.contains("tools") ? ctx.echo["tools"] : json::array();
  j["top_p"] = echo("top_p");
  j["truncation"] = "disabled";
  j["usage"] = nullptr;
  j["user"] = echo("user");
  j["metadata"] = ctx.echo.contains("metadata") ? ctx.echo["metadata"] : json::object();
  return j;
}

// ---------------------------------------------------------------------------
// ResponsesStream

std::string ResponsesStream::emit(const char* type, json data) {
  if (!sse_) return {};
  json j = {{"type", type}};
  for (auto& [k, v] : data.items()) j[k] = std::move(v);
  j["sequence_number"] = seq_++;
  return sse_event(type, j);
}

std::string ResponsesStream::start() {
  response_ = response_object(ctx_, "in_progress", json::array());
  std::string out = emit("response.created", json{{"response", response_}});
  out += emit("response.in_progress", json{{"response", response_}});
  return out;
}

std::string ResponsesStream::open_item(Open kind, json item) {
  std::string out = close_item(false);
  open_ = kind;
  item_text_.clear();
  const auto index = static_cast<int64_t>(output_.size());
  const std::string id = item["id"].get<std::string>();
  output_.push_back(item);
  out += emit("response.output_item.added", json{{"output_index", index}, {"item", std::move(item)}});
  if (kind == Open::kMessage || kind == Open::kReasoning) {
    json part = kind == Open::kMessage ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
                                       : json{{"type", "reasoning_text"}, {"text", ""}};
    out += emit("response.content_part.added",
                json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", std::move(part)}});
  }
  return out;
}

std::string ResponsesStream::close_item(bool incomplete) {
  if (open_ == Open::kNone) return {};
  const auto index = static_cast<int64_t>(output_.size()) - 1;
  json& item = output_.back();
  const std::string id = item["id"].get<std::string>();
  const std::string text = sanitize_utf8(item_text_);
  std::string out;
  if (open_ == Open::kMessage || open_ == Open::kReasoning) {
    const bool message = open_ == Open::kMessage;
    json part = message ? json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}
                        : json{{"type", "reasoning_text"}, {"text", text}};
    json done = {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text}};
    if (message) done["logprobs"] = json::array();
    out += emit(message ? "response.output_text.done" : "response.reasoning_text.done", std::move(done));
    out += emit("response.content_part.done",
                json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    item["content"] = json::array({std::move(part)});
    if (message) item["status"] = incomplete ? "incomplete" : "completed";
  } else {  // a function call
    out += emit("response.function_call_arguments.done",
                json{{"item_id", id}, {"output_index", index}, {"arguments", text}});
    item["arguments"] = text;
    item["status"] = incomplete ? "incomplete" : "completed";
  }
  out += emit("response.output_item.done", json{{"output_index", index}, {"item", item}});
  open_ = Open::kNone;
  open_call_ = -1;
  item_text_.clear();
  return out;
}

std::string ResponsesStream::text(Open kind, const std::string& t) {
  if (t.empty()) return {};
  std::string out, delta = t;
  if (kind == Open::kMessage && open_ != Open::kMessage) {
    // Whitespace alone (between reasoning and a call, say) opens no message.
    if (all_space(t)) {
      pending_ws_ += t;
      return {};
    }
    delta = pending_ws_ + t;
    pending_ws_.clear();
    out += open_item(Open::kMessage, json{{"id", make_response_id("msg_")},
                                          {"type", "message"},
                                          {"status", "in_progress"},
                                          {"content", json::array()},
                                          {"role", "assistant"}});
  } else if (kind == Open::kReasoning && open_ != Open::kReasoning) {
    pending_ws_.clear();
    out += open_item(Open::kReasoning, json{{"id", make_response_id("rs_")},
                                            {"type", "reasoning"},
                                            {"summary", json::array()},
                                            {"content", json::array()}});
  }
  item_text_ += delta;
  if (kind == Open::kReasoning) reasoning_ += delta;
  const auto index = static_cast<int64_t>(output_.size()) - 1;
  json d = {{"item_id", output_.back()["id"]}, {"output_index", index}, {"content_index", 0}, {"delta", delta}};
  if (kind == Open::kMessage) d["logprobs"] = json::array();
  out += emit(kind == Open::kMessage ? "response.output_text.delta" : "response.reasoning_text.delta", std::move(d));
  return out;
}

std::string ResponsesStream::events(const std::vector<OutputEvent>& events) {
  std::string out;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
        out += text(Open::kReasoning, e.text);
        break;
      case OutputEvent::Kind::kContent:
        out += text(Open::kMessage, e.text);
        break;
      case OutputEvent::Kind::kToolCallBegin:
        pending_ws_.clear();
        out += open_item(Open::kCall, json{{"id", make_response_id("fc_")},
                                           {"type", "function_call"},
                                           {"status", "in_progress"},
                                           {"arguments", ""},
                                           {"call_id", e.id},
                                           {"name", e.name}});
        open_call_ = e.index;
        break;
      case OutputEvent::Kind::kToolCallArgs:
        if (open_ == Open::kCall && e.index == open_call_ && !e.text.empty()) {
          item_text_ += e.text;
          out += emit("response.function_call_arguments.delta",
                      json{{"item_id", output_.back()["id"]},
                           {"output_index", static_cast<int64_t>(output_.size()) - 1},
                           {"delta", e.text}});
        }
        break;
      case OutputEvent::Kind::kToolCallEnd:
        if (open_ == Open::kCall && e.index == open_call_) out += close_item(false);
        break;
      case OutputEvent::Kind::kToolCallCut:  // cut by the end of generation: not a call, no item
        ++cut_calls_;
        break;
    }
  }
  return out;
}

std::string ResponsesStream::finish(const engine::Final& f, int64_t reasoning_tokens) {
  const bool length = f.finish_reason == "length";
  std::string out;
  if (open_ == Open::kCall) {
    // (Never: the parser releases a call's events only once it is complete.) A call still
    // open was cut: it is not a call and leaves the output.
    ++cut_calls_;
    output_.erase(output_.size() - 1);
    open_ = Open::kNone;
    open_call_ = -1;
    item_text_.clear();
  }
  out += close_item(length);
  pending_ws_.clear();
  response_ = response_object(ctx_, length ? "incomplete" : "completed", output_);
  if (length) response_["incomplete_details"] = json{{"reason", "max_output_tokens"}};
  response_["usage"] = responses_usage(f, reasoning_tokens);
  out += emit(length ? "response.incomplete" : "response.completed", json{{"response", response_}});
  return out;
}

std::string ResponsesStream::failed(const ApiError& error) {
  std::string out = close_item(true);
  response_ = response_object(ctx_, "failed", output_);
  response_["error"] = json{{"code", error.code.empty() ? std::string("server_error") : error.code},
                            {"message", error.message}};
  out += emit("response.failed", json{{"response", response_}});
  return out;
}

}  // namespace hearth::server

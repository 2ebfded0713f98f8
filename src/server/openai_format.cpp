// Errors and response formatting of the OpenAI protocol; see openai_protocol.h.
#include <chrono>
#include <cmath>
#include <random>

#include "server/openai_protocol.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------
// Errors

ApiError invalid_request(std::string message, std::string param) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), ""};
}

ApiError model_not_found(const std::string& model) {
  return ApiError{404, "The model '" + model + "' does not exist", "invalid_request_error", "model",
                  "model_not_found"};
}

ApiError context_length_exceeded(int64_t prompt_tokens, int64_t max_tokens, int64_t n_ctx) {
  return ApiError{400,
                  "This model's maximum context length is " + std::to_string(n_ctx) +
                      " tokens. However, you requested " +
                      std::to_string(prompt_tokens + max_tokens) + " tokens (" +
                      std::to_string(prompt_tokens) + " in the prompt, " +
                      std::to_string(max_tokens) +
                      " for the completion). Please reduce the prompt or max_tokens.",
                  "invalid_request_error", "", "context_length_exceeded"};
}

ApiError payload_too_large(size_t body_bytes, size_t limit_bytes) {
  return ApiError{413,
                  "The request body is " + std::to_string(body_bytes) + " bytes; the limit is " +
                      std::to_string(limit_bytes) + " bytes",
                  "invalid_request_error", "", "request_too_large"};
}

ApiError authentication_failed(std::string message) {
  return ApiError{401, std::move(message), "authentication_error", "", "invalid_api_key"};
}

ApiError server_overloaded(std::string message) {
  return ApiError{429, std::move(message), "rate_limit_error", "", "server_overloaded"};
}

ApiError server_error(std::string message) {
  return ApiError{500, std::move(message), "server_error", "", ""};
}

ApiError engine_stopped(const std::string& failure) {
  return ApiError{503, failure.empty() ? "the server is shutting down" : failure, "server_error", "", ""};
}

std::string error_body(const ApiError& e) {
  json err = json::object();
  err["message"] = sanitize_utf8(e.message);
  err["type"] = e.type;
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return dump_json(json{{"error", std::move(err)}});
}

// ---------------------------------------------------------------------------
// Helpers

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sanitize_utf8(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0Fu, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07u, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append(kReplacement);  // one per bad byte; the next byte starts afresh
      ++i;
    }
  }
  return out;
}

std::string make_response_id(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<std::string> finish_reason(const engine::Final& f) {
  if (f.finish_reason == "stop" || f.finish_reason == "length") return f.finish_reason;
  return std::nullopt;
}

ApiError final_error(const engine::Final& f) {
  if (!f.error.empty()) return server_error(f.error);
  if (f.finish_reason == "cancelled") return server_error("request cancelled");
  return server_error("generation failed (finish reason '" + f.finish_reason + "')");
}

json timings_json(const engine::Timings& t) {
  json j = json::object();
  j["queue_ms"] = t.queue_ms;
  j["prompt_n"] = t.prompt_n;
  j["cached_n"] = t.cached_n;
  j["cached_disk_n"] = t.disk_n;  // of cached_n, restored from the KV disk tier (--kv-disk)
  j["prompt_ms"] = t.prefill_ms;
  j["prompt_per_second"] = t.prompt_per_second();
  j["predicted_n"] = t.predicted_n;
  j["predicted_ms"] = t.decode_ms;
  j["predicted_per_second"] = t.predicted_per_second();
  j["drafted_n"] = t.drafted_n;    // speculative decoding: tokens drafted ...
  j["accepted_n"] = t.accepted_n;  // ... and accepted
  j["ttft_ms"] = t.ttft_ms;
  return j;
}

json usage_json(const engine::Final& f) {
  json j = json::object();
  j["prompt_tokens"] = f.prompt_tokens;
  j["completion_tokens"] = f.completion_tokens;
  j["total_tokens"] = f.prompt_tokens + f.completion_tokens;
  j["prompt_tokens_details"] = json{{"cached_tokens", f.cached_tokens}};
  return j;
}

namespace {

json finish_json(const engine::Final& f) {
  const auto reason = finish_reason(f);
  return reason ? json(*reason) : json(nullptr);
}

// The token's raw bytes; "" when there is no callback or it throws (never propagates).
std::string raw_piece(const ResponseContext& ctx, int32_t token) {
  if (!ctx.token_text) return {};
  try {
    return ctx.token_text(token);
  } catch (...) {
    return {};
  }
}

// JSON has no -inf: OpenAI sends -9999 for tokens with zero probability.
double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json bytes_json(const std::string& raw) {
  json b = json::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}

// Chat: [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}].
json chat_logprobs_content(const ResponseContext& ctx, std::span<const engine::TokenOut> tokens) {
  json content = json::array();
  for (const engine::TokenOut& t : tokens) {
    const std::string raw = raw_piece(ctx, t.token);
    json e = json::object();
    e["token"] = sanitize_utf8(raw);
    e["logprob"] = finite_logprob(t.logprob);
    e["bytes"] = bytes_json(raw);
    json top = json::array();
    for (const engine::TokenLogprob& c : t.top) {
      const std::string craw = raw_piece(ctx, c.token);
      json ce = json::object();
      ce["token"] = sanitize_utf8(craw);
      ce["logprob"] = finite_logprob(c.logprob);
      ce["bytes"] = bytes_json(craw);
      top.push_back(std::move(ce));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return content;
}

// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
json text_logprobs(const ResponseContext& ctx, std::span<const engine::TokenOut> tokens,
                   size_t& text_offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const engine::TokenOut& t : tokens) {
    const std::string raw = raw_piece(ctx, t.token);
    toks.push_back(sanitize_utf8(raw));
    lps.push_back(finite_logprob(t.logprob));
    json top = json::object();
    for (const engine::TokenLogprob& c : t.top) {
      std::string key = sanitize_utf8(raw_piece(ctx, c.token));
      if (!top.contains(key)) top[key] = finite_logprob(c.logprob);  // largest first wins
    }
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    // In characters, as OpenAI counts: every byte that starts a UTF-8 sequence (a
    // character split over two tokens counts in the token holding its first byte).
    for (const char ch : raw) text_offset += (static_cast<unsigned char>(ch) & 0xC0) != 0x80 ? 1 : 0;
  }
  json j = json::object();
  j["tokens"] = std::move(toks);
  j["token_logprobs"] = std::move(lps);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

json base(const ResponseContext& ctx, const char* object) {
  json j = json::object();
  j["id"] = ctx.id;
  j["object"] = object;
  j["created"] = ctx.created;
  j["model"] = ctx.model;
  return j;
}

json chat_chunk(const ResponseContext& ctx, json delta, json logprobs, json finish) {
  json j = base(ctx, "chat.completion.chunk");
  json choice = json::object();
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish);
  j["choices"] = json::array({std::move(choice)});
  if (ctx.include_usage) j["usage"] = nullptr;
  return j;
}

json text_choice(std::string_view text, json logprobs, json finish) {
  json choice = json::object();
  choice["text"] = sanitize_utf8(text);
  choice["index"] = 0;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish);
  return choice;
}

json text_chunk(const ResponseContext& ctx, json choice) {
  json j = base(ctx, "text_completion");
  j["choices"] = json::array({std::move(choice)});
  if (ctx.include_usage) j["usage"] = nullptr;
  return j;
}

std::string usage_chunk(const ResponseContext& ctx, const char* object, const engine::Final& f) {
  json j = base(ctx, object);
  j["choices"] = json::array();
  j["usage"] = usage_json(f);
  j["timings"] = timings_json(f.timings);
  return dump_json(j);
}

}  // namespace

// ---------------------------------------------------------------------------
// Chat

std::string chat_completion(const ResponseContext& ctx, std::string_view content,
                            std::span<const engine::TokenOut> tokens, const engine::Final& f) {
  json j = base(ctx, "chat.completion");
  json choice = json::object();
  choice["index"] = 0;
  choice["message"] = json{{"role", "assistant"}, {"content", sanitize_utf8(content)}};
  choice["logprobs"] =
      ctx.logprobs ? json{{"content", chat_logprobs_content(ctx, tokens)}} : json(nullptr);
  choice["finish_reason"] = finish_json(f);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(f);
  j["timings"] = timings_json(f.timings);
  return dump_json(j);
}

std::string chat_completion(const ResponseContext& ctx, const ParsedOutput& out,
                            std::span<const engine::TokenOut> tokens, const engine::Final& f) {
  json j = base(ctx, "chat.completion");
  json choice = json::object();
  choice["index"] = 0;
  json message = json::object();
  message["role"] = "assistant";
  message["content"] = out.content.empty() && !out.tool_calls.empty() ? json(nullptr)
                                                                      : json(sanitize_utf8(out.content));
  if (!out.reasoning.empty()) {
    message["reasoning_content"] = sanitize_utf8(out.reasoning);
    message["reasoning"] = sanitize_utf8(out.reasoning);
  }
  if (!out.tool_calls.empty()) {
    json calls = json::array();
    for (const ToolCall& c : out.tool_calls) {
      calls.push_back(json{{"id", c.id},
                           {"type", "function"},
                           {"function", {{"name", sanitize_utf8(c.name)}, {"arguments", sanitize_utf8(c.arguments)}}}});
    }
    message["tool_calls"] = std::move(calls);
  }
  choice["message"] = std::move(message);
  choice["logprobs"] =
      ctx.logprobs ? json{{"content", chat_logprobs_content(ctx, tokens)}} : json(nullptr);
  choice["finish_reason"] = !out.tool_calls.empty() && f.finish_reason == "stop" ? json("tool_calls") : finish_json(f);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(f);
  j["timings"] = timings_json(f.timings);
  return dump_json(j);
}

std::vector<std::string> chat_chunks_events(const ResponseContext& ctx, std::span<const OutputEvent> events,
                                            std::span<const engine::TokenOut> tokens) {
  std::vector<std::string> out;
  json logprobs =
      ctx.logprobs && !tokens.empty() ? json{{"content", chat_logprobs_content(ctx, tokens)}} : json(nullptr);
  auto emit = [&](json delta) {
    out.push_back(dump_json(chat_chunk(ctx, std::move(delta), std::move(logprobs), nullptr)));
    logprobs = nullptr;
  };
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kContent:
        emit(json{{"content", sanitize_utf8(e.text)}});
        break;
      case OutputEvent::Kind::kReasoning: {
        const std::string t = sanitize_utf8(e.text);
        emit(json{{"reasoning_content", t}, {"reasoning", t}});
        break;
      }
      case OutputEvent::Kind::kToolCallBegin: {
        json call = {{"index", e.index},
                     {"id", e.id},
                     {"type", "function"},
                     {"function", {{"name", sanitize_utf8(e.name)}, {"arguments", ""}}}};
        emit(json{{"tool_calls", json::array({std::move(call)})}});
        break;
      }
      case OutputEvent::Kind::kToolCallArgs: {
        json call = {{"index", e.index}, {"function", {{"arguments", sanitize_utf8(e.text)}}}};
        emit(json{{"tool_calls", json::array({std::move(call)})}});
        break;
      }
      case OutputEvent::Kind::kToolCallEnd:
      case OutputEvent::Kind::kToolCallCut:  // (never begun in the stream)
        break;
    }
  }
  if (!logprobs.is_null()) emit(json{{"content", ""}});
  return out;
}

std::string chat_chunk_role(const ResponseContext& ctx) {
  return dump_json(chat_chunk(ctx, json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
}

std::string chat_chunk_delta(const ResponseContext& ctx, const engine::Delta& d) {
  json logprobs =
      ctx.logprobs ? json{{"content", chat_logprobs_content(ctx, d.tokens)}} : json(nullptr);
  return dump_json(
      chat_chunk(ctx, json{{"content", sanitize_utf8(d.text)}}, std::move(logprobs), nullptr));
}

std::string chat_chunk_finish(const ResponseContext& ctx, const engine::Final& f, bool had_tool_calls) {
  json j = chat_chunk(ctx, json::object(), nullptr,
                      had_tool_calls && f.finish_reason == "stop" ? json("tool_calls") : finish_json(f));
  j["timings"] = timings_json(f.timings);
  return dump_json(j);
}

std::string chat_chunk_usage(const ResponseContext& ctx, const engine::Final& f) {
  return usage_chunk(ctx, "chat.completion.chunk", f);
}

// ---------------------------------------------------------------------------
// Text completions

std::string text_completion(const ResponseContext& ctx, std::string_view text,
                            std::span<const engine::TokenOut> tokens, const engine::Final& f) {
  json j = base(ctx, "text_completion");
  size_t offset = 0;
  json logprobs = ctx.logprobs ? text_logprobs(ctx, tokens, offset) : json(nullptr);
  j["choices"] = json::array({text_choice(text, std::move(logprobs), finish_json(f))});
  j["usage"] = usage_json(f);
  j["timings"] = timings_json(f.timings);
  return dump_json(j);
}

std::string text_chunk_delta(const ResponseContext& ctx, const engine::Delta& d,
                             size_t& text_offset) {
  json logprobs = ctx.logprobs ? text_logprobs(ctx, d.tokens, text_offset) : json(nullptr);
  return dump_json(text_chunk(ctx, text_choice(d.text, std::move(logprobs), nullptr)));
}

std::string text_chunk_finish(const ResponseContext& ctx, const engine::Final& f) {
  json j = text_chunk(ctx, text_choice("", nullptr, finish_json(f)));
  j["timings"] = timings_json(f.timings);
  return dump_json(j);
}

std::string text_chunk_usage(const ResponseContext& ctx, const engine::Final& f) {
  return usage_chunk(ctx, "text_completion", f);
}

// ---------------------------------------------------------------------------
// SSE

std::string sse_data(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size() + 8);
  out += "data: ";
  out += json_text;
  out += "\n\n";
  return out;
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace hearth::server

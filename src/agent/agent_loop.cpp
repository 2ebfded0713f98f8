#include "agent/agent_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "agent/context_trim.h"
#include "core/error.h"

namespace hearth::agent {

using json = nlohmann::ordered_json;

namespace {

// Characters per token when nothing better is known.
constexpr double kCharsPerToken = 4.0;

int64_t estimate_tokens(const json& messages, size_t from) {
  size_t chars = 0;
  for (size_t i = from; i < messages.size(); ++i) chars += message_chars(messages[i]);
  return static_cast<int64_t>(std::ceil(chars / kCharsPerToken));
}

// What the user sees of a tool result: its first lines.
std::string cap_preview(const std::string& result) {
  constexpr size_t kMaxLines = 12, kMaxBytes = 1200;
  size_t pos = 0, lines = 0;
  while (pos < result.size() && lines < kMaxLines && pos < kMaxBytes) {
    const size_t nl = result.find('\n', pos);
    if (nl == std::string::npos) {
      pos = result.size();
      break;
    }
    pos = nl + 1;
    ++lines;
  }
  pos = std::min(pos, kMaxBytes);
  std::string out = result.substr(0, pos);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (pos < result.size())
    out += "\n  (" + std::to_string(result.size() - pos) + " more bytes sent to the model)";
  return out;
}

}  // namespace

std::string status_line(int step, int max_steps, int64_t context_used, int64_t window,
                        int64_t tokens, double seconds, double first_token_s, int64_t drafted,
                        int64_t accepted) {
  char buf[256];
  std::string ctx = "context " + std::to_string(context_used);
  if (window > 0) {
    std::snprintf(buf, sizeof buf, "/%lld (%.0f%%)", static_cast<long long>(window),
                  100.0 * static_cast<double>(context_used) / static_cast<double>(window));
    ctx += buf;
  }
  // Decode speed: tokens over the time after the first one arrived (wall time when unknown).
  const double decode_s =
      first_token_s >= 0 && seconds > first_token_s ? seconds - first_token_s : seconds;
  const double tps = tokens > 1 && decode_s > 0
                         ? static_cast<double>(tokens - (first_token_s >= 0 ? 1 : 0)) / decode_s
                         : 0;
  std::snprintf(buf, sizeof buf, "step %d/%d | %s | %lld tokens | %.1f s | %.1f tok/s", step,
                max_steps, ctx.c_str(), static_cast<long long>(tokens), seconds, tps);
  std::string line = buf;
  if (drafted > 0) {
    line += " | " + std::to_string(std::max<int64_t>(accepted, 0)) + " of " + std::to_string(drafted) +
            " drafted accepted";
  }
  return line;
}

Agent::Agent(AgentOptions o, ChatClient& client, ServerSupervisor* server, Terminal& term,
             TranscriptWriter* transcript)
    : o_(std::move(o)),
      client_(client),
      server_(server),
      term_(term),
      transcript_(transcript),
      tools_(tool_schemas(o_.tools.images)) {}

void Agent::begin() {
  messages_ = json::array();
  if (!o_.system_prompt.empty()) append(json{{"role", "system"}, {"content", o_.system_prompt}});
}

void Agent::append(json m) {
  if (transcript_ != nullptr) transcript_->message(m);
  messages_.push_back(std::move(m));
}

void Agent::load(json messages) {
  messages_ = std::move(messages);
  usage_total_ = -1;
}

void Agent::clear() {
  messages_ = json::array();
  usage_total_ = -1;
  if (transcript_ != nullptr) transcript_->clear();
  begin();
}

json Agent::outgoing(const json& messages) const {
  json out = messages;
  keep_recent_images(out, o_.max_images);
  return out;
}

void Agent::drop_images() {
  // A tool result with an image becomes a tool error; elsewhere (an attached image) a note
  // stands in the image's place.
  for (json& m : messages_)
    if (m.is_object() && m.value("role", "") == "tool" && count_images(json::array({m})) > 0)
      m["content"] = "error: the served model takes text only (no vision encoder): it cannot be shown images";
  replace_images(messages_, "[image not shown: the model takes text only (no vision encoder)]");
  o_.tools.images = false;
  tools_ = tool_schemas(false);
  usage_total_ = -1;
}

json Agent::request_body(int step, std::optional<bool> think) const {
  json body = {{"model", o_.model}, {"messages", outgoing(messages_)}, {"tools", tools_}};
  if (step == 1 && o_.tool_choice != "auto") {
    if (o_.tool_choice == "required" || o_.tool_choice == "none")
      body["tool_choice"] = o_.tool_choice;
    else
      body["tool_choice"] = json{{"type", "function"}, {"function", {{"name", o_.tool_choice}}}};
  }
  if (think) body["chat_template_kwargs"] = json{{"enable_thinking", *think}};
  if (o_.max_tokens > 0) body["max_tokens"] = o_.max_tokens;
  if (o_.temperature) body["temperature"] = *o_.temperature;
  return body;
}

int64_t Agent::measure(const json& body) {
  if (tokenize_works_) {
    int status = 0;
    const auto n = client_.count_tokens(body, &status);
    // llama.cpp answers a /tokenize without "content" with no tokens: not a measure.
    if (n && *n > 0) return *n;
    if (n) status = 404;
    // No such route (Ollama, OpenAI): estimate from now on. Other
    // failures (a server down for a moment) fall back to the estimate this time only.
    if (status == 404 || status == 405 || status == 501) tokenize_works_ = false;
  }
  const json& msgs = body["messages"];
  if (usage_total_ >= 0 && usage_messages_ <= msgs.size())
    return usage_total_ + estimate_tokens(msgs, usage_messages_);
  return estimate_tokens(msgs, 0) +
         static_cast<int64_t>(std::ceil(tools_.dump().size() / kCharsPerToken));
}

void Agent::fit_context(json& body) {
  if (o_.context_window <= 0) return;
  const auto limit = static_cast<int64_t>(static_cast<double>(o_.context_window) * o_.trim_ratio);
  json msgs = messages_;
  const size_t before = msgs.size();
  const TrimResult t = trim_to_fit(
      msgs,
      [&](const json& m) {
        json b = body;
        b["messages"] = outgoing(m);
        return measure(b);
      },
      limit);
  if (t.dropped > 0) {
    term_.notice("[context: dropped the " + std::to_string(t.dropped) + " oldest of " +
                 std::to_string(before) + " messages to stay under " +
                 std::to_string(static_cast<int>(o_.trim_ratio * 100)) + "% of the window (" +
                 std::to_string(t.tokens) + "/" + std::to_string(o_.context_window) + " tokens)]");
    messages_ = msgs;
    usage_total_ = -1;  // the estimate's base no longer holds
    body["messages"] = outgoing(messages_);
  }
  if (!t.fits)
    term_.notice("[context: " + std::to_string(t.tokens) + " tokens even after trimming (limit " +
                 std::to_string(limit) + "); sending anyway]");
}

void Agent::sleep_interruptibly(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until && !interrupt_flag().load())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::optional<ChatResult> Agent::request_with_retries(const json& body) {
  StreamHandlers h;
  h.on_content = [this](const std::string& s) { term_.content(s); };
  h.on_reasoning = [this](const std::string& s) { term_.reasoning(s); };
  int failures = 0;
  for (;;) {
    ChatResult r = client_.chat(body, h, interrupt_flag());
    if (r.ok || r.interrupted) return r;
    term_.end_block();
    ++failures;
    term_.notice("[request failed: " + r.error + "]");
    last_status_ = r.http_status;
    last_error_ = r.error;
    if (!r.retryable) return std::nullopt;
    if (server_ != nullptr) {
      // A dropped connection is seen a moment before the process is reaped.
      for (int i = 0; i < 25 && server_->alive(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!server_->alive()) {
        term_.notice("[the server died (" + server_->exit_description() + "); end of " +
                     server_->log_path() + ":]\n" + server_->log_tail(10));
        term_.notice("[restarting the server]");
        try {
          server_->start();
          client_.set_origin(server_->url());
          term_.notice("[server restarted: pid " + std::to_string(server_->pid()) + " at " +
                       server_->url() + "]");
        } catch (const Error& e) {
          term_.notice(std::string("[restart failed: ") + e.what() + "]");
        }
      }
    }
    if (failures >= o_.max_failures) {
      term_.notice("[" + std::to_string(failures) +
                   " failures in a row; giving up on this message (the conversation is kept)]");
      return std::nullopt;
    }
    const double delay = o_.backoff_s * std::pow(2.0, failures - 1);
    term_.notice("[retrying in " + std::to_string(delay).substr(0, 4) + " s (attempt " +
                 std::to_string(failures + 1) + " of " + std::to_string(o_.max_failures) + ")]");
    sleep_interruptibly(delay);
    if (interrupt_flag().load()) {
      ChatResult stopped;
      stopped.interrupted = true;
      return stopped;
    }
  }
}

TurnEnd Agent::ask(const std::string& text, std::optional<bool> think_once,
                   const std::vector<ImageFile>& images) {
  interrupt_flag().store(false);
  if (images.empty()) {
    append(json{{"role", "user"}, {"content", text}});
  } else {
    json parts = json::array({json{{"type", "text"}, {"text", text}}});
    for (const ImageFile& img : images) {
      term_.notice("[image] " + describe_image(img));
      parts.push_back(image_part(img));
    }
    append(json{{"role", "user"}, {"content", std::move(parts)}});
  }
  const std::optional<bool> think = think_once ? think_once : o_.think;
  for (int step = 1; step <= o_.max_steps; ++step) {
    json body = request_body(step, think);
    fit_context(body);
    last_status_ = 0;
    std::optional<ChatResult> r = request_with_retries(body);
    term_.end_block();
    if (!r && last_status_ == 400 && last_error_.find("takes text only") != std::string::npos &&
        count_images(messages_) > 0) {
      // A server that cannot see: the images leave the conversation (a note stays in
      // their place). An image the user attached ends the message (its answer would
      // not be about the image); one a tool returned is a tool error the model hears.
      const bool from_user = !images.empty();
      drop_images();
      if (from_user) {
        term_.notice("[the model takes text only (no vision encoder): the image was not sent]");
        return TurnEnd::kFailed;
      }
      term_.notice("[the model takes text only (no vision encoder): images replaced by a note; retrying]");
      --step;
      continue;
    }
    if (!r) return TurnEnd::kFailed;
    if (r->interrupted) {
      if (!r->content.empty()) append(json{{"role", "assistant"}, {"content", r->content}});
      term_.notice("[interrupted]");
      interrupt_flag().store(false);
      return TurnEnd::kInterrupted;
    }
    // The assistant message as the conversation keeps it.
    json msg = {{"role", "assistant"}, {"content", r->content}};
    if (!r->reasoning.empty()) msg["reasoning_content"] = r->reasoning;
    json calls = json::array();
    for (size_t i = 0; i < r->tool_calls.size(); ++i) {
      json c = r->tool_calls[i];
      if (c["id"].get<std::string>().empty())
        c["id"] = "call_" + std::to_string(step) + "_" + std::to_string(i);
      calls.push_back(std::move(c));
    }
    if (!calls.empty()) msg["tool_calls"] = calls;
    append(msg);

    // Status: the context is what the server counted (prompt + completion).
    const int64_t completion = r->completion_tokens >= 0 ? r->completion_tokens : r->chunks;
    int64_t used = r->prompt_tokens >= 0 ? r->prompt_tokens + completion : -1;
    if (used < 0) used = measure(json{{"messages", messages_}, {"tools", tools_}});
    if (r->prompt_tokens >= 0) {
      usage_total_ = r->prompt_tokens + completion;
      usage_messages_ = messages_.size();
    }
    term_.status("[" +
                 status_line(step, o_.max_steps, used, o_.context_window, completion, r->seconds,
                             r->first_token_s, r->drafted, r->accepted) +
                 "]");
    if (calls.empty()) return TurnEnd::kAnswered;

    for (size_t i = 0; i < calls.size(); ++i) {
      const std::string name = calls[i]["function"]["name"].get<std::string>();
      const std::string args = calls[i]["function"]["arguments"].get<std::string>();
      ToolResult result;
      if (interrupt_flag().load()) {
        result.text = "error: not run (the user interrupted)";
      } else {
        term_.notice("[tool] " + name + " " + args);
        result = run_tool_call(
            name, args, o_.tools, [this](const std::string& q) { return term_.confirm(q); },
            &interrupt_flag());
        term_.status(cap_preview(result.text));
      }
      append(json{{"role", "tool"},
                  {"tool_call_id", calls[i]["id"]},
                  {"name", name},
                  {"content", result.content()}});
    }
    if (interrupt_flag().exchange(false)) {
      term_.notice("[interrupted]");
      return TurnEnd::kInterrupted;
    }
  }
  term_.notice("[stopped at --max-steps " + std::to_string(o_.max_steps) + "]");
  return TurnEnd::kMaxSteps;
}

}  // namespace hearth::agent

// The Responses API routes of `hearth serve`; see responses_routes.h.
#include "server/responses_routes.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>

#include "core/error.h"
#include "server/chat_output.h"
#include "server/client_socket.h"
#include "server/route_common.h"
#include "server/tool_constraint.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;
// A stream with nothing to say for this long (a long prefill) gets an SSE comment, so
// clients and proxies see the connection alive (SSE parsers skip comments).
constexpr auto kKeepAliveEvery = std::chrono::seconds(1);
constexpr std::string_view kKeepAlive = ": keep-alive\n\n";

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_body(e), "application/json");
}

// What one accepted request carries from its preparation to its answer.
struct Turn {
  std::shared_ptr<engine::RequestChannel> channel;
  std::shared_ptr<OutputParser> parser;
  std::shared_ptr<ResponsesStream> out;
  json conversation;  // canonical items up to and including this request's input
  bool store = false;
  // usage.output_tokens_details.reasoning_tokens: the tokens of the deltas after which the
  // turn's last event was reasoning (text the parser holds back, such as the </think> tag,
  // counts with what came before it).
  bool in_reasoning = false;
  int64_t reasoning_tokens = 0;

  std::vector<OutputEvent> feed(const engine::Delta& d) {
    std::vector<OutputEvent> events = parser->feed(d.text);
    if (!events.empty()) in_reasoning = events.back().kind == OutputEvent::Kind::kReasoning;
    if (in_reasoning) reasoning_tokens += static_cast<int64_t>(d.tokens.size());
    return events;
  }
};

}  // namespace

ApiError previous_response_not_found(const std::string& id) {
  return ApiError{404,
                  "Response with id '" + sanitize_utf8(id) +
                      "' not found: it was evicted from this server's response store or never stored (a response "
                      "is kept only when its request sent store: true, and only until the server restarts)",
                  "invalid_request_error", "previous_response_id", "previous_response_not_found"};
}

ResponsesRoutes::ResponsesRoutes(ModelPicker pick, ServerMetrics& metrics, ResponseStoreLimits limits)
    : pick_(std::move(pick)), metrics_(metrics), store_(limits.max_responses, limits.max_bytes) {}

void ResponsesRoutes::create(const httplib::Request& req, httplib::Response& res) {
  Turn turn;
  ResponsesRequest r;
  int64_t n_prompt = 0;
  ModelLease m;  // held until the answer is sent (the stream's end)
  try {
    r = parse_responses_request(req.body);
    m = pick_(r.model);
    json conversation = json::array();
    if (r.previous_response_id) {
      const auto prev = store_.get(*r.previous_response_id);
      if (!prev) throw ApiException(previous_response_not_found(*r.previous_response_id));
      conversation = prev->conversation;
    }
    for (const json& item : r.items) conversation.push_back(item);

    ChatInputs in;
    in.messages = conversation_messages(r.instructions, conversation);
    in.tools = r.tools;
    in.tool_choice = r.tool_choice;
    if (r.parallel_tool_calls) in.parallel_tool_calls = *r.parallel_tool_calls;
    if (r.enable_thinking) in.kwargs = json{{"enable_thinking", *r.enable_thinking}};
    in.reasoning_budget = r.reasoning_budget;
    PreparedChat prepared = prepare_chat_with_images(in, *m->chat, *m->settings, m->id);
    std::vector<int32_t> prompt = m->chat->encode(prepared.prompt);
    expand_image_tokens(prepared, prompt, *m->settings);
    if (prompt.empty()) throw ApiException(invalid_request("the prompt is empty (0 tokens)", "input"));

    // The context checks of the chat route: the prompt and max_output_tokens must fit.
    n_prompt = static_cast<int64_t>(prompt.size());
    const int64_t max_tokens = fit_max_tokens(*m->engine, n_prompt, r.max_output_tokens, "max_output_tokens", "input");

    engine::GenRequest g;
    g.prompt = std::move(prompt);
    g.images = std::move(prepared.prompt_images);
    g.max_tokens = static_cast<int32_t>(max_tokens);
    g.sampler = r.sampler;
    g.sampler.seed = std::random_device{}();
    g.speculative = r.speculative;
    g.reasoning = reasoning_limit(prepared, *m->settings, *m->tok);
    // tool_choice required / a named function: a grammar makes the answer a call with valid
    // arguments (it wins over text.format); text.format json_*: the answer follows the schema.
    std::optional<grammar::ConstraintSpec> spec = tool_constraint_spec(prepared.constraint);
    const bool for_tools = spec.has_value();
    if (!spec) spec = r.constraint;
    if (spec) {
      try {  // compiled now: a schema that cannot be enforced is a 400, never a queued request
        g.constraint = m->engine->compile_constraint(*spec);
      } catch (const Error& e) {
        throw ApiException(invalid_request(e.what(), for_tools ? "tools" : "text.format"));
      }
    }
    turn.channel = std::make_shared<engine::RequestChannel>();
    switch (m->engine->submit(std::move(g), turn.channel)) {
      case engine::ServeEngine::Admit::kOk:
        break;
      case engine::ServeEngine::Admit::kQueueFull:
        throw ApiException(server_overloaded(
            "the server is at capacity (--max-seqs running and --max-queue waiting); retry later"));
      case engine::ServeEngine::Admit::kTooLong:
        throw ApiException(context_length_exceeded(n_prompt, max_tokens, m->engine->n_ctx()));
      case engine::ServeEngine::Admit::kStopped:
        throw ApiException(engine_stopped(m->engine->stats().failure));
    }
    turn.parser = make_output_parser(prepared.output);
    turn.in_reasoning = prepared.output.starts_in_reasoning;
    turn.conversation = std::move(conversation);
  } catch (const ApiException& e) {
    metrics_.requests_rejected.inc();
    send_error(res, e.error());
    return;
  } catch (const Error& e) {
    metrics_.requests_rejected.inc();
    send_error(res, invalid_request(e.what()));
    return;
  }

  ResponsesContext ctx{make_response_id("resp_"), unix_time_now(), r.model.value_or(m->id), response_echo(r)};
  const std::string id = ctx.id;
  turn.out = std::make_shared<ResponsesStream>(std::move(ctx), r.stream);
  turn.store = r.store;
  auto watch = std::make_shared<ClientWatch>(req.remote_addr, req.remote_port);

  // The end of the response; the turn is kept for previous_response_id / GET when the
  // request asked.
  auto finish = [this, id](Turn& t, const engine::Final& fin) {
    std::string sse = t.out->finish(fin, std::min<int64_t>(t.reasoning_tokens, fin.completion_tokens));
    if (t.store) {
      StoredResponse kept;
      kept.response = dump_json(t.out->response());
      kept.conversation = std::move(t.conversation);
      for (json& item : canonical_items(t.out->output())) kept.conversation.push_back(std::move(item));
      store_.put(id, std::move(kept));
    }
    return sse;
  };

  if (!r.stream) {
    std::vector<OutputEvent> events;
    std::optional<engine::Final> fin;
    auto quiet_since = Clock::now();
    while (!fin) {
      std::vector<engine::Delta> ds;
      if (!wait_next(*m->engine, *turn.channel, *watch, ds, fin, quiet_since)) {
        send_error(res, server_error("the engine stopped"));
        return;
      }
      for (const auto& d : ds) {
        for (auto& e : turn.feed(d)) events.push_back(std::move(e));
      }
    }
    for (auto& e : turn.parser->finish()) events.push_back(std::move(e));
    if (!finish_reason(*fin)) {
      send_error(res, failed_final_error(*fin));
      return;
    }
    turn.out->start();
    turn.out->events(events);
    finish(turn, *fin);
    res.set_content(dump_json(turn.out->response()), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto shared = std::make_shared<Turn>(std::move(turn));
  res.set_chunked_content_provider(
      "text/event-stream",
      [m, shared, watch, finish](size_t, httplib::DataSink& sink) {
        Turn& t = *shared;
        auto last_write = Clock::now();
        auto write = [&](std::string_view s) {
          if (s.empty()) return true;
          last_write = Clock::now();
          if (sink.write(s.data(), s.size())) return true;
          t.channel->cancel();
          return false;
        };
        if (!write(t.out->start())) return false;
        auto quiet_since = Clock::now();
        for (;;) {
          std::vector<engine::Delta> ds;
          std::optional<engine::Final> fin;
          if (!wait_next(*m->engine, *t.channel, *watch, ds, fin, quiet_since)) {
            write(t.out->failed(server_error("the engine stopped")));
            sink.done();
            return true;
          }
          std::vector<OutputEvent> events;
          for (const auto& d : ds) {
            for (auto& e : t.feed(d)) events.push_back(std::move(e));
          }
          if (fin) {
            for (auto& e : t.parser->finish()) events.push_back(std::move(e));
            std::string tail = t.out->events(events);
            tail += finish_reason(*fin) ? finish(t, *fin) : t.out->failed(failed_final_error(*fin));
            write(tail);
            sink.done();
            return true;
          }
          if (!events.empty()) {
            if (!write(t.out->events(events))) return false;
          } else if (Clock::now() - last_write >= kKeepAliveEvery) {
            if (!write(kKeepAlive)) return false;
          }
        }
      },
      [shared](bool) { shared->channel->cancel(); });  // a stream that ends early frees its sequence
}

void ResponsesRoutes::retrieve(const std::string& id, httplib::Response& res) {
  const auto kept = store_.get(id);
  if (!kept) {
    send_error(res, ApiError{404,
                             "Response with id '" + sanitize_utf8(id) +
                                 "' not found (evicted from this server's response store, or never stored: send "
                                 "store: true)",
                             "invalid_request_error", "", "response_not_found"});
    return;
  }
  res.set_content(kept->response, "application/json");
}

void ResponsesRoutes::remove(const std::string& id, httplib::Response& res) {
  if (!store_.erase(id)) {
    send_error(res, ApiError{404, "Response with id '" + sanitize_utf8(id) + "' not found", "invalid_request_error",
                             "", "response_not_found"});
    return;
  }
  res.set_content(dump_json(json{{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace hearth::server

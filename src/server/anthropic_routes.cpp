// The Anthropic Messages routes of `hearth serve`; see anthropic_routes.h.
#include "server/anthropic_routes.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"
#include "server/client_socket.h"
#include "server/route_common.h"
#include "server/response_format.h"
#include "server/tool_constraint.h"

namespace hearth::server {

using json = nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;
// A stream with nothing to say for this long (a long prefill) gets a ping event, so
// clients and proxies see the connection alive.
constexpr auto kPingEvery = std::chrono::seconds(1);

// Anthropic's tool_choice, as the parser left it in OpenAI's shape ("auto" | "none" |
// "required" | {"type": "function", "function": {"name"}}; null: absent).
ToolChoice tool_choice_of(const json& v) {
  ToolChoice tc;
  if (v == "none") tc.mode = ToolChoice::Mode::kNone;
  if (v == "required") tc.mode = ToolChoice::Mode::kRequired;
  if (v.is_object()) {
    tc.mode = ToolChoice::Mode::kNamed;
    tc.name = v.at("function").at("name").get<std::string>();
  }
  return tc;
}

}  // namespace

bool is_anthropic_path(std::string_view path) {
  return path == "/v1/messages" || path.substr(0, 13) == "/v1/messages/" ||
         path.substr(0, 13) == "/v1/messages?";
}

void send_anthropic_error(httplib::Response& res, const ApiError& error) {
  const ApiError a = anthropic_error(error);
  res.status = a.status;
  if (a.status == 429 || a.status == 529) res.set_header("Retry-After", "1");
  res.set_content(anthropic_error_body(a), "application/json");
}

AnthropicRoutes::AnthropicRoutes(ModelPicker pick, ServerMetrics& metrics)
    : pick_(std::move(pick)), metrics_(metrics) {}

AnthropicRoutes::Prompt AnthropicRoutes::prepare(const ServedModel& m, const AnthropicRequest& r) {
  ChatInputs in;
  in.messages = r.messages;
  in.tools = r.tools;
  in.tool_choice = tool_choice_of(r.tool_choice);
  in.parallel_tool_calls = r.parallel_tool_calls;
  in.kwargs = r.chat_template_kwargs;
  if (r.thinking_budget) in.reasoning_budget = *r.thinking_budget;
  Prompt p;
  p.prepared = prepare_chat_with_images(in, *m.chat, *m.settings, m.id);
  p.output = p.prepared.output;
  if (!r.prefill.empty()) {  // the model continues the prefill: it may open or close <think>
    p.prepared.prompt += r.prefill;
    p.output.starts_in_reasoning =
        p.output.parse_reasoning && prompt_opens_reasoning(p.prepared.prompt);
  }
  p.tokens = m.chat->encode(p.prepared.prompt);
  expand_image_tokens(p.prepared, p.tokens, *m.settings);  // (count_tokens counts them too)
  if (p.tokens.empty())
    throw ApiException(invalid_request("the prompt is empty (0 tokens)", "messages"));
  return p;
}

void AnthropicRoutes::count_tokens(const httplib::Request& req, httplib::Response& res) {
  try {
    const AnthropicRequest r = parse_anthropic_request(req.body, AnthropicEndpoint::kCountTokens);
    const ModelLease m = pick_(r.model);
    const Prompt p = prepare(*m, r);
    res.set_content(dump_json(json{{"input_tokens", p.tokens.size()}}), "application/json");
  } catch (const ApiException& e) {
    metrics_.requests_rejected.inc();
    send_anthropic_error(res, e.error());
  } catch (const Error& e) {
    metrics_.requests_rejected.inc();
    send_anthropic_error(res, invalid_request(e.what()));
  }
}

void AnthropicRoutes::messages(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<engine::RequestChannel> channel;
  AnthropicRequest r;
  Prompt p;
  ModelLease m;  // held until the answer is sent (the stream's end)
  try {
    r = parse_anthropic_request(req.body, AnthropicEndpoint::kMessages);
    m = pick_(r.model);
    p = prepare(*m, r);
    // The prompt must leave room for one generated token; a max_tokens beyond the
    // context is cut to what is left (agents ask for more than a local context holds).
    const int64_t limit = std::min(m->engine->n_ctx(), m->engine->max_sequence_tokens());
    const auto n_prompt = static_cast<int64_t>(p.tokens.size());
    if (n_prompt >= limit) throw ApiException(prompt_too_long(n_prompt, limit - 1));
    engine::GenRequest g;
    g.prompt = p.tokens;
    g.images = p.prepared.prompt_images;
    g.max_tokens = static_cast<int32_t>(std::min<int64_t>(r.max_tokens, limit - n_prompt));
    g.sampler = r.sampler;
    g.sampler.seed = std::random_device{}();
    g.speculative = r.speculative;
    g.stop = r.stop_sequences;
    g.reasoning = reasoning_limit(p.prepared, *m->settings, *m->tok);
    // tool_choice any / tool: a grammar makes the answer a call with valid input;
    // output_config.format: the answer follows the schema. Compiled now (errors are 400s).
    std::optional<grammar::ConstraintSpec> spec = tool_constraint_spec(p.prepared.constraint);
    const bool for_tools = spec.has_value();
    if (!spec && !r.response_format.is_null()) spec = parse_response_format(r.response_format);
    if (spec) {
      try {
        g.constraint = m->engine->compile_constraint(*spec);
      } catch (const Error& e) {
        throw ApiException(invalid_request(e.what(), for_tools ? "tools" : "output_config.format"));
      }
    }
    channel = std::make_shared<engine::RequestChannel>();
    switch (m->engine->submit(std::move(g), channel)) {
      case engine::ServeEngine::Admit::kOk:
        break;
      case engine::ServeEngine::Admit::kQueueFull:
        throw ApiException(
            server_overloaded("the server is at capacity (--max-seqs running and --max-queue "
                              "waiting); retry later"));
      case engine::ServeEngine::Admit::kTooLong:
        throw ApiException(prompt_too_long(n_prompt, limit - 1));
      case engine::ServeEngine::Admit::kStopped:
        throw ApiException(engine_stopped(m->engine->stats().failure));
    }
  } catch (const ApiException& e) {
    metrics_.requests_rejected.inc();
    send_anthropic_error(res, e.error());
    return;
  } catch (const Error& e) {
    metrics_.requests_rejected.inc();
    send_anthropic_error(res, invalid_request(e.what()));
    return;
  }

  std::shared_ptr<OutputParser> parser = make_output_parser(p.output);
  AnthropicContext ctx{make_response_id("msg_"), r.model.value_or(m->id)};
  auto watch = std::make_shared<ClientWatch>(req.remote_addr, req.remote_port);

  if (!r.stream) {
    std::vector<OutputEvent> events;
    std::optional<engine::Final> fin;
    auto quiet_since = Clock::now();
    while (!fin) {
      std::vector<engine::Delta> ds;
      if (!wait_next(*m->engine, *channel, *watch, ds, fin, quiet_since)) {
        send_anthropic_error(res, server_error("the engine stopped"));
        return;
      }
      for (const auto& d : ds) {
        for (auto& e : parser->feed(d.text)) events.push_back(std::move(e));
      }
    }
    for (auto& e : parser->finish()) events.push_back(std::move(e));
    if (!anthropic_stop_reason(*fin, false)) {
      send_anthropic_error(res, failed_final_error(*fin));
      return;
    }
    res.set_content(anthropic_message(ctx, events, *fin), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto sse = std::make_shared<AnthropicStream>(ctx);
  const auto n_prompt = static_cast<int64_t>(p.tokens.size());
  res.set_chunked_content_provider(
      "text/event-stream",
      [m, channel, watch, parser, sse, n_prompt](size_t, httplib::DataSink& sink) {
        auto last_write = Clock::now();
        auto write = [&](const std::string& s) {
          if (s.empty()) return true;
          last_write = Clock::now();
          if (sink.write(s.data(), s.size())) return true;
          channel->cancel();
          return false;
        };
        // message_start waits for the admission, which knows the prefix-cache hit, so its
        // usage agrees with message_delta's (a queued request sends nothing before it).
        auto quiet_since = Clock::now();
        std::vector<engine::Delta> ds;
        std::optional<engine::Final> fin;
        bool alive = true;
        while (alive && !channel->cached_tokens() && ds.empty() && !fin) {
          alive = wait_next(*m->engine, *channel, *watch, ds, fin, quiet_since);
        }
        const int32_t cached = channel->cached_tokens().value_or(fin ? fin->cached_tokens : 0);
        if (!write(sse->start(n_prompt, cached)) || !write(anthropic_ping())) return false;
        for (bool first = true;; first = false) {
          if (!first) {
            ds.clear();
            fin.reset();
            alive = wait_next(*m->engine, *channel, *watch, ds, fin, quiet_since);
          }
          if (!alive) {
            write(sse->error(server_error("the engine stopped")));
            sink.done();
            return true;
          }
          std::vector<OutputEvent> events;
          for (const auto& d : ds) {
            for (auto& e : parser->feed(d.text)) events.push_back(std::move(e));
          }
          if (fin) {
            for (auto& e : parser->finish()) events.push_back(std::move(e));
            std::string tail =
                sse->events(events);  // (in this order: finish closes the last block)
            tail += anthropic_stop_reason(*fin, false) ? sse->finish(*fin)
                                                       : sse->error(failed_final_error(*fin));
            write(tail);
            sink.done();
            return true;
          }
          if (!events.empty()) {
            if (!write(sse->events(events))) return false;
          } else if (Clock::now() - last_write >= kPingEvery) {
            if (!write(anthropic_ping())) return false;
          }
        }
      },
      [channel](bool) { channel->cancel(); });  // a stream that ends early frees its sequence
}

}  // namespace hearth::server

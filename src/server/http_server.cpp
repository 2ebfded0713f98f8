#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "core/tune.h"
#include "server/anthropic_routes.h"
#include "server/client_socket.h"
#include "server/engine_metrics_sync.h"
#include "server/guarded_http.h"
#include "server/openai_protocol.h"
#include "server/route_common.h"
#include "server/responses_routes.h"
#include "server/status_route.h"
#include "server/ui_page.h"
#include "server/tool_constraint.h"

namespace hearth::server {
namespace {

using Clock = std::chrono::steady_clock;

// engine.timing=each: where a request's time to its first token goes outside the
// engine (parsing, template and tokenizer before submit; the output parser and the
// stream after the first token), printed per request.
bool request_timing() { return tune::get(tune::kEngineTiming) == 2; }
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
// Connections the kernel queues before they are accepted (a burst of benchmark clients).
constexpr int kListenBacklog = 1024;

// Equal strings, in time that does not depend on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_body(e), "application/json");
}

}  // namespace

struct HttpServer::Impl {
  ModelRegistry& models;
  ServerMetrics& metrics;
  HttpOptions opt;
  std::vector<ModelMetrics*> model_metrics;  // router mode: one per model
  StatusRoute status_route{models, metrics, model_metrics};
  AnthropicRoutes anthropic{[this](const std::optional<std::string>& name) { return pick(name); }, metrics};
  ResponsesRoutes responses{[this](const std::optional<std::string>& name) { return pick(name); }, metrics};
  GuardedServer svr{limits_of(opt), [](const std::string& path, int status, const std::string& message) {
                       ApiError e{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", ""};
                       if (status == 413) e.code = "request_too_large";
                       return is_anthropic_path(path) ? anthropic_error_body(e) : error_body(e);
                     },
                     [this](int status, const std::string& reason, const std::string& peer) {
                       metrics.requests_rejected.inc();
                       log_line("hearth: connection " + peer + " refused (" + std::to_string(status) + "): " + reason);
                     }};
  std::mutex log_mu;
  FILE* log = stderr;
  int64_t created = unix_time_now();
  EngineMetricsSync engine_sync;  // the engines' counters into /metrics
  std::mutex names_mu;
  std::set<std::string> names_seen;  // requested model names already logged
  std::atomic<bool> draining{false};  // drain(): no new requests, /health/ready 503

  Impl(ModelRegistry& r, ServerMetrics& m, HttpOptions o, std::vector<ModelMetrics*> mm)
      : models(r), metrics(m), opt(std::move(o)), model_metrics(std::move(mm)) {
    if (!opt.log_file.empty()) {
      log = std::fopen(opt.log_file.c_str(), "a");
      if (log == nullptr) fail(ErrorKind::kIo, "serve", "cannot open the log file " + opt.log_file);
    }
    routes();
  }
  ~Impl() {
    if (log != stderr && log != nullptr) std::fclose(log);
  }

  static HttpLimits limits_of(const HttpOptions& o) {
    HttpLimits l;
    l.max_header_bytes = o.max_header_bytes;
    l.max_body_bytes = o.max_body_bytes;
    l.request_timeout_s = o.request_timeout_s;
    l.max_connections = o.max_connections;
    return l;
  }

  void log_line(const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu);
    std::fprintf(log, "%s\n", line.c_str());
    std::fflush(log);
  }

  // Errors of the Anthropic routes take Anthropic's shape.
  static void reply_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
    is_anthropic_path(req.path) ? send_anthropic_error(res, e) : send_error(res, e);
  }

  // `Authorization: Bearer KEY` or `x-api-key: KEY` (Anthropic's clients), on every route.
  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (opt.api_key.empty()) return true;
    const std::string got = req.get_header_value("Authorization"), got_x = req.get_header_value("x-api-key");
    if (constant_time_equal(got, "Bearer " + opt.api_key) || constant_time_equal(got_x, opt.api_key)) return true;
    metrics.requests_rejected.inc();
    reply_error(req, res,
                authentication_failed(got.empty() && got_x.empty()
                                          ? "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                                          : "invalid API key"));
    return false;
  }

  void routes() {
    svr.set_payload_max_length(opt.max_body_bytes);
    svr.set_keep_alive_max_count(1000);
    svr.set_read_timeout(30, 0);
    svr.set_write_timeout(30, 0);
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      log_line(req.method + " " + req.path + " " + std::to_string(res.status) + " " + req.remote_addr + ":" +
               std::to_string(req.remote_port));
    });
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        metrics.requests_rejected.inc();
        // httplib drops an oversized body unread: its size is what the client announced.
        size_t announced = req.body.size();
        try {
          announced = static_cast<size_t>(std::stoull(req.get_header_value("Content-Length")));
        } catch (const std::exception&) {
        }
        reply_error(req, res, payload_too_large(announced, opt.max_body_bytes));
      } else if (res.status == 404) {
        reply_error(req, res, ApiError{404, "no route for " + req.method + " " + req.path, "invalid_request_error", "", ""});
      } else {
        reply_error(req, res, ApiError{res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error", "", ""});
      }
    });
    svr.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      reply_error(req, res, server_error(what));
    });

    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      // 503 once the engine loop is gone; after an engine fault the body says why.
      const engine::EngineStats s = models.total_stats();
      res.status = s.running_loop ? 200 : 503;
      nlohmann::ordered_json body = {{"status", s.running_loop ? "ok" : "unavailable"}};
      if (!s.running_loop && !s.failure.empty()) {
        body["status"] = "error";
        body["error"] = s.failure;
      }
      res.set_content(dump_json(body), "application/json");
    });
    // Readiness, apart from liveness (/health): 200 only while new requests are taken. A
    // draining server (SIGTERM under --drain-seconds) is alive, finishing its requests in
    // flight, but not ready; a load balancer's health check takes it out of rotation. No key
    // needed, as for /health. (While the model loads the port is not open yet.)
    svr.Get("/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      const engine::EngineStats s = models.total_stats();
      const bool drain = draining.load();
      const char* status = drain ? "draining" : s.running_loop ? "ready" : s.failure.empty() ? "unavailable" : "error";
      res.status = s.running_loop && !drain ? 200 : 503;
      nlohmann::ordered_json body = {{"status", status}, {"in_flight", in_flight()}};
      if (!s.running_loop && !s.failure.empty()) body["error"] = s.failure;
      res.set_content(dump_json(body), "application/json");
    });
    // Claude Code probes `HEAD /api/hello` at start (a reachability check; httplib answers
    // HEAD from the GET route). No key needed, as for /health.
    svr.Get("/api/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { list_models(req, res); });
    // llama-server's router names: GET /models, POST /models/load and /models/unload.
    svr.Get("/models", [this](const httplib::Request& req, httplib::Response& res) { list_models(req, res); });
    svr.Post("/models/load", [this](const httplib::Request& req, httplib::Response& res) { admin(req, res, true); });
    svr.Post("/models/unload", [this](const httplib::Request& req, httplib::Response& res) { admin(req, res, false); });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      refresh_gauges();
      res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    // GET /v1/status[?window=S]: the live view's numbers (server/status_route.h), from the
    // same sources as /metrics after the same refresh.
    svr.Get("/v1/status", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return;
      double window = 10;
      if (req.has_param("window")) {
        const std::string w = req.get_param_value("window");
        try {
          size_t used = 0;
          window = std::stod(w, &used);
          if (used != w.size() || !(window >= 1 && window <= StatusRoute::kMaxWindowS)) throw std::invalid_argument(w);
        } catch (const std::exception&) {
          send_error(res, invalid_request("'window' must be a number of seconds in [1, 60], got '" +
                                              sanitize_utf8(w) + "'",
                                          "window"));
          return;
        }
      }
      refresh_gauges();
      res.set_header("Cache-Control", "no-store");
      res.set_content(dump_json(status_route.status(window)), "application/json");
    });
    if (opt.ui) add_ui_routes(svr);
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, true);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, false);
    });
    svr.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res)) anthropic.messages(req, res);
    });
    svr.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res)) anthropic.count_tokens(req, res);
    });
    svr.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res)) responses.create(req, res);
    });
    svr.Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res)) responses.retrieve(req.matches[1].str(), res);
    });
    svr.Delete(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (authorized(req, res)) responses.remove(req.matches[1].str(), res);
    });
    svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
    svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
  }

  // POST /tokenize (llama.cpp's shape): {"content": str, "add_special"?: bool,
  // "with_pieces"?: bool} -> {"tokens": [id, ...]} (with_pieces: [{"id", "piece"}]);
  // or {"messages": [...], "tools"?: [...], ...chat fields}: the rendered chat prompt's tokens.
  void tokenize(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    try {
      const nlohmann::ordered_json body = parse_json_object(req.body);
      const ModelLease m = pick(opt.router ? model_field(body) : std::nullopt);
      const tokenizer::Tokenizer& tok = *m->tok;
      bool with_pieces = false;
      if (auto it = body.find("with_pieces"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) throw ApiException(invalid_request("'with_pieces' must be a boolean", "with_pieces"));
        with_pieces = it->get<bool>();
      }
      std::vector<int32_t> ids;
      if (body.contains("messages")) {
        const ParsedRequest pr = parse_chat_request(req.body);
        PreparedChat prepared = prepare_chat_with_images(chat_inputs(pr), *m->chat, *m->settings, m->id);
        ids = m->chat->encode(prepared.prompt);
        expand_image_tokens(prepared, ids, *m->settings);  // (images count as their tokens)
      } else {
        auto it = body.find("content");
        if (it == body.end() || !it->is_string()) {
          throw ApiException(invalid_request("'content' (a string) or 'messages' is required", "content"));
        }
        tokenizer::EncodeOptions enc;
        enc.parse_special = true;
        enc.add_special = false;
        if (auto a = body.find("add_special"); a != body.end() && !a->is_null()) {
          if (!a->is_boolean()) throw ApiException(invalid_request("'add_special' must be a boolean", "add_special"));
          enc.add_special = a->get<bool>();
        }
        ids = tok.encode(it->get<std::string>(), enc);
      }
      nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
      for (int32_t id : ids) {
        if (!with_pieces) {
          tokens.push_back(id);
          continue;
        }
        const std::string piece = tok.token_to_piece(id);
        nlohmann::ordered_json p = {{"id", id}};
        if (sanitize_utf8(piece) == piece) {
          p["piece"] = piece;
        } else {  // part of a character: its bytes, as llama.cpp sends them
          nlohmann::ordered_json bytes = nlohmann::ordered_json::array();
          for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
          p["piece"] = std::move(bytes);
        }
        tokens.push_back(std::move(p));
      }
      res.set_content(dump_json(nlohmann::ordered_json{{"tokens", std::move(tokens)}}), "application/json");
    } catch (const ApiException& e) {
      send_error(res, e.error());
    } catch (const Error& e) {
      send_error(res, invalid_request(e.what()));
    }
  }

  // POST /detokenize: {"tokens": [id, ...]} -> {"content": str}.
  void detokenize(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    try {
      const nlohmann::ordered_json body = parse_json_object(req.body);
      const ModelLease m = pick(opt.router ? model_field(body) : std::nullopt);
      const tokenizer::Tokenizer& tok = *m->tok;
      auto it = body.find("tokens");
      if (it == body.end() || !it->is_array()) {
        throw ApiException(invalid_request("'tokens' (an array of token ids) is required", "tokens"));
      }
      const auto n_vocab = static_cast<int64_t>(tok.n_tokens());
      std::string text;
      for (size_t i = 0; i < it->size(); ++i) {
        const auto& t = (*it)[i];
        const std::string path = "tokens[" + std::to_string(i) + "]";
        if (!t.is_number_integer()) throw ApiException(invalid_request("'" + path + "' must be a token id (an integer)", path));
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id >= n_vocab) {
          throw ApiException(invalid_request("'" + path + "' is token id " + std::to_string(id) +
                                                 ", outside the vocabulary [0, " + std::to_string(n_vocab) + ")",
                                             path));
        }
        text += tok.token_to_piece(static_cast<int32_t>(id));
      }
      res.set_content(dump_json(nlohmann::ordered_json{{"content", sanitize_utf8(text)}}), "application/json");
    } catch (const ApiException& e) {
      send_error(res, e.error());
    }
  }

  void refresh_gauges() {
    engine_sync.apply(metrics, models.total_stats());
    if (model_metrics.empty()) return;
    const std::vector<ModelStatus> st = models.status();
    for (size_t i = 0; i < st.size() && i < model_metrics.size(); ++i) model_metrics[i]->update(st[i]);
  }

  bool model_known(const std::string& name) const {
    if (name == opt.model_id) return true;
    for (const auto* list : {&opt.model_aliases, &opt.aliases}) {
      for (const auto& a : *list) {
        if (name == a) return true;
      }
    }
    return false;
  }

  // One model serves every name (agents send their own configured one) unless
  // --strict-model-names; each new name is logged once.
  void check_model(const std::string& name) {
    if (model_known(name)) return;
    if (opt.strict_model_names) throw ApiException(model_not_found(name));
    std::lock_guard<std::mutex> lock(names_mu);
    if (names_seen.size() < 1000 && names_seen.insert(name).second) {
      log_line("hearth: requests for model '" + sanitize_utf8(name) + "' are served by " + opt.model_id);
    }
  }

  // A request's "model" field when it is a string (else absent; the parsers check types).
  static std::optional<std::string> model_field(const nlohmann::ordered_json& body) {
    auto it = body.find("model");
    if (it == body.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  }

  // The model a request names, leased for the request. One model (-m): it serves every
  // name (check_model). Several: the name or alias picks one; an absent name takes the
  // first; an unknown one is a 404 listing the names (when only one is configured it
  // serves every name, as with -m).
  ModelLease pick(const std::optional<std::string>& name) {
    if (draining.load()) {
      // 503 on every protocol (the Anthropic routes keep it: anthropic_error), which a load
      // balancer retries on another replica.
      throw ApiException(ApiError{503,
                                  "the server is draining (shutting down): it finishes the requests in flight and "
                                  "takes no new ones; send this request to another replica",
                                  "server_error", "", "server_draining"});
    }
    size_t index = 0;
    if (name && !opt.router) {
      check_model(*name);
    } else if (name) {
      if (auto i = models.find(*name)) {
        index = *i;
      } else if (models.size() == 1 && !opt.strict_model_names) {
        std::lock_guard<std::mutex> lock(names_mu);
        if (names_seen.size() < 1000 && names_seen.insert(*name).second) {
          log_line("hearth: requests for model '" + sanitize_utf8(*name) + "' are served by " + models.spec(0).name);
        }
      } else {
        ApiError e = model_not_found(sanitize_utf8(*name));
        e.message += "; this server has: " + models.names();
        throw ApiException(e);
      }
    }
    return models.acquire(index);
  }

  int in_flight() const {
    int n = 0;
    for (const ModelStatus& st : models.status()) n += st.in_flight;
    return n;
  }

  // GET /v1/models (and /models). One model (-m): its id and --alias names, as before.
  // Several: every model with its state ("status": loaded, loading, unloaded,
  // unloading), pinned flag and aliases; its context length while loaded. A loaded model's
  // "capabilities" list holds "vision" when it takes images (as Ollama's /api/show says).
  void list_models(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const std::vector<ModelStatus> st = models.status();
    auto entry = [&](const std::string& id, int64_t n_ctx, const ModelStatus* s = nullptr) {
      nlohmann::ordered_json e{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "hearth"}};
      if (n_ctx > 0) {
        e["context_length"] = n_ctx;
        e["max_model_len"] = n_ctx;
      }
      if (s != nullptr && s->state == ModelState::kLoaded) {
        e["capabilities"] = s->vision ? nlohmann::ordered_json{"completion", "vision"} : nlohmann::ordered_json{"completion"};
      }
      return e;
    };
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    if (!opt.router) {
      const int64_t n_ctx = st.front().n_ctx;
      nlohmann::ordered_json main = entry(opt.model_id, n_ctx, &st.front());
      main["aliases"] = opt.aliases;
      data.push_back(std::move(main));
      for (const auto& a : opt.aliases) {
        nlohmann::ordered_json e = entry(a, n_ctx);
        e["alias_of"] = opt.model_id;
        data.push_back(std::move(e));
      }
    } else {
      for (const ModelStatus& s : st) {
        nlohmann::ordered_json e = entry(s.name, s.n_ctx, &s);
        e["status"] = model_state_name(s.state);
        e["pinned"] = s.pinned;
        e["aliases"] = s.aliases;
        e["in_flight"] = s.in_flight;
        if (s.measured) e["memory_bytes"] = s.memory_bytes;
        if (!s.error.empty()) e["error"] = s.error;
        data.push_back(std::move(e));
      }
      for (const ModelStatus& s : st) {
        for (const auto& a : s.aliases) {
          nlohmann::ordered_json e = entry(a, s.n_ctx);
          e["status"] = model_state_name(s.state);
          e["alias_of"] = s.name;
          data.push_back(std::move(e));
        }
      }
    }
    res.set_content(dump_json(nlohmann::ordered_json{{"object", "list"}, {"data", std::move(data)}}),
                    "application/json");
  }

  // POST /models/load and /models/unload, {"model": NAME}: load waits (bounded) until the
  // model is loaded; unload waits for its requests in flight, then frees it.
  void admin(const httplib::Request& req, httplib::Response& res, bool load) {
    if (!authorized(req, res)) return;
    try {
      const nlohmann::ordered_json body = parse_json_object(req.body);
      auto it = body.find("model");
      if (it == body.end() || !it->is_string()) {
        throw ApiException(invalid_request("'model' (a model name) is required", "model"));
      }
      const std::string name = it->get<std::string>();
      const std::optional<size_t> index = models.find(name);
      if (!index && !(models.size() == 1 && !opt.router && model_known(name))) {
        ApiError e = model_not_found(sanitize_utf8(name));
        e.message += "; this server has: " + models.names();
        throw ApiException(e);
      }
      const size_t i = index.value_or(0);
      bool changed = true;
      if (load) {
        changed = models.state(i) != ModelState::kLoaded;
        models.load(i);
      } else {
        changed = models.unload(i);
      }
      res.set_content(dump_json(nlohmann::ordered_json{{"success", true},
                                                       {"model", models.spec(i).name},
                                                       {"status", model_state_name(models.state(i))},
                                                       {"changed", changed}}),
                      "application/json");
    } catch (const ApiException& e) {
      send_error(res, e.error());
    }
  }

  static std::vector<int32_t> prompt_tokens(const ServedModel& m, const ParsedRequest& pr, PreparedChat& prepared) {
    const tokenizer::Tokenizer& tok = *m.tok;
    if (pr.chat) {
      prepared = prepare_chat_with_images(chat_inputs(pr), *m.chat, *m.settings, m.id);
      std::vector<int32_t> tokens = m.chat->encode(prepared.prompt);
      expand_image_tokens(prepared, tokens, *m.settings);
      return tokens;
    }
    if (pr.prompt_is_tokens) {
      const auto n_vocab = static_cast<int64_t>(tok.n_tokens());
      for (size_t i = 0; i < pr.prompt_tokens.size(); ++i) {
        if (pr.prompt_tokens[i] < 0 || pr.prompt_tokens[i] >= n_vocab) {
          throw ApiException(invalid_request("'prompt[" + std::to_string(i) + "]' is token id " +
                                                 std::to_string(pr.prompt_tokens[i]) + ", outside the vocabulary [0, " +
                                                 std::to_string(n_vocab) + ")",
                                             "prompt"));
        }
      }
      return pr.prompt_tokens;
    }
    tokenizer::EncodeOptions enc;
    enc.parse_special = true;
    return tok.encode(pr.prompt_text, enc);
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    const auto t_in = Clock::now();
    if (!authorized(req, res)) return;
    std::shared_ptr<engine::RequestChannel> channel;
    ResponseContext ctx;
    ParsedRequest pr;
    PreparedChat prepared;
    ModelLease m;  // held until the answer is sent (the stream's end)
    try {
      pr = is_chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
      m = pick(pr.model);
      engine::ServeEngine& engine = *m->engine;
      const auto t_prompt = Clock::now();
      std::vector<int32_t> prompt = prompt_tokens(*m, pr, prepared);
      const double prompt_ms = ms_since(t_prompt);
      if (prompt.empty()) throw ApiException(invalid_request("the prompt is empty (0 tokens)", is_chat ? "messages" : "prompt"));
      const int64_t n_ctx = engine.n_ctx();
      const auto n_prompt = static_cast<int64_t>(prompt.size());
      const int64_t max_tokens = fit_max_tokens(engine, n_prompt, pr.max_tokens, "max_tokens", "messages");
      engine::GenRequest g;
      g.prompt = std::move(prompt);
      g.images = std::move(prepared.prompt_images);
      g.max_tokens = static_cast<int32_t>(max_tokens);
      g.sampler = pr.sampler;
      g.sampler.seed = pr.seed ? *pr.seed : std::random_device{}();
      g.stop = pr.stop;
      g.top_logprobs = pr.engine_top_logprobs();
      g.speculative = pr.speculative;
      // tool_choice "required" / a named function is enforced by a grammar (it wins over a
      // response_format: the answer is then a tool call).
      std::optional<grammar::ConstraintSpec> tool_spec;
      if (is_chat) tool_spec = tool_constraint_spec(prepared.constraint);
      if (tool_spec || pr.constraint) {
        try {  // compiled now: a schema xgrammar cannot enforce is a 400, never a queued request
          g.constraint = engine.compile_constraint(tool_spec ? *tool_spec : *pr.constraint);
        } catch (const Error& e) {
          throw ApiException(invalid_request(e.what(), tool_spec ? "tools" : "response_format"));
        }
      }
      if (is_chat) g.reasoning = reasoning_limit(prepared, *m->settings, *m->tok);
      channel = std::make_shared<engine::RequestChannel>();
      if (request_timing()) {
        std::fprintf(stderr, "hearth: request prepared in %.2f ms (template and tokenizer %.2f ms, %zu prompt tokens)\n",
                     ms_since(t_in), prompt_ms, g.prompt.size());
      }
      switch (engine.submit(std::move(g), channel)) {
        case engine::ServeEngine::Admit::kOk:
          break;
        case engine::ServeEngine::Admit::kQueueFull:
          throw ApiException(server_overloaded("the server is at capacity (--max-seqs running and --max-queue "
                                               "waiting); retry later"));
        case engine::ServeEngine::Admit::kTooLong:
          throw ApiException(context_length_exceeded(n_prompt, max_tokens, n_ctx));
        case engine::ServeEngine::Admit::kStopped:
          throw ApiException(engine_stopped(engine.stats().failure));
      }
    } catch (const ApiException& e) {
      metrics.requests_rejected.inc();
      send_error(res, e.error());
      return;
    } catch (const Error& e) {
      metrics.requests_rejected.inc();
      send_error(res, invalid_request(e.what()));
      return;
    }
    ctx.id = make_response_id(is_chat ? "chatcmpl-" : "cmpl-");
    ctx.created = unix_time_now();
    ctx.model = pr.model.value_or(m->id);
    ctx.logprobs = pr.logprobs;
    ctx.include_usage = pr.include_usage;
    ctx.token_text = [m](int32_t id) { return m->tok->token_to_piece(id); };
    auto watch = std::make_shared<ClientWatch>(req.remote_addr, req.remote_port);
    std::shared_ptr<OutputParser> parser;
    if (is_chat) parser = make_output_parser(prepared.output);
    if (pr.stream) {
      stream(res, m, is_chat, std::move(channel), std::move(ctx), std::move(watch), std::move(parser));
    } else {
      whole(res, *m->engine, is_chat, *channel, ctx, *watch, parser.get());
    }
  }

  static void whole(httplib::Response& res, engine::ServeEngine& engine, bool is_chat, engine::RequestChannel& ch,
                    const ResponseContext& ctx, ClientWatch& watch, OutputParser* parser) {
    std::string text;
    std::vector<engine::TokenOut> tokens;
    std::optional<engine::Final> fin;
    auto quiet_since = Clock::now();
    while (!fin) {
      std::vector<engine::Delta> ds;
      if (!wait_next(engine, ch, watch, ds, fin, quiet_since)) {
        send_error(res, server_error("the engine stopped"));
        return;
      }
      for (auto& d : ds) {
        text += d.text;
        for (auto& t : d.tokens) tokens.push_back(std::move(t));
      }
    }
    if (!finish_reason(*fin)) {
      send_error(res, failed_final_error(*fin));
      return;
    }
    if (!is_chat) {
      res.set_content(text_completion(ctx, text, tokens, *fin), "application/json");
      return;
    }
    std::vector<OutputEvent> events = parser->feed(text);
    for (auto& e : parser->finish()) events.push_back(std::move(e));
    res.set_content(chat_completion(ctx, fold_events(events), tokens, *fin), "application/json");
  }

  static void stream(httplib::Response& res, ModelLease m, bool is_chat, std::shared_ptr<engine::RequestChannel> ch,
                     ResponseContext ctx, std::shared_ptr<ClientWatch> watch, std::shared_ptr<OutputParser> parser) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto context = std::make_shared<ResponseContext>(std::move(ctx));
    res.set_chunked_content_provider(
        "text/event-stream",
        [m, is_chat, ch, context, watch, parser](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (is_chat && !write(sse_data(chat_chunk_role(*context)))) {
            ch->cancel();
            return false;
          }
          size_t text_offset = 0;
          bool had_calls = false, first_written = false;
          auto quiet_since = Clock::now();
          for (;;) {
            std::vector<engine::Delta> ds;
            std::optional<engine::Final> fin;
            if (!wait_next(*m->engine, *ch, *watch, ds, fin, quiet_since)) {
              write(sse_data(error_body(server_error("the engine stopped"))));
              write(sse_done());
              sink.done();
              return true;
            }
            for (const auto& d : ds) {
              if (is_chat) {
                std::vector<OutputEvent> events = parser->feed(d.text);
                if (request_timing() && !first_written && !events.empty()) {
                  first_written = true;
                  std::fprintf(stderr, "hearth: first streamed event %.2f ms after submit\n", ms_since(ch->created));
                }
                for (const auto& e : events) had_calls = had_calls || e.kind == OutputEvent::Kind::kToolCallBegin;
                for (const std::string& chunk : chat_chunks_events(*context, events, d.tokens)) {
                  if (!write(sse_data(chunk))) {
                    ch->cancel();
                    return false;
                  }
                }
                continue;
              }
              if (d.text.empty() && !(context->logprobs && !d.tokens.empty())) continue;
              if (!write(sse_data(text_chunk_delta(*context, d, text_offset)))) {
                ch->cancel();
                return false;
              }
            }
            if (fin) {
              if (finish_reason(*fin)) {
                if (is_chat) {
                  std::vector<OutputEvent> events = parser->finish();
                  for (const auto& e : events) had_calls = had_calls || e.kind == OutputEvent::Kind::kToolCallBegin;
                  for (const std::string& chunk : chat_chunks_events(*context, events, {})) write(sse_data(chunk));
                }
                write(sse_data(is_chat ? chat_chunk_finish(*context, *fin, had_calls)
                                       : text_chunk_finish(*context, *fin)));
                if (context->include_usage) {
                  write(sse_data(is_chat ? chat_chunk_usage(*context, *fin) : text_chunk_usage(*context, *fin)));
                }
              } else {
                write(sse_data(error_body(final_error(*fin))));
              }
              write(sse_done());
              sink.done();
              return true;
            }
          }
        },
        [ch](bool) { ch->cancel(); });  // a stream that ends early frees its sequence
  }
};

HttpServer::HttpServer(ModelRegistry& models, ServerMetrics& metrics, HttpOptions options,
                       std::vector<ModelMetrics*> model_metrics)
    : impl_(std::make_unique<Impl>(models, metrics, std::move(options), std::move(model_metrics))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& m = *impl_;
  if (m.opt.port == 0) {
    const int port = m.svr.bind_to_any_port(m.opt.host);
    if (port <= 0) fail(ErrorKind::kIo, "serve", "cannot bind to " + m.opt.host + " (any port)");
    m.opt.port = port;
  } else if (!m.svr.bind_to_port(m.opt.host, m.opt.port)) {
    fail(ErrorKind::kIo, "serve",
         "cannot listen on " + m.opt.host + ":" + std::to_string(m.opt.port) +
             " (address in use or not valid; pick another with --host/--port)");
  }
  m.svr.set_backlog(kListenBacklog);
  return m.opt.port;
}

void HttpServer::serve() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

void HttpServer::drain() { impl_->draining.store(true); }

int HttpServer::in_flight() const { return impl_->in_flight(); }

}  // namespace hearth::server

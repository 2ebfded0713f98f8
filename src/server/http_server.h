// The HTTP face of `hearth serve` (cpp-httplib): routes, API-key check, request
// parsing and prompt building on the HTTP threads, SSE streaming of the engine's
// deltas, /health (liveness), /health/ready (readiness), /v1/models, /metrics, /v1/status, the web page (server/ui_page.h)
// and the model admin routes (/models/load, /models/unload). Only GenRequest / Delta / Final cross
// to and from the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/chat_prompt.h"
#include "engine/serve_engine.h"
#include "server/chat_request.h"
#include "server/metrics.h"
#include "server/model_metrics.h"
#include "server/model_registry.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                 // empty: no authentication
  std::string model_id;                // the id /v1/models reports
  std::vector<std::string> model_aliases;  // other names accepted in "model" (file names)
  std::vector<std::string> aliases;        // --alias: listed by /v1/models too
  bool strict_model_names = false;         // unknown "model" -> 404 (default: served, logged once)
  // Several models (--model NAME=REF, --models-dir, --config): requests pick theirs by
  // name or alias, /v1/models lists each with its state, an unknown name is a 404 when
  // more than one is configured. Off (-m): the one model answers as model_id above.
  bool router = false;
  size_t max_body_bytes = 16u << 20;  // --max-body-bytes: larger bodies get 413
  size_t max_header_bytes = 64u << 10; // --max-header-bytes: request line + headers (431)
  double request_timeout_s = 30;       // --request-timeout: first to last byte of a request (408)
  int max_connections = 256;           // --max-connections: open at once; more get 503
  std::string log_file;                // empty: request log on stderr
  bool ui = true;                      // GET / and /ui: the web page (--no-ui: off, 404)
};

class HttpServer {
 public:
  // `models`: what requests are served by (one model without `router`); `model_metrics`:
  // the per-model series of /metrics (router mode; empty otherwise), one per model.
  HttpServer(ModelRegistry& models, ServerMetrics& metrics, HttpOptions options,
             std::vector<ModelMetrics*> model_metrics = {});
  ~HttpServer();
  // Binds (throws Error when the address is taken or invalid); returns the bound port.
  int bind();
  // Serves until stop(); blocks.
  void serve();
  void stop();
  // Graceful drain (SIGTERM under --drain-seconds): from now on every request that needs a
  // model is answered 503 (code "server_draining", Retry-After) and GET /health/ready 503, so
  // a load balancer sends its traffic elsewhere, while the requests in flight go on.
  void drain();
  // Requests holding a model now: queued, running, or still sending their answer.
  int in_flight() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth::server

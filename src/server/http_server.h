// The HTTP face of `hearth serve` (cpp-httplib): routes, API-key check, request
// parsing and prompt building on the HTTP threads, SSE streaming of the engine's
// deltas, /health, /v1/models and /metrics. Only GenRequest / Delta / Final cross
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
  ChatSettings chat;                       // tools / reasoning / template kwargs
  size_t max_body_bytes = 16u << 20;  // --max-body-bytes: larger bodies get 413
  size_t max_header_bytes = 64u << 10; // --max-header-bytes: request line + headers (431)
  double request_timeout_s = 30;       // --request-timeout: first to last byte of a request (408)
  int max_connections = 256;           // --max-connections: open at once; more get 503
  std::string log_file;                // empty: request log on stderr
};

class HttpServer {
 public:
  HttpServer(engine::ServeEngine& engine, const tokenizer::Tokenizer& tok, const engine::ChatPrompt& chat,
             ServerMetrics& metrics, HttpOptions options);
  ~HttpServer();
  // Binds (throws Error when the address is taken or invalid); returns the bound port.
  int bind();
  // Serves until stop(); blocks.
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The engine's hooks feeding ServerMetrics.
class MetricsObserver final : public engine::EngineObserver {
 public:
  explicit MetricsObserver(ServerMetrics& m) : m_(m) {}
  void on_step(int32_t n_seqs, int32_t n_tokens, double seconds) override;
  void on_first_token(double ttft_seconds) override;
  void on_token_interval(double seconds) override;
  void on_finish(const engine::Final& f) override;

 private:
  ServerMetrics& m_;
};

}  // namespace hearth::server

// Request-framing limits around cpp-httplib (Debian's 0.11.4).
//
// Why a wrapper and not the library's own settings: 0.11.4's read timeout is per
// recv(), so a client that trickles one byte a second (slowloris) or never finishes
// its body holds an HTTP thread forever; it caps no header block (only each line) and
// no chunked body (a chunk size of 0xFFFFFFFF is appended to the body as it comes);
// it accepts malformed chunk framing; and its thread pool queues connections without
// bound. Rather than replace the HTTP layer (every route, SSE stream and error handler
// is written against httplib's Request/Response), GuardedServer keeps httplib's
// parser and router and owns the layer below them, through the library's public
// extension points: it overrides the per-connection entry (process_and_close_socket,
// a virtual the library's own SSLServer overrides), serves each connection through
// its own httplib::Stream (GuardedStream) that enforces a whole-request deadline and
// the size and framing limits on the bytes as httplib reads them, and feeds the
// requests to the protected Server::process_request. Connections come from its own
// TaskQueue (ConnectionPool), which caps how many are open at once and answers the
// rest with 503 at once.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hearth::server {

// The limits a connection is held to (all > 0).
struct HttpLimits {
  size_t max_header_bytes = 64u << 10;  // request line + headers + the blank line
  size_t max_body_bytes = 16u << 20;    // decoded body (Content-Length or chunked data)
  double request_timeout_s = 30;        // first byte of a request to its last byte
  double idle_timeout_s = 5;            // keep-alive: wait for the next request's first byte
  double io_timeout_s = 30;             // one poll for readable / writable
  int max_connections = 256;            // open connections served at once; more get 503
};

// Builds an error response body for a request path (OpenAI or Anthropic shape).
using ErrorBodyFn =
    std::function<std::string(const std::string& path, int status, const std::string& message)>;
// Called once for each connection the guard ends itself (status, reason, peer).
using GuardLogFn =
    std::function<void(int status, const std::string& reason, const std::string& peer)>;

// A TaskQueue that starts a thread per connection up to a cap (threads are reused),
// and runs the job of a connection over the cap at once on the caller's thread with
// over_capacity() true, so that it can be answered and closed. Thread-safe.
class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(int max_connections);
  ~ConnectionPool() override;
  void enqueue(std::function<void()> fn) override;
  // Runs the queued jobs, then joins the threads.
  void shutdown() override;
  // True inside a job that enqueue ran over the cap.
  static bool over_capacity();

 private:
  void worker();
  const int max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  int busy_ = 0;
  bool stopping_ = false;
};

// httplib::Server with the limits above enforced on every connection.
class GuardedServer final : public httplib::Server {
 public:
  GuardedServer(HttpLimits limits, ErrorBodyFn error_body, GuardLogFn log);
  const HttpLimits& limits() const { return limits_; }
  // After a bind: lets the kernel queue up to `n` connections not yet accepted. cpp-httplib
  // listens with a backlog of 5 (compiled into Debian's library), so a burst of clients
  // connecting at once (64 streams of a benchmark) lost all but a few of its connections.
  void set_backlog(int n);

 private:
  bool process_and_close_socket(socket_t sock) override;
  HttpLimits limits_;
  ErrorBodyFn error_body_;
  GuardLogFn log_;
};

}  // namespace hearth::server

// A minimal OpenAI-compatible streaming client on httplib::Client: posts a chat
// completion with stream + stream_options.include_usage and timestamps every
// server-sent event as its bytes arrive (steady clock).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"

namespace httplib {
class Client;
class Result;
}

namespace hearth::bench {

using Clock = std::chrono::steady_clock;

// Where a target lives: "http://host:port" plus an optional path prefix; a
// trailing "/v1" in the URL given by the user is dropped (we add it).
struct Endpoint {
  std::string origin;  // scheme://host:port
  std::string prefix;  // "" or "/some/path" (no trailing slash)
  std::string api_key;
};

// Parses "http://host[:port][/prefix]"; throws Error naming `what` otherwise.
Endpoint parse_endpoint(const std::string& url, const std::string& what);

// Splits a buffer of server-sent-event bytes into the "data:" payloads of its
// complete events; what is left (an incomplete event) stays in `buffer`.
std::vector<std::string> take_sse_events(std::string& buffer);

// Applies one streamed event's payload to `r` (arrival time `t`): text deltas,
// usage, finish reason, error objects. Returns true on "[DONE]".
bool apply_event(const std::string& payload, double t, RequestResult& r);

// Sets connect (at most 10 s), read and write timeouts of `cli` to `timeout_s`.
void set_timeouts(httplib::Client& cli, double timeout_s);
// The message of an OpenAI-style error value (a string or {"message": ...}).
std::string error_message(const nlohmann::json& e);

// How a streamed request's transfer ended, after its events were applied. kOk: HTTP 200,
// the transfer complete, and [DONE] or a finish reason seen. Otherwise `message` says
// what went wrong: kHttp (a status other than 200, with the error body's message),
// kUnreachable (no connection), kBroken (the transfer failed part way), kCut (the stream
// ended without [DONE] or a finish reason).
struct StreamEnd {
  enum Kind { kOk, kHttp, kUnreachable, kBroken, kCut } kind = kOk;
  std::string message;
};
StreamEnd stream_end(int http_status, const std::string& error_body, const httplib::Result& res,
                     const std::string& origin, bool done, const std::string& finish_reason);

class StreamClient {
 public:
  StreamClient(Endpoint ep, Clock::time_point epoch, double timeout_s = 600)
      : ep_(std::move(ep)), epoch_(epoch), timeout_s_(timeout_s) {}

  // Posts `body` (a chat completion request; stream options are set here) and
  // returns what was observed. Never throws: failures land in `error`.
  RequestResult chat(nlohmann::json body) const;

  // GET path; returns the HTTP status (0: no connection) and fills body / error.
  int get(const std::string& path, std::string& body, std::string& error, double timeout_s = 5) const;

  // The model ids of GET /v1/models; throws Error with a message naming the problem.
  std::vector<std::string> models() const;

  const Endpoint& endpoint() const { return ep_; }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - epoch_).count(); }
  Endpoint ep_;
  Clock::time_point epoch_;
  double timeout_s_;
};

}  // namespace hearth::bench

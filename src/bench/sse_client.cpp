#include "bench/sse_client.h"

#include <httplib.h>

#include "core/error.h"

namespace hearth::bench {

using nlohmann::json;

Endpoint parse_endpoint(const std::string& url, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    fail(ErrorKind::kInvalidInput, "bench", what + ": '" + url + "' is not a server URL (" + why + ")");
  };
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) bad("expected http://HOST:PORT");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") bad("scheme must be http or https");
  const size_t host_begin = scheme_end + 3;
  const size_t slash = url.find('/', host_begin);
  const std::string hostport = url.substr(host_begin, slash == std::string::npos ? std::string::npos : slash - host_begin);
  if (hostport.empty()) bad("no host");
  if (const size_t colon = hostport.rfind(':'); colon != std::string::npos && hostport.back() != ']') {
    const std::string port = hostport.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      bad("bad port");
  }
  Endpoint ep;
  ep.origin = scheme + "://" + hostport;
  std::string prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) prefix.resize(prefix.size() - 3);
  ep.prefix = prefix;
  return ep;
}

std::vector<std::string> take_sse_events(std::string& buffer) {
  std::vector<std::string> out;
  for (;;) {
    // An event ends at a blank line ("\n\n" or "\r\n\r\n").
    size_t end = std::string::npos, sep = 0;
    if (const size_t a = buffer.find("\n\n"); a != std::string::npos) end = a, sep = 2;
    if (const size_t b = buffer.find("\r\n\r\n"); b != std::string::npos && b < end) end = b, sep = 4;
    if (end == std::string::npos) break;
    const std::string event = buffer.substr(0, end);
    buffer.erase(0, end + sep);
    std::string data;
    size_t pos = 0;
    while (pos <= event.size()) {
      size_t nl = event.find('\n', pos);
      if (nl == std::string::npos) nl = event.size();
      std::string line = event.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        std::string v = line.substr(5);
        if (!v.empty() && v[0] == ' ') v.erase(0, 1);
        if (!data.empty()) data += '\n';
        data += v;
      }
      pos = nl + 1;
    }
    if (!data.empty()) out.push_back(std::move(data));
  }
  return out;
}

std::string error_message(const json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
  return e.dump();
}

namespace {

// The text of a choice's delta: content, reasoning, tool-call arguments, or the
// legacy completions "text".
std::string delta_text(const json& choice) {
  std::string text;
  const auto add = [&](const json& o, const char* key) {
    if (o.is_object() && o.contains(key) && o[key].is_string()) text += o[key].get<std::string>();
  };
  add(choice, "text");
  if (choice.contains("delta") && choice["delta"].is_object()) {
    const json& d = choice["delta"];
    add(d, "content");
    add(d, "reasoning_content");
    add(d, "reasoning");
    if (d.contains("tool_calls") && d["tool_calls"].is_array())
      for (const json& c : d["tool_calls"])
        if (c.is_object() && c.contains("function")) add(c["function"], "arguments");
  }
  return text;
}

}  // namespace

bool apply_event(const std::string& payload, double t, RequestResult& r) {
  if (payload == "[DONE]") return true;
  json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (r.error.empty()) r.error = "unparseable stream event: " + payload.substr(0, 120);
    return false;
  }
  if (j.contains("error") && !j["error"].is_null()) {
    r.error = "error in stream: " + error_message(j["error"]);
    return false;
  }
  if (j.contains("choices") && j["choices"].is_array()) {
    for (const json& c : j["choices"]) {
      if (!c.is_object()) continue;
      const std::string text = delta_text(c);
      if (!text.empty()) {
        if (r.t_first < 0) r.t_first = t;
        r.t_last = t;
        r.token_times.push_back(t);
        ++r.chunks;
        r.chars += static_cast<int64_t>(text.size());
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string())
        r.finish_reason = c["finish_reason"].get<std::string>();
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    const auto num = [&](const json& o, const char* k) -> int64_t {
      return o.contains(k) && o[k].is_number_integer() ? o[k].get<int64_t>() : -1;
    };
    r.has_usage = true;
    r.prompt_tokens = num(u, "prompt_tokens");
    r.completion_tokens = num(u, "completion_tokens");
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
      r.cached_tokens = num(u["prompt_tokens_details"], "cached_tokens");
    if (r.completion_tokens < 0) r.has_usage = false;
  }
  if (j.contains("timings") && j["timings"].is_object()) {
    const json& tm = j["timings"];
    const auto num = [&](const char* k) -> int64_t {
      return tm.contains(k) && tm[k].is_number_integer() ? tm[k].get<int64_t>() : -1;
    };
    const int64_t drafted = tm.contains("drafted_n") ? num("drafted_n") : num("draft_n");
    const int64_t accepted = tm.contains("accepted_n") ? num("accepted_n") : num("draft_n_accepted");
    if (drafted >= 0 && accepted >= 0 && accepted <= drafted) {
      r.drafted_tokens = drafted;
      r.accepted_tokens = accepted;
    }
  }
  return false;
}

namespace {

httplib::Headers auth_headers(const Endpoint& ep) {
  httplib::Headers h;
  if (!ep.api_key.empty()) h.emplace("Authorization", "Bearer " + ep.api_key);
  return h;
}

}  // namespace

void set_timeouts(httplib::Client& cli, double timeout_s) {
  const auto sec = static_cast<time_t>(timeout_s);
  cli.set_connection_timeout(std::min<time_t>(sec, 10), 0);
  cli.set_read_timeout(sec, 0);
  cli.set_write_timeout(sec, 0);
}

RequestResult StreamClient::chat(json body) const {
  RequestResult r;
  body["stream"] = true;
  body["stream_options"] = json{{"include_usage", true}};
  const std::string payload = body.dump();
  std::string sse_buffer, error_body;
  bool done = false;

  httplib::Client cli(ep_.origin);
  set_timeouts(cli, timeout_s_);
  httplib::Request req;
  req.method = "POST";
  req.path = ep_.prefix + "/v1/chat/completions";
  req.headers = auth_headers(ep_);
  req.headers.emplace("Accept", "text/event-stream");
  req.set_header("Content-Type", "application/json");
  req.body = payload;
  req.response_handler = [&](const httplib::Response& res) {
    r.http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = now();
    if (r.http_status != 200) {
      if (error_body.size() < 4096) error_body.append(data, n);
      return true;
    }
    sse_buffer.append(data, n);
    for (const std::string& ev : take_sse_events(sse_buffer)) {
      if (apply_event(ev, t, r)) done = true;
      if (!r.error.empty()) return false;  // an error event ends the request
    }
    return true;
  };
  r.t_start = now();
  httplib::Result res = cli.send(req);
  r.t_end = now();
  if (!r.error.empty() && (r.http_status == 0 || r.http_status == 200)) return r;  // an error event
  const StreamEnd end = stream_end(r.http_status, error_body, res, ep_.origin, done, r.finish_reason);
  r.ok = end.kind == StreamEnd::kOk;
  r.error = end.message;
  r.truncated = end.kind == StreamEnd::kBroken || end.kind == StreamEnd::kCut;
  return r;
}

StreamEnd stream_end(int http_status, const std::string& error_body, const httplib::Result& res,
                     const std::string& origin, bool done, const std::string& finish_reason) {
  StreamEnd end;
  if (http_status != 0 && http_status != 200) {
    json e = json::parse(error_body, nullptr, false);
    const std::string msg = !e.is_discarded() && e.is_object() && e.contains("error") ? error_message(e["error"])
                                                                                        : error_body.substr(0, 300);
    end.kind = StreamEnd::kHttp;
    end.message = "HTTP " + std::to_string(http_status) + (msg.empty() ? "" : ": " + msg);
  } else if (!res) {
    end.kind = http_status == 0 ? StreamEnd::kUnreachable : StreamEnd::kBroken;
    end.message = http_status == 0 ? "cannot reach " + origin + " (" + httplib::to_string(res.error()) + ")"
                                   : "stream broken (" + httplib::to_string(res.error()) + ")";
  } else if (!done && finish_reason.empty()) {
    end.kind = StreamEnd::kCut;
    end.message = "the stream ended before its end ([DONE] or finish_reason)";
  }
  return end;
}

int StreamClient::get(const std::string& path, std::string& body, std::string& error, double timeout_s) const {
  httplib::Client cli(ep_.origin);
  set_timeouts(cli, timeout_s);
  httplib::Result res = cli.Get(ep_.prefix + path, auth_headers(ep_));
  if (!res) {
    error = "cannot reach " + ep_.origin + " (" + httplib::to_string(res.error()) + ")";
    return 0;
  }
  body = res->body;
  return res->status;
}

std::vector<std::string> StreamClient::models() const {
  std::string body, error;
  const int status = get("/v1/models", body, error, 10);
  if (status == 0) fail(ErrorKind::kIo, "bench", error);
  if (status != 200) fail(ErrorKind::kInvalidInput, "bench", "GET /v1/models answered HTTP " + std::to_string(status));
  json j = json::parse(body, nullptr, false);
  std::vector<std::string> ids;
  if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array())
    for (const json& m : j["data"])
      if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
  if (ids.empty()) fail(ErrorKind::kInvalidInput, "bench", "GET /v1/models lists no model");
  return ids;
}

}  // namespace hearth::bench

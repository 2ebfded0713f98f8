#include "agent/chat_client.h"

#include <httplib.h>

#include <chrono>
#include <thread>

#include "bench/image_payload.h"
#include "core/error.h"

namespace hearth::agent {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

httplib::Headers headers(const bench::Endpoint& ep) {
  httplib::Headers h;
  if (!ep.api_key.empty()) h.emplace("Authorization", "Bearer " + ep.api_key);
  return h;
}

std::string str_field(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : "";
}

int64_t int_field(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_number_integer() ? o[key].get<int64_t>()
                                                                        : -1;
}

void merge_tool_call(json& calls, const json& delta) {
  if (!delta.is_object()) return;
  const int64_t index = int_field(delta, "index");
  const size_t i = index >= 0 ? static_cast<size_t>(index) : calls.size();
  while (calls.size() <= i)
    calls.push_back(
        json{{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
  json& c = calls[i];
  if (const std::string id = str_field(delta, "id"); !id.empty()) c["id"] = id;
  if (delta.contains("function") && delta["function"].is_object()) {
    const json& f = delta["function"];
    c["function"]["name"] = c["function"]["name"].get<std::string>() + str_field(f, "name");
    if (f.contains("arguments")) {
      // Some servers send the arguments as an object rather than text.
      const std::string piece =
          f["arguments"].is_string() ? f["arguments"].get<std::string>() : f["arguments"].dump();
      c["function"]["arguments"] = c["function"]["arguments"].get<std::string>() + piece;
    }
  }
}

}  // namespace

bool apply_chat_event(const std::string& payload, ChatResult& r, const StreamHandlers& h) {
  if (payload == "[DONE]") return true;
  json j = json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (r.error.empty()) r.error = "unparseable stream event: " + payload.substr(0, 120);
    return false;
  }
  if (j.contains("error") && !j["error"].is_null()) {
    r.error = "error in stream: " + bench::error_message(j["error"]);
    return false;
  }
  if (j.contains("choices") && j["choices"].is_array()) {
    for (const json& c : j["choices"]) {
      if (!c.is_object()) continue;
      if (c.contains("delta") && c["delta"].is_object()) {
        const json& d = c["delta"];
        std::string reasoning = str_field(d, "reasoning_content");
        if (reasoning.empty()) reasoning = str_field(d, "reasoning");
        const std::string content = str_field(d, "content");
        if (!reasoning.empty()) {
          r.reasoning += reasoning;
          if (h.on_reasoning) h.on_reasoning(reasoning);
        }
        if (!content.empty()) {
          r.content += content;
          if (h.on_content) h.on_content(content);
        }
        bool any_call = false;
        if (d.contains("tool_calls") && d["tool_calls"].is_array())
          for (const json& t : d["tool_calls"]) merge_tool_call(r.tool_calls, t), any_call = true;
        if (!reasoning.empty() || !content.empty() || any_call) ++r.chunks;
      }
      if (const std::string fr = str_field(c, "finish_reason"); !fr.empty()) r.finish_reason = fr;
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    r.prompt_tokens = int_field(j["usage"], "prompt_tokens");
    r.completion_tokens = int_field(j["usage"], "completion_tokens");
  }
  if (j.contains("timings") && j["timings"].is_object()) {
    r.drafted = int_field(j["timings"], "drafted_n");
    r.accepted = int_field(j["timings"], "accepted_n");
  }
  return false;
}

ChatResult ChatClient::chat(json body, const StreamHandlers& h,
                            const std::atomic<bool>& stop) const {
  ChatResult r;
  body["stream"] = true;
  body["stream_options"] = json{{"include_usage", true}};
  std::string sse_buffer, error_body;
  bool done = false;
  const auto t0 = Clock::now();
  const auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  httplib::Client cli(ep_.origin);
  bench::set_timeouts(cli, timeout_s_);
  httplib::Request req;
  req.method = "POST";
  req.path = ep_.prefix + "/v1/chat/completions";
  req.headers = headers(ep_);
  req.headers.emplace("Accept", "text/event-stream");
  req.set_header("Content-Type", "application/json");
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  req.response_handler = [&](const httplib::Response& res) {
    r.http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stop.load()) return false;
    if (r.http_status != 200) {
      if (error_body.size() < 4096) error_body.append(data, n);
      return true;
    }
    sse_buffer.append(data, n);
    for (const std::string& ev : bench::take_sse_events(sse_buffer)) {
      const int64_t before = r.chunks;
      if (apply_chat_event(ev, r, h)) done = true;
      if (r.chunks > before && r.first_token_s < 0) r.first_token_s = since();
      if (!r.error.empty()) return false;
    }
    return true;
  };
  // The request runs on its own thread so that Ctrl-C can close the connection
  // even while the server has sent nothing yet (a long prefill).
  std::atomic<bool> finished{false};
  httplib::Result res{nullptr, httplib::Error::Unknown};
  std::thread worker([&] {
    res = cli.send(req);
    finished = true;
  });
  while (!finished.load()) {
    if (stop.load()) {
      cli.stop();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  worker.join();
  r.seconds = since();
  if (stop.load()) {
    r.interrupted = true;
    r.error = "interrupted";
    return r;
  }
  if (!r.error.empty() && (r.http_status == 0 || r.http_status == 200)) {
    r.retryable = true;  // an error event in the stream: the server failed mid-answer
    return r;
  }
  const bench::StreamEnd end = bench::stream_end(r.http_status, error_body, res, ep_.origin, done, r.finish_reason);
  r.ok = end.kind == bench::StreamEnd::kOk;
  r.error = end.message;
  // A 4xx is the request's fault and would fail again; everything else may not.
  r.retryable = !r.ok && !(end.kind == bench::StreamEnd::kHttp && r.http_status < 500);
  return r;
}

std::optional<int64_t> ChatClient::count_tokens(const json& request, int* status) const {
  httplib::Client cli(ep_.origin);
  bench::set_timeouts(cli, 30);
  json body = json::object();
  for (const char* k : {"messages", "tools", "chat_template_kwargs"})
    if (request.contains(k)) body[k] = request[k];
  httplib::Result res =
      cli.Post((ep_.prefix + "/tokenize").c_str(), headers(ep_),
               body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  if (status != nullptr) *status = res ? res->status : 0;
  if (!res || res->status != 200) return std::nullopt;
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    return std::nullopt;
  return static_cast<int64_t>(j["tokens"].size());
}

std::optional<bool> ChatClient::takes_images() const {
  // 64 x 64: the smallest image the Qwen2-VL processors take without scaling up.
  const std::string url = bench::image_data_url(bench::encode_png(bench::synthetic_screenshot(1, 64, 64), 64, 64));
  const json body = {
      {"messages",
       json::array({json{{"role", "user"},
                         {"content", json::array({json{{"type", "text"}, {"text", "What is this?"}},
                                                  json{{"type", "image_url"}, {"image_url", {{"url", url}}}}})}}})}};
  httplib::Client cli(ep_.origin);
  bench::set_timeouts(cli, 30);
  httplib::Result res = cli.Post((ep_.prefix + "/tokenize").c_str(), headers(ep_), body.dump(), "application/json");
  if (!res) return std::nullopt;
  if (res->status == 400 && res->body.find("takes text only") != std::string::npos) return false;
  if (res->status != 200) return std::nullopt;
  const json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array() || j["tokens"].empty())
    return std::nullopt;
  return true;
}

ModelInfo ChatClient::model_info() const {
  httplib::Client cli(ep_.origin);
  bench::set_timeouts(cli, 10);
  httplib::Result res = cli.Get((ep_.prefix + "/v1/models").c_str(), headers(ep_));
  if (!res)
    fail(ErrorKind::kIo, "agent",
         "cannot reach " + ep_.origin + " (" + httplib::to_string(res.error()) + ")");
  if (res->status != 200)
    fail(ErrorKind::kInvalidInput, "agent",
         "GET /v1/models answered HTTP " + std::to_string(res->status));
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() ||
      j["data"].empty() || str_field(j["data"][0], "id").empty())
    fail(ErrorKind::kInvalidInput, "agent", "GET /v1/models lists no model");
  const json& m = j["data"][0];
  ModelInfo info;
  info.id = str_field(m, "id");
  for (const char* k : {"context_length", "max_model_len", "context_window"})
    if (const int64_t v = int_field(m, k); v > 0) {
      info.context_window = v;
      break;
    }
  return info;
}

}  // namespace hearth::agent

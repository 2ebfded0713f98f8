// The HTTP handlers of OpenAI's Responses API in `hearth serve`: POST /v1/responses,
// GET /v1/responses/{id} and DELETE /v1/responses/{id}. The HTTP server checks the API key
// and hands the request over; these parse it (responses_protocol.h), rebuild the
// conversation of a previous_response_id from the store, build the prompt with the model's
// chat template (the same path as the chat route), submit it to the engine and answer,
// whole or as SSE events, from the assistant-output events of the turn. Errors take
// OpenAI's shape.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "engine/chat_prompt.h"
#include "engine/serve_engine.h"
#include "server/chat_request.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/responses_protocol.h"
#include "server/responses_store.h"
#include "server/served_model.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace hearth::server {

// The bounds of the stored responses (store: true).
struct ResponseStoreLimits {
  size_t max_responses = 256;
  size_t max_bytes = size_t{64} << 20;  // 64 MiB
};

// 404 previous_response_not_found for a previous_response_id the store does not hold.
ApiError previous_response_not_found(const std::string& id);

class ResponsesRoutes {
 public:
  // pick: the model a request's "model" names, leased for the request (throws
  // ApiException: 404 unknown name, 503 still loading), as the chat route picks it.
  ResponsesRoutes(ModelPicker pick, ServerMetrics& metrics, ResponseStoreLimits limits = {});
  // POST /v1/responses, already authorized. Thread-safe (called from many HTTP threads).
  void create(const httplib::Request& req, httplib::Response& res);
  // GET /v1/responses/{id}: the stored Response object, else 404.
  void retrieve(const std::string& id, httplib::Response& res);
  // DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}, else 404.
  void remove(const std::string& id, httplib::Response& res);

  ResponseStore& store() { return store_; }

 private:
  ModelPicker pick_;
  ServerMetrics& metrics_;
  ResponseStore store_;
};

}  // namespace hearth::server

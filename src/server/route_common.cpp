// What the generation routes share; see route_common.h.
#include "server/route_common.h"

#include <string>

namespace hearth::server {

bool wait_next(engine::ServeEngine& engine, engine::RequestChannel& ch, ClientWatch& watch,
               std::vector<engine::Delta>& out, std::optional<engine::Final>& fin,
               WaitClock::time_point& quiet_since) {
  const bool got = ch.wait(out, fin, kEnginePoll);
  if (!ch.cancelled() && watch.due(kEnginePoll) && watch.closed()) ch.cancel();
  if (got) {
    quiet_since = WaitClock::now();
    return true;
  }
  return engine.stats().running_loop || WaitClock::now() - quiet_since <= std::chrono::seconds(5);
}

int64_t fit_max_tokens(const engine::ServeEngine& engine, int64_t n_prompt, std::optional<int32_t> requested,
                       const std::string& max_param, const std::string& prompt_param) {
  const int64_t n_ctx = engine.n_ctx(), cap = engine.max_sequence_tokens();
  if (n_prompt >= n_ctx) throw ApiException(context_length_exceeded(n_prompt, requested.value_or(1), n_ctx));
  const int64_t max_tokens = requested ? *requested : cap - n_prompt;
  if (n_prompt + max_tokens > n_ctx) throw ApiException(context_length_exceeded(n_prompt, max_tokens, n_ctx));
  if (n_prompt + max_tokens > cap) {
    throw ApiException(invalid_request(
        "this request needs " + std::to_string(n_prompt + max_tokens) + " tokens of KV cache (" +
            std::to_string(n_prompt) + " prompt + " + std::to_string(max_tokens) + " " + max_param +
            ") but the server's KV budget (--kv-cache-bytes) holds " + std::to_string(cap) + " per sequence",
        requested ? max_param : prompt_param));
  }
  if (max_tokens < 1) throw ApiException(context_length_exceeded(n_prompt, 1, n_ctx));
  return max_tokens;
}

ApiError failed_final_error(const engine::Final& f) {
  ApiError e = final_error(f);
  if (f.error.find("shutting down") != std::string::npos) e.status = 503;
  return e;
}

}  // namespace hearth::server

// What the generation routes (OpenAI chat / completions, Anthropic messages, Responses)
// share: the token budget a prompt leaves, the wait for the next deltas while a request
// runs (cancelled when the client is gone, given up when the engine stopped), and the
// error of a request that ended without a finish reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/serve_engine.h"
#include "server/client_socket.h"
#include "server/openai_protocol.h"

namespace hearth::server {

using WaitClock = std::chrono::steady_clock;

// How long one wait for the engine lasts (also the cadence of the client checks).
inline constexpr std::chrono::milliseconds kEnginePoll{50};

// Waits up to kEnginePoll for the next deltas or the Final of `ch`. The peer is checked
// on a fixed cadence, not only when the channel is quiet (a request whose tokens keep
// coming must notice a client that left), and the request cancelled when it is gone.
// Returns false when nothing will ever come: the engine loop stopped and the channel was
// quiet for 5 s. `quiet_since`: when something last came (start: the submit time).
bool wait_next(engine::ServeEngine& engine, engine::RequestChannel& ch, ClientWatch& watch,
               std::vector<engine::Delta>& out, std::optional<engine::Final>& fin,
               WaitClock::time_point& quiet_since);

// The max_tokens of a request of `n_prompt` prompt tokens: `requested`, or all that is
// left of a sequence's budget when unset. Throws ApiException (400) when the prompt fills
// the context (context_length_exceeded), when prompt + max_tokens exceed the context, or
// when they exceed the KV budget of one sequence (naming `max_param` when max_tokens was
// given, else `prompt_param`).
int64_t fit_max_tokens(const engine::ServeEngine& engine, int64_t n_prompt, std::optional<int32_t> requested,
                       const std::string& max_param, const std::string& prompt_param);

// The error of a Final without a finish reason (final_error); a server that was shutting
// down answers 503 (Anthropic's shape makes it 529 overloaded).
ApiError failed_final_error(const engine::Final& f);

}  // namespace hearth::server

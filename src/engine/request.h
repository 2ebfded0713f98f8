// The plain structs that cross between the HTTP threads and the engine thread of
// `hearth serve`: a tokenized generation request going in, and a channel of
// text deltas and one final record coming out. Nothing here knows about HTTP or
// JSON; nothing here touches the model.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/prompt_images.h"
#include "engine/reasoning_budget.h"
#include "engine/sampler.h"
#include "grammar/constraint.h"

namespace hearth::engine {

// One generated token with its log-probabilities (when asked for).
struct TokenOut {
  int32_t token = 0;
  float logprob = 0.0f;              // log-softmax of the raw logits (before penalties)
  std::vector<TokenLogprob> top;     // top_logprobs, largest first (empty when not asked)
};

// What one engine step produced for one request: the text released this step (text
// that might still turn out to be the start of a stop string is held back) and the
// tokens sampled this step.
struct Delta {
  std::string text;
  std::vector<TokenOut> tokens;
};

// Server-side measurements of one request, in milliseconds.
struct Timings {
  double queue_ms = 0.0;        // submitted -> first scheduled
  double prefill_ms = 0.0;      // first scheduled -> prompt fully processed
  double ttft_ms = 0.0;         // submitted -> first token sampled
  double decode_ms = 0.0;       // first token -> last token
  int32_t prompt_n = 0;         // prompt tokens
  int32_t cached_n = 0;         // of which were reused from the prefix cache
  int32_t disk_n = 0;           // of those, restored from the KV disk tier
  int32_t predicted_n = 0;      // generated tokens
  // Speculative decoding: tokens drafted for this request and, of those, accepted (each
  // accepted one is a generated token that took no forward pass of its own).
  int32_t drafted_n = 0;
  int32_t accepted_n = 0;
  // prompt_n - cached_n tokens over prefill_ms; (predicted_n - 1) over decode_ms.
  double prompt_per_second() const { return prefill_ms > 0 ? (prompt_n - cached_n) * 1000.0 / prefill_ms : 0.0; }
  double predicted_per_second() const {
    return predicted_n > 1 && decode_ms > 0 ? (predicted_n - 1) * 1000.0 / decode_ms : 0.0;
  }
};

// How a request ended. finish_reason: "stop" (end-of-generation token or stop string),
// "length" (max_tokens or the context), "cancelled" (client went away or the server
// stopped), "error" (see error).
struct Final {
  std::string finish_reason;
  std::string error;
  std::string stop_sequence;  // "stop" by a stop string: that string; else empty
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  Timings timings;
};

// A tokenized request, validated by the HTTP side.
struct GenRequest {
  std::vector<int32_t> prompt;      // non-empty
  int32_t max_tokens = 0;           // >= 1 (already clamped to the context by the HTTP side)
  SamplerParams sampler;
  std::vector<std::string> stop;    // stop strings, not included in the output
  int32_t top_logprobs = -1;        // < 0: no log-probabilities; >= 0: token logprob + top k
  bool ignore_eos = false;
  // Constrained decoding (ServeEngine::compile_constraint): only tokens the grammar allows
  // are sampled and the request ends ("stop") when the grammar is complete. null: free text.
  std::shared_ptr<const grammar::Constraint> constraint;
  ReasoningLimit reasoning;         // --reasoning-budget: close <think> after N tokens
  // Images whose tokens the prompt holds (expand_image_pads done): the engine encodes
  // them with the model's vision encoder and puts their embeddings in those rows.
  std::vector<PromptImage> images;
  // Speculative decoding where the engine has it on (EngineConfig::spec) and the request
  // allows it (false: the request's "speculative": false).
  bool speculative = true;
};

// The channel of one request. The engine pushes deltas and then exactly one Final;
// the HTTP thread waits for them. Either side may cancel.
class RequestChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // Engine side.
  void push(Delta d) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      deltas_.push_back(std::move(d));
    }
    cv_.notify_all();
  }
  void finish(Final f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      final_ = std::move(f);
    }
    cv_.notify_all();
  }
  // The request was scheduled for the first time; `cached` of its prompt tokens were
  // found in the prefix cache (what Final::cached_tokens will say). Wakes wait().
  void admitted(int32_t cached) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cached_ = cached;
      news_ = true;
    }
    cv_.notify_all();
  }

  // HTTP side: waits until a delta or the final record is available or `timeout`
  // passes; moves what is there into `out` / `fin`. Returns true when anything came.
  // A call also returns early (false, nothing moved) when the request was just admitted.
  bool wait(std::vector<Delta>& out, std::optional<Final>& fin, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !deltas_.empty() || final_.has_value() || news_; });
    news_ = false;
    const bool any = !deltas_.empty() || final_.has_value();
    while (!deltas_.empty()) {
      out.push_back(std::move(deltas_.front()));
      deltas_.pop_front();
    }
    if (final_) fin = std::move(final_);
    final_.reset();
    return any;
  }

  // Either side: the client disconnected or the request should stop. The engine frees
  // the sequence at its next step and still sends a Final ("cancelled").
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // HTTP side: the prefix-cache hit of the prompt once the request is admitted (see
  // admitted()); unset before.
  std::optional<int32_t> cached_tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

  const Clock::time_point created = Clock::now();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delta> deltas_;
  std::optional<Final> final_;
  std::optional<int32_t> cached_;
  bool news_ = false;  // admitted() since the last wait()
  std::atomic<bool> cancelled_{false};
};

}  // namespace hearth::engine

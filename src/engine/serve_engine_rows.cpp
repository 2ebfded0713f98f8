// A step's sampled rows on the engine side (ServeEngine::pick_row, ServeEngine::finish_row:
// the logits row checked and sampled, the token accepted, detokenized, matched against the
// stop strings and streamed) and the step account's arithmetic (StepTimes). The step loop
// that calls them, on the engine thread or the sampling threads, is in serve_engine.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/error.h"
#include "engine/logit_scan.h"
#include "engine/serve_engine.h"
#include "engine/serve_engine_live.h"
#include "engine/stop_matcher.h"

namespace hearth::engine {
namespace {

// The error that ends a request whose logits row is not finite (one message for the row
// scanned here and for the row reduced on the device).
std::string non_finite_error(int64_t token, bool is_nan, int32_t n_generated) {
  return "the model's output for this request is not finite (logit of token " + std::to_string(token) + " is " +
         (is_nan ? "NaN" : "infinite") + ") at generated token " + std::to_string(n_generated);
}

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

void StepTimes::add(const StepTimes& o) {
  steps += o.steps;
  rows += o.rows;
  tokens += o.tokens;
  forward += o.forward;
  between += o.between;
  plan += o.plan;
  prepare += o.prepare;
  sample += o.sample;
  stream += o.stream;
  finish += o.finish;
  decode_steps += o.decode_steps;
  decode_rows += o.decode_rows;
  decode_forward += o.decode_forward;
  decode_host += o.decode_host;
}

void ServeEngine::pick_row(SeqSlot& seq, Live& live, std::span<float> lg, const ops::ArgmaxRow* am, double draw_u,
                           RowPick& pick) {
  try {
    if (!live.mask_error.empty()) {
      pick.error = std::move(live.mask_error);
      return;
    }
    // Reduced by the back-end: greedy (the argmax is the sample), or a draw it made (a row
    // it left undone, argmax -1, is the host's below, with the same uniform number).
    if (am != nullptr && (am->bad >= 0 || am->argmax >= 0)) {
      if (am->bad >= 0) {
        pick.error = non_finite_error(am->bad, am->bad_nan != 0, live.n_generated);
        return;
      }
      const std::optional<int32_t> forced = draw_u < 0.0 ? live.reasoning.forced() : std::nullopt;
      pick.token = forced ? *forced : am->argmax;
      return;
    }
    if (live.fault_due(FaultKind::kNan)) std::fill(lg.begin(), lg.end(), std::numeric_limits<float>::quiet_NaN());
    // A non-finite output (a numerical fault of this sequence) would make the sampler's
    // choice meaningless: the request ends instead of emitting garbage.
    if (const int64_t bad = first_non_finite(lg); bad >= 0) {
      pick.error = non_finite_error(bad, std::isnan(lg[static_cast<size_t>(bad)]), live.n_generated);
      return;
    }
    if (live.request.top_logprobs >= 0) live.raw.assign(lg.begin(), lg.end());
    if (live.matcher) grammar::apply_mask(lg, live.mask);
    // A spent reasoning budget writes the closing tag instead of the sampler (not under a
    // grammar: the constraint decides every token of a constrained answer).
    const std::optional<int32_t> forced = live.matcher ? std::nullopt : live.reasoning.forced();
    if (!forced && live.fault_due(FaultKind::kSampler)) {
      fail(ErrorKind::kInternal, "sampler", "injected sampler fault");
    }
    if (forced) {
      pick.token = *forced;
    } else {
      const bool penalized = am != nullptr && am->penalized != 0;  // the copy has its penalties
      if (draw_u >= 0.0 || penalized) {
        pick.token = live.sampler.sample(lg, seq.tokens, draw_u >= 0.0 ? draw_u : 0.0, penalized);
      } else {
        pick.token = live.sampler.sample(lg, seq.tokens);
      }
    }
  } catch (const std::exception& ex) {
    pick.error = request_fault("sampling", ex);
  }
}

ServeEngine::RowEnd ServeEngine::finish_row(SeqSlot& seq, Live& live, int32_t next, std::string& error) {
  const auto now = Clock::now();
  bool grammar_done = false;
  if (live.matcher) {
    if (!live.matcher->accept(next)) {
      // Only when the grammar allowed no token at all (a grammar that cannot go on).
      error = "the output constraint allows no next token after " + std::to_string(live.n_generated) + " tokens";
      return RowEnd::kError;
    }
    // Complete with nothing but a stop token to follow: the output is finished now,
    // without a forward pass just to sample end-of-generation.
    grammar_done = live.matcher->terminated();
    if (!grammar_done && live.matcher->completed()) {
      live.matcher->fill_mask(live.mask);
      grammar_done = grammar::only_stop_allowed(live.mask, eog_, live.matcher->n_vocab());
    }
  }
  const bool eog = (!live.request.ignore_eos || live.matcher) && std::binary_search(eog_.begin(), eog_.end(), next);
  if (eog) {
    if (live.n_generated == 0) live.t_first = live.t_last = now;
    return RowEnd::kStop;
  }
  if (live.fault_due(FaultKind::kStop)) fail(ErrorKind::kInternal, "stop", "injected stop-matcher fault");
  if (live.n_generated == 0) {
    live.t_first = now;
    if (timing_each_) {
      std::fprintf(stderr, "hearth: request %llu: first token %.2f ms after it arrived\n",
                   static_cast<unsigned long long>(seq.id), ms_between(live.channel->created, now));
    }
    if (observer_ != nullptr) observer_->on_first_token(ms_between(live.channel->created, now) / 1000.0);
  } else if (observer_ != nullptr) {
    observer_->on_token_interval(ms_between(live.t_last, now) / 1000.0);
  }
  live.t_last = now;
  ++live.n_generated;
  seq.tokens.push_back(next);
  Delta d;
  TokenOut out;
  out.token = next;
  if (live.request.top_logprobs >= 0) {
    out.logprob = token_logprob(live.raw, next);
    if (live.request.top_logprobs > 0) out.top = top_logprobs(live.raw, live.request.top_logprobs);
  }
  d.tokens.push_back(std::move(out));
  const std::string piece = live.decoder.push(next);
  live.reasoning.accept(piece);
  d.text = live.stop.push(piece);
  const bool stopped = live.stop.stopped();
  live.channel->push(std::move(d));
  if (stopped || grammar_done) return RowEnd::kStop;
  if (live.n_generated >= live.request.max_tokens || static_cast<int64_t>(seq.tokens.size()) >= max_seq_tokens_) {
    return RowEnd::kLength;
  }
  return RowEnd::kNone;
}

}  // namespace hearth::engine

// The engine-side state of one request of ServeEngine (its sampler, text decoder, stop
// matcher, constraint, timings), shared by the engine's source files (serve_engine.cpp,
// serve_engine_spec.cpp); engine thread only.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/serve_engine.h"
#include "engine/stop_matcher.h"

namespace hearth::engine {

// The message of a fault that ends one request (never the engine): "out of memory in
// WHERE" or "internal error in WHERE: what".
std::string request_fault(const std::string& where, const std::exception& e);

struct ServeEngine::Live {
  GenRequest request;
  std::shared_ptr<RequestChannel> channel;
  Sampler sampler;
  tokenizer::StreamDecoder decoder;
  StopMatcher stop;
  std::optional<grammar::ConstraintMatcher> matcher;  // constrained requests only
  std::vector<uint32_t> mask;                         // tokens the matcher allows next
  ReasoningBudget reasoning;
  int32_t n_generated = 0;
  std::chrono::steady_clock::time_point t_scheduled{}, t_first{}, t_last{};
  bool scheduled = false;
  std::vector<float> raw;        // top_logprobs: this step's logits before the mask and penalties
  std::optional<FaultRule> fault;  // test only: the fault injected into this request
  std::string mask_error;        // set by the mask job when this sequence's mask failed
  // Requests with images: the image rows' embeddings and the prompt's 3-D positions.
  std::vector<float> embd;
  model::SeqMedia media;
  // Speculative decoding: its measured acceptance (per class of drafts), the class of the
  // draft being verified, and its drafted / accepted tokens.
  Acceptance acceptance;
  int draft_class = 0;
  int32_t drafted = 0, accepted = 0;
  // --spec mtp: the positions the model's MTP block has run for this sequence (-1: none yet).
  int64_t mtp_pos = -1;

  // The injected fault `kind` is due now (before sampling token n_generated).
  bool fault_due(FaultKind kind) const { return fault && fault->kind == kind && fault->at_token == n_generated; }

  Live(GenRequest r, std::shared_ptr<RequestChannel> c, const tokenizer::Tokenizer& tok)
      : request(std::move(r)),
        channel(std::move(c)),
        sampler(request.sampler),
        decoder(tok, [] {
          tokenizer::DecodeOptions o;
          o.strip_space_prefix = false;  // a continuation keeps its leading space
          return o;
        }()),
        stop(request.stop),
        reasoning(request.reasoning) {
    if (request.constraint) {
      matcher.emplace(request.constraint);
      mask.assign(static_cast<size_t>(grammar::mask_words(matcher->n_vocab())), 0u);
    }
  }
};

}  // namespace hearth::engine

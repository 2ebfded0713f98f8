// One-shot generation for `hearth run`: prefill the prompt, then sample and
// decode token by token, streaming text through a callback, with honest
// timings (measured, never estimated).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/spec_policy.h"
#include "grammar/constraint.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace hearth::engine {

struct GenerateOptions {
  int32_t max_tokens = 256;   // generated tokens at most (end-of-generation not counted)
  int32_t n_logprobs = 0;     // > 0: record the top-k log-probabilities at each step
  SamplerParams sampler;
  // Constrained decoding: only tokens the grammar allows; ends ("stop") when complete.
  std::shared_ptr<const grammar::Constraint> constraint;
  // Images in the prompt (their rows' embeddings and 3-D positions); null: text only.
  const model::SeqMedia* media = nullptr;
  // The prompt goes through the model in chunks of this many tokens (0: all at once): the
  // activations of a step are then those of one chunk, not of a 32k-token prompt (on a GPU
  // the difference is many GB of device memory). The continuation is the same; logits may
  // differ by float rounding where a chunk boundary changes the order of a sum (the
  // chunked Gated DeltaNet form, the products' token blocks).
  int64_t prefill_chunk = 2048;
  // Speculative decoding (--spec): drafts verified a step at a time, for runs with nothing
  // else reading the logits (no log-probabilities, constraint or images); the output is the
  // same as without, greedy or sampled with the same seed (a sampled row's draw is the
  // rejection-sampling verdict: serve_engine_spec.cpp). Hybrid models draft at most the cache's
  // spare state slots (KvCache's spare_state_slots: the state after each drafted row's
  // predecessor is kept there, and the one at the last accepted token restored).
  SpecOptions spec;
};

struct StepLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;       // generated ids (end-of-generation token excluded)
  int32_t n_prompt = 0;
  double prefill_s = 0.0;            // prompt forward pass
  double ttft_s = 0.0;               // start of prefill to the first sampled token
  double decode_s = 0.0;             // first generated token to the last one
  std::string stop_reason;           // "stop" (end-of-generation), "length" (max_tokens), "context"
  std::vector<StepLogprobs> logprobs;
  int32_t drafted = 0;               // speculative decoding: tokens drafted ...
  int32_t accepted = 0;              // ... and accepted

  double prompt_tps() const { return prefill_s > 0 ? n_prompt / prefill_s : 0.0; }
  // Decode-only speed: tokens after the first over the time from the first to the last.
  double generation_tps() const {
    return tokens.size() > 1 && decode_s > 0 ? static_cast<double>(tokens.size() - 1) / decode_s : 0.0;
  }
};

// The model's end-of-generation tokens: eos, eot, and control tokens whose text ends a
// turn in the common chat formats (<|im_end|>, <|eot_id|>, <end_of_turn>, ...).
std::vector<int32_t> end_of_generation_tokens(const tokenizer::Tokenizer& tok);

// Runs the prompt through `model` with a fresh `cache` and generates. `on_text` receives
// text as soon as it forms whole UTF-8 characters. Throws Error when the prompt does not
// fit in the context.
GenerateResult generate(model::CausalLm& model, model::KvCache& cache, const tokenizer::Tokenizer& tok,
                        const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_text);

}  // namespace hearth::engine

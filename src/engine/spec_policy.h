// When speculative drafting pays, decided from measured step times (the scheduler of
// `hearth serve` asks before every step; `hearth run` before every decode step).
//
// A drafted token adds a row to the step and is worth a token only when it is accepted.
// StepCost fits a step's time as fixed + per_row * rows over the recent steps (least
// squares, older steps forgotten geometrically), counting only steps of decode size (at
// most max_rows: the steps this decision is about, not long prefill chunks). With
// n_decode sequences sampling in a step of `rows` rows, one extra row costs per_row
// seconds, which the step would otherwise have spent on per_row * n_decode / t(rows)
// tokens. A sequence's k-th drafted token is accepted with probability p^k (p: its
// measured chance that a drafted token is accepted when the ones before it were, kept
// per class of drafts: for prompt lookup, per match length), so
// it drafts k tokens while p^k is above that cost: a lone stream on a memory-bound
// device (per_row small next to fixed) drafts long, a large batch on a compute-bound
// one (per_row * rows near the whole step) stops drafting unless nearly every drafted
// token is accepted.
#pragma once

#include <cstdint>
#include <string>

#include "model/causal_lm.h"

namespace hearth::engine {

// What speculative decoding drafts with (--spec): nothing, prompt lookup
// (ngram_drafter.h), a draft model (model_drafter.h; SpecOptions::draft), or the model's
// own multi-token-prediction block (Qwen3.5's MTP head: CausalLm::forward_mtp).
enum class SpecMode { kOff, kNgram, kDraft, kMtp };

struct SpecOptions {
  SpecMode mode = SpecMode::kOff;
  int32_t max_draft = 8;  // --spec-max: drafted tokens per step at most
  // Draft lengths from measured step costs and acceptance (draft_length below); false:
  // always max_draft where the drafter has that many (tests whose acceptance must not
  // depend on a loaded machine's timings).
  bool adaptive = true;
  // kDraft: the draft model (--draft-model; attention-only, the target's vocabulary). Not
  // owned; may be the target model itself (the exactness test: it drafts what it decodes).
  model::CausalLm* draft = nullptr;
};

// Parses "off" / "ngram" / "draft" / "mtp" (throws Error(kInvalidInput) naming the value otherwise).
SpecMode parse_spec_mode(const std::string& s);

// Every back-end verifies drafts through the same ops: greedy output is bit for bit the
// output without drafts on the CPU back-end and on CUDA under --deterministic (otherwise up
// to the GPU's batch invariance; scripts/spec_device_check.py). A hybrid model's Gated
// DeltaNet state is checkpointed after each verified row and rolled back to the last
// accepted token (serve_engine_spec.cpp).

class StepCost {
 public:
  // max_rows: steps with more rows are not counted.
  explicit StepCost(int64_t max_rows) : max_rows_(max_rows) {}
  void note(int64_t rows, double seconds);
  // Whether the steps seen so far vary enough in rows to tell the two costs apart.
  bool known() const;
  double fixed() const;    // seconds per step
  double per_row() const;  // seconds per row (>= 0)
  double time(int64_t rows) const { return fixed() + per_row() * static_cast<double>(rows); }

 private:
  int64_t max_rows_;
  // Geometrically weighted sums: weight, rows, seconds, rows^2, rows * seconds.
  double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;
};

// One sequence's acceptance, per class of drafts (prompt lookup: the match length, so a
// draft from a six-token match and one from a one-token match are judged apart; a draft
// model: class 0): the geometric model's p from (forgetting) counts of accepted drafted
// tokens and of verifications that ended at a rejected one, starting from one of each
// (p = 1/2: a new class drafts as long as a short draft pays). Classes past the last
// share it.
class Acceptance {
 public:
  static constexpr int kClasses = 8;
  void note(int32_t drafted, int32_t accepted, int cls = 0);
  // A step in which the sequence did not draft from this class: its counts drift back to
  // the prior, so a class that stopped drafting for a low p tries again later.
  void idle(int cls = 0);
  double p(int cls = 0) const;

 private:
  static int index(int cls) { return cls < 0 ? 0 : cls >= kClasses ? kClasses - 1 : cls; }
  double accepted_[kClasses] = {1, 1, 1, 1, 1, 1, 1, 1};
  double rejected_[kClasses] = {1, 1, 1, 1, 1, 1, 1, 1};
};

// Drafted tokens for one sequence (0 .. max_draft): the largest k with p^k above the
// cost of a row in tokens (see above; a tenth of a token while the costs are unknown). rows: the
// step's rows without drafts; n_decode: its sequences that sample. draft_s: the measured
// seconds it takes to make one drafted token (a draft model's share of its passes; 0 for
// prompt lookup), counted like a row's cost.
int32_t draft_length(const StepCost& cost, int64_t rows, int32_t n_decode, double p, int32_t max_draft,
                     double draft_s = 0.0);

// draft_s after a drafting pass that made n tokens in `seconds` (forgetting geometrically),
// or, with n = 0 (nothing drafted), drifting down so that a drafter the policy stopped for
// being dear (or one slow measurement) is tried again later.
void note_draft_seconds(double& draft_s, double seconds, size_t n);

}  // namespace hearth::engine

// Speculative decoding inside continuous batching (ServeEngine): before each step the
// sequences that decode get a draft from the prompt-lookup drafter (ngram_drafter.h) or a
// draft model (model_drafter.h: its greedy continuation, all sequences' drafts in batched
// passes), as long as spec_policy.h says it pays; the scheduler runs each draft after its
// sequence's pending token in the same forward pass as every other sequence's rows, with
// a logits row per drafted token. Greedy acceptance: a drafted token is accepted while it
// is the token the target model picks at that row, and the target's own pick at the first
// row that differs (or after the last drafted token) is the step's last token, so a step
// yields 1 .. n_draft + 1 tokens, exactly those decoding without a draft would give. Each
// one goes through finish_row like any sampled token (end of generation, stop strings,
// max_tokens, the reasoning budget), and the KV rows after the last accepted token are
// rolled back (Scheduler::rollback); prefix-cache hashes only ever cover known tokens.
//
// Hybrid models: a verified sequence's Gated DeltaNet recurrence runs a row per pass (the
// one-token recurrent step, so bit for bit what decoding gives), and after each row but
// the last the model copies the state (conv and delta rule, every layer) into a checkpoint
// slot of the sequence's own (spec_checkpoints); a partial acceptance copies the
// checkpoint at the last accepted token back into the live slot. The scheduler takes no
// prefix-cache snapshot in a drafted step's commit; after the verification, when the
// accepted tokens crossed a block boundary, the rolling decode snapshot moves there, copied
// from that row's checkpoint (Scheduler::accepted_snapshot). So snapshots only ever hold
// states at accepted tokens, the same ones as without speculation. (The other way, keeping
// the state before the step and re-running the accepted rows, is measured against this one
// in docs/bench/spec.md.)
//
// Sampled requests (temperature > 0, with top-k / top-p / min-p and penalties as the
// sampler applies them): rejection sampling as in the speculative-sampling literature
// (Leviathan et al. 2023, Chen et al. 2023) accepts a drafted token x with probability
// min(1, p(x) / q(x)) and on rejection draws from the normalised max(0, p - q). The
// prompt-lookup draft is a point mass (q(x) = 1), so x is accepted with probability p(x)
// and a rejection draws from p without x, renormalised. Both come from the one uniform
// number u the sampler takes for the row: the sampler's draw is the inverse of p's
// cumulative distribution at u (its final distribution, after penalties, top-k, top-p,
// min-p and temperature), x is accepted when that draw is x (u falls in x's interval:
// probability p(x)), and otherwise the draw is the inverse cumulative distribution of p
// restricted to the other tokens at a u that is uniform outside x's interval: exactly the
// residual. So verification is the greedy loop above with the sampler's draw in place of
// the argmax: row by row, one uniform number per generated token, accepted while the draw
// is the drafted token. A seeded request then takes the same uniform number for each
// token with speculation as without, and gives the same tokens (whatever the drafts and
// their lengths, which follow measured timings), as engine_spec_sampling_test checks,
// with a statistical test of the rule itself. A draft model drafts greedily, so its q is
// a point mass too. (A draft sampled from the draft model's distribution would need the
// general rule, with numbers of its own.)
//
// This part drafts for requests with nothing else reading their rows: not with
// log-probabilities, an output constraint, images or an injected fault.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "engine/serve_engine.h"
#include "engine/row_reduce.h"
#include "engine/serve_engine_live.h"

namespace hearth::engine {

int64_t ServeEngine::spec_state_slots(model::CausalLm& model, const EngineConfig& config) {
  const SpecOptions& o = config.spec;
  if (!recurrent(model) || o.mode == SpecMode::kOff || o.max_draft <= 0) return 0;
  return static_cast<int64_t>(config.max_seqs) * o.max_draft;
}

int32_t ServeEngine::spec_slot(int32_t live_slot, int32_t j) const {
  return config_.max_seqs + config_.n_snapshots + live_slot * config_.spec.max_draft + j;
}

std::vector<model::StateSnap> ServeEngine::spec_checkpoints(const SeqSlot& seq, int32_t n_draft) const {
  std::vector<model::StateSnap> snaps;
  for (int32_t j = 0; j < n_draft; ++j) snaps.push_back({j + 1, spec_slot(seq.kv.state_slot, j)});
  return snaps;
}

void ServeEngine::spec_init() {
  spec_on_ = config_.spec.mode != SpecMode::kOff && config_.spec.max_draft > 0;
  if (spec_on_ && config_.spec.mode == SpecMode::kDraft) {
    if (config_.spec.draft == nullptr) fail(ErrorKind::kInvalidInput, "spec", "--spec draft needs --draft-model");
    model_drafter_ = std::make_unique<ModelDrafter>(*config_.spec.draft, model_.hparams().n_vocab, max_seq_tokens_,
                                                    config_.max_seqs, config_.kv_type, config_.prefill_chunk);
  }
  // Steps of decode size are the ones the drafting decision is about.
  spec_cost_ = StepCost(static_cast<int64_t>(config_.max_seqs) * (config_.spec.max_draft + 1));
}

bool ServeEngine::spec_eligible(const SeqSlot& seq, const Live& live) const {
  const GenRequest& r = live.request;
  return r.speculative && r.top_logprobs < 0 && !live.matcher && !live.fault && r.images.empty() &&
         seq.pending() == 1 && static_cast<int64_t>(seq.tokens.size()) > seq.n_prompt;
}

void ServeEngine::spec_draft() {
  if (!spec_on_) return;
  // The next step's rows without drafts, and its sequences that sample.
  int64_t prefill = 0;
  int32_t n_decode = 0;
  for (const auto& s : scheduler_.running()) {
    const int64_t pending = s->pending();
    if (pending == 1 && static_cast<int64_t>(s->tokens.size()) > s->n_prompt) {
      ++n_decode;
    } else if (pending > 0) {
      prefill += pending;
    }
  }
  const int64_t rows = n_decode + std::min<int64_t>(prefill, config_.prefill_chunk);
  std::vector<ModelDrafter::Job> jobs;  // --spec draft: every sequence's draft in batched passes
  std::vector<SeqSlot*> job_seq;
  const bool mtp = config_.spec.mode == SpecMode::kMtp;
  std::unordered_map<uint64_t, int64_t> want;  // --spec mtp: drafts wanted per sequence
  for (const auto& s : scheduler_.running()) {
    SeqSlot& seq = *s;
    seq.draft.clear();
    auto it = live_.find(seq.id);
    if (it == live_.end() || !spec_eligible(seq, *it->second)) continue;
    Live& live = *it->second;
    // Prompt lookup: the match first, whose length picks the acceptance the draft's
    // length is judged by (a draft model's and the MTP head's drafts are all class 0).
    const NgramMatch match = model_drafter_ || mtp ? NgramMatch{} : drafter_.find(seq.tokens);
    live.draft_class = match.n;
    // No further than max_tokens (the step's own token is one) and the context.
    int64_t k = config_.spec.adaptive
                    ? draft_length(spec_cost_, rows, n_decode, live.acceptance.p(match.n), config_.spec.max_draft,
                                   model_drafter_ || mtp ? draft_s_ : 0.0)
                    : config_.spec.max_draft;
    k = std::min<int64_t>(k, live.request.max_tokens - live.n_generated - 1);
    k = std::min<int64_t>(k, max_seq_tokens_ - static_cast<int64_t>(seq.tokens.size()));
    if (k <= 0) {
      live.acceptance.idle(match.n);
      continue;
    }
    if (mtp) {
      want[seq.id] = k;
    } else if (model_drafter_) {
      jobs.push_back(ModelDrafter::Job{seq.id, seq.tokens, static_cast<int32_t>(k), {}});
      job_seq.push_back(&seq);
    } else {
      seq.draft = NgramDrafter::copy(seq.tokens, match, static_cast<int32_t>(k));
    }
  }
  if (mtp) {
    spec_draft_mtp(want);  // (its rows run whether or not anyone drafts: its KV follows)
    return;
  }
  if (jobs.empty()) {
    // Nothing drafted: the cost drifts down, so that a policy that stopped drafting for a
    // dear draft (or one slow measurement) tries again later.
    if (model_drafter_) note_draft_seconds(draft_s_, 0, 0);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  model_drafter_->draft(jobs);
  size_t n = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    n += jobs[i].out.size();
    job_seq[i]->draft = std::move(jobs[i].out);
  }
  // The seconds per drafted token (forgetting geometrically), which draft_length counts.
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (n > 0) note_draft_seconds(draft_s_, s, n);
}

void ServeEngine::spec_draft_mtp(const std::unordered_map<uint64_t, int64_t>& want) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  struct Job {
    SeqSlot* seq;
    int64_t k;
    int64_t out_row;  // its last row in the pass's output states
  };
  std::vector<Job> drafting;
  std::vector<model::MtpSeq> pass;
  int64_t out_rows = 0;
  // The catch-up pass: each sequence of the last step, from where its MTP rows stopped (or
  // its first row there) to the last position whose next token is known.
  for (const auto& s : scheduler_.running()) {
    SeqSlot& seq = *s;
    auto rows = step_rows_.find(seq.id);
    auto lit = live_.find(seq.id);
    if (rows == step_rows_.end() || lit == live_.end()) continue;
    Live& live = *lit->second;
    const StepRows& at = rows->second;
    if (live.mtp_pos < 0 || live.mtp_pos > at.first_pos) live.mtp_pos = at.first_pos;
    const int64_t upto = std::min<int64_t>(seq.kv.n_past, static_cast<int64_t>(seq.tokens.size()) - 1);
    if (upto <= live.mtp_pos) continue;
    auto w = want.find(seq.id);
    // Drafts chain at positions n_past .. n_past + k - 2 of its blocks: no further than they go.
    const int64_t k = w == want.end() || upto != seq.kv.n_past
                          ? 0
                          : std::min<int64_t>(w->second, seq.kv.capacity(blocks_.block_size()) - seq.kv.n_past + 1);
    pass.push_back(model::MtpSeq{&seq.kv, live.mtp_pos, seq.tokens.data() + live.mtp_pos + 1, upto - live.mtp_pos,
                                 model::MtpSeq::From::kMain, at.first_row + (live.mtp_pos - at.first_pos), k > 0, k > 0});
    out_rows += upto - live.mtp_pos;
    if (k > 0) drafting.push_back(Job{&seq, k, out_rows - 1});
    live.mtp_pos = upto;
  }
  step_rows_.clear();  // (the next forward keeps other states)
  if (pass.empty()) return;
  size_t drafted = 0;
  std::vector<int32_t> last(drafting.size());
  while (!pass.empty()) {
    model_.forward_mtp(pool_, pass, mtp_logits_);
    const std::vector<ops::ArgmaxRow>& picks = model_.picks();
    // The drafts of this pass, in order of the sequences asking (their logits rows).
    std::vector<Job> next;
    size_t r = 0;
    for (Job& j : drafting) {
      const int32_t d = greedy_pick(picks, mtp_logits_, r++, n_vocab);
      if (d < 0) continue;
      j.seq->draft.push_back(d);
      ++drafted;
      if (static_cast<int64_t>(j.seq->draft.size()) < j.k) next.push_back(j);
    }
    pass.clear();
    for (size_t i = 0; i < next.size(); ++i) {
      SeqSlot& seq = *next[i].seq;
      pass.push_back(model::MtpSeq{&seq.kv, seq.kv.n_past + static_cast<int64_t>(seq.draft.size()) - 1,
                                   &seq.draft.back(), 1, model::MtpSeq::From::kMtp, next[i].out_row, true, true});
      next[i].out_row = static_cast<int64_t>(i);
    }
    drafting = std::move(next);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  note_draft_seconds(draft_s_, s, drafted);
}

ServeEngine::RowEnd ServeEngine::spec_verify(SeqSlot& seq, Live& live, int32_t n_draft, size_t row0, int32_t first,
                                             RowEnd end, std::string& error) {
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  const std::vector<ops::ArgmaxRow>& device_picks = model_.picks();
  const int64_t n_past0 = seq.kv.n_past - 1 - n_draft;  // before the step
  int32_t accepted = 0;
  int32_t prev = first;
  // Row i's pick follows drafted token i - 1: it counts only while that one was accepted.
  while (end == RowEnd::kNone && accepted < n_draft && prev == seq.draft[static_cast<size_t>(accepted)]) {
    ++accepted;
    const size_t row = row0 + static_cast<size_t>(accepted);
    RowPick pick;
    // Greedy rows may have been reduced to their argmax where the logits are; sampled
    // (and penalized) rows were copied whole and are drawn here, a uniform number each.
    const bool reduced = !device_picks.empty() && live.sampler.plain_greedy();
    pick_row(seq, live, std::span<float>(logits_.data() + row * n_vocab, n_vocab),
             reduced ? &device_picks[row] : nullptr, -1.0, pick);
    if (!pick.error.empty()) {
      error = std::move(pick.error);
      end = RowEnd::kError;
      break;
    }
    end = finish_row(seq, live, pick.token, error);
    prev = pick.token;
  }
  live.drafted += n_draft;
  live.accepted += accepted;
  live.acceptance.note(n_draft, accepted, live.draft_class);
  spec_drafted_ += static_cast<uint64_t>(n_draft);
  spec_accepted_ += static_cast<uint64_t>(accepted);
  seq.draft.clear();
  // A sequence that goes on keeps the KV of its pending token and of the accepted drafted
  // ones (one that ends gives all its blocks back).
  if (end == RowEnd::kNone) {
    scheduler_.rollback(seq, n_past0 + 1 + accepted);
    // A hybrid model's state: the checkpoint after the last accepted token's row (the live
    // slot holds the state after the last drafted row, right only when all were accepted).
    const int32_t live_slot = seq.kv.state_slot;
    if (live_slot >= 0 && accepted < n_draft) pool_.copy_state(spec_slot(live_slot, accepted), live_slot);
    // The rolling decode snapshot at a block boundary the accepted tokens crossed: the
    // state after that boundary's row (its checkpoint, or the live state at the last).
    if (const int32_t slot = scheduler_.accepted_snapshot(seq, n_past0); slot >= 0) {
      const int64_t rows = seq.kv.n_past / blocks_.block_size() * blocks_.block_size() - n_past0;
      spill_pending();  // the snapshot whose slot this was, to the disk tier
      pool_.copy_state(rows == 1 + accepted ? live_slot : spec_slot(live_slot, static_cast<int32_t>(rows - 1)), slot);
    }
  }
  return end;
}

}  // namespace hearth::engine

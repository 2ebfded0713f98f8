#include "engine/generator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "engine/model_drafter.h"
#include "engine/ngram_drafter.h"
#include "engine/row_reduce.h"

namespace hearth::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

constexpr std::array<std::string_view, 12> kEndOfTurnTexts = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",  "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "</s>", "<|return|>", "<|EOT|>", "<EOT>", "<|end▁of▁sentence|>",
};

}  // namespace

std::vector<int32_t> end_of_generation_tokens(const tokenizer::Tokenizer& tok) {
  const tokenizer::Vocab& v = tok.vocab();
  std::vector<int32_t> out;
  for (int32_t id : {v.eos, v.eot}) {
    if (v.valid(id)) out.push_back(id);
  }
  for (std::string_view text : kEndOfTurnTexts) {
    const int32_t id = v.find(text);
    if (id != tokenizer::kNoToken && (v.tokens[static_cast<size_t>(id)].attr & tokenizer::kAttrControl) != 0) {
      out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

GenerateResult generate(model::CausalLm& model, model::KvCache& cache, const tokenizer::Tokenizer& tok,
                        const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_text) {
  GenerateResult r;
  r.n_prompt = static_cast<int32_t>(prompt.size());
  if (prompt.empty()) fail(ErrorKind::kInvalidInput, "run", "the prompt is empty (0 tokens)");
  if (static_cast<int64_t>(prompt.size()) >= cache.n_ctx()) {
    fail(ErrorKind::kInvalidInput, "run", "the prompt has " + std::to_string(prompt.size()) +
                                              " tokens, which does not fit the context of " +
                                              std::to_string(cache.n_ctx()) + " (raise --ctx)");
  }
  cache.clear();
  const std::vector<int32_t> eog = end_of_generation_tokens(tok);
  Sampler sampler(options.sampler);
  tokenizer::DecodeOptions decode_options;
  decode_options.strip_space_prefix = false;  // a continuation keeps its leading space
  tokenizer::StreamDecoder stream(tok, decode_options);
  std::vector<int32_t> history = prompt;
  std::optional<grammar::ConstraintMatcher> matcher;
  std::vector<uint32_t> mask;
  if (options.constraint) {
    matcher.emplace(options.constraint);
    mask.assign(static_cast<size_t>(grammar::mask_words(matcher->n_vocab())), 0u);
  }

  const auto t0 = Clock::now();
  std::vector<float> logits;  // reused for every token: no per-token allocation
  std::vector<int32_t> step(1);
  // Greedy or a draw (penalties included, engine::offered_row) with nothing else that reads
  // the logits: the back-end may reduce each step's row to its argmax or drawn token where
  // the logits are (model.picks()), so the row does not cross to the host. A draw's uniform
  // number is taken before the step (the same numbers, in the same order, as drawing afterwards).
  const bool plain = !matcher && options.n_logprobs <= 0;
  ops::RowReduce last{};
  std::vector<ops::PenaltyToken> pens;
  auto offer = [&]() { last = plain ? offered_row(sampler, history, pens, true) : ops::RowReduce{}; };
  offer();
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t chunk = options.prefill_chunk > 0 ? options.prefill_chunk : n_prompt;
  // --spec mtp: the model's MTP block runs after each step of the model over the positions
  // whose next token is known (its row at position t takes h_t and token t + 1), so its KV
  // follows the sequence; mtp_pos: the positions it has run, hid_pos0: the position of
  // the first row of the model's last step (whose hidden states it reads).
  const bool mtp = options.spec.mode == SpecMode::kMtp && plain && options.media == nullptr;
  if (mtp && !model.mtp_enabled()) fail(ErrorKind::kInternal, "run", "--spec mtp without the model's MTP block on");
  int64_t mtp_pos = 0, hid_pos0 = 0;
  std::vector<float> mtp_logits;
  // Runs the MTP block over positions mtp_pos .. upto - 1 (their next tokens in history);
  // with `draft`, its last row's argmax comes back (else -1).
  auto mtp_catch_up = [&](int64_t upto, bool draft) -> int32_t {
    if (upto <= mtp_pos) return -1;
    model::MtpSeq q{&cache.seq(), mtp_pos, history.data() + mtp_pos + 1, upto - mtp_pos, model::MtpSeq::From::kMain,
                    mtp_pos - hid_pos0, draft, draft};
    model.forward_mtp(cache.pool(), {q}, mtp_logits);
    mtp_pos = upto;
    return draft ? greedy_pick(model.picks(), mtp_logits, 0, static_cast<size_t>(model.hparams().n_vocab)) : -1;
  };
  std::vector<int32_t> part;
  for (int64_t at = 0; at < n_prompt; at += chunk) {
    const int64_t end = std::min(n_prompt, at + chunk);
    if (end == n_prompt) {
      part.assign(prompt.begin() + at, prompt.end());
      model.forward(cache, part, false, logits, last, pens, options.media);
    } else {
      // An earlier chunk: only its KV rows (and recurrent state) matter; its last row is
      // reduced to an argmax where the back-end can (nothing crosses to the host).
      part.assign(prompt.begin() + at, prompt.begin() + end);
      model.forward(cache, part, false, logits, ops::RowReduce{ops::RowKind::kArgmax}, {}, options.media);
    }
    if (mtp) {
      hid_pos0 = at;
      // (The last chunk's rows wait for the first draft, after its last row is sampled:
      // that row's token is the sampled one, and the pass would replace its picks.)
      if (end < n_prompt) mtp_catch_up(end, false);
    }
  }
  const auto t_prefill = Clock::now();
  r.prefill_s = seconds(t0, t_prefill);
  Clock::time_point t_first{}, t_last{};
  r.stop_reason = "length";
  // Speculative decoding: the tokens a verification step gave, taken one per turn below.
  // Greedy or sampled alike: a row's token is the sampler's pick (its draw, a uniform number
  // per token: rejection sampling for a point-mass draft, serve_engine_spec.cpp).
  const bool spec = options.spec.mode != SpecMode::kOff && plain && options.media == nullptr;
  const bool greedy = sampler.plain_greedy();
  NgramDrafter drafter;
  // --spec draft: the draft model's own KV for this one sequence (model_drafter.h).
  std::unique_ptr<ModelDrafter> model_drafter;
  if (spec && options.spec.mode == SpecMode::kDraft) {
    if (options.spec.draft == nullptr) fail(ErrorKind::kInvalidInput, "spec", "--spec draft needs --draft-model");
    model_drafter = std::make_unique<ModelDrafter>(*options.spec.draft, model.hparams().n_vocab, cache.n_ctx(), 1,
                                                   ops::KvType::F16, std::max<int64_t>(chunk, 1));
  }
  StepCost cost(options.spec.max_draft + 1);
  double draft_s = 0;  // --spec draft: measured seconds per drafted token
  // Hybrid models: drafts no longer than the cache's spare state slots (per-row checkpoints).
  const int32_t state_slot = cache.seq().state_slot;
  const int64_t spare_slots = state_slot >= 0 ? cache.pool().n_state_slots() - 1 : options.spec.max_draft;
  Acceptance acceptance;
  std::vector<int32_t> verified;
  size_t n_verified = 0;
  while (static_cast<int32_t>(r.tokens.size()) < options.max_tokens) {
    std::vector<float> raw;  // copied only when log-probabilities are asked for
    if (options.n_logprobs > 0) raw = logits;  // log-probabilities of the model, before penalties
    if (matcher) {
      matcher->fill_mask(mask);
      grammar::apply_mask(logits, mask);
    }
    int32_t next = -1;
    const auto& picks = model.picks();
    const bool offered = last.kind != ops::RowKind::kCopy && picks.size() == 1;
    const bool penalized = offered && picks[0].penalized != 0;  // a copied row with its penalties
    if (n_verified < verified.size()) {
      next = verified[n_verified++];
    } else if (offered && (picks[0].bad >= 0 || picks[0].argmax >= 0)) {
      if (picks[0].bad >= 0) {
        fail(ErrorKind::kInternal, "run", "the model's output is not finite (logit of token " +
                                              std::to_string(picks[0].bad) + " is " +
                                              (picks[0].bad_nan != 0 ? "NaN" : "infinite") + ") at generated token " +
                                              std::to_string(r.tokens.size()));
      }
      next = picks[0].argmax;
    } else if (last.kind == ops::RowKind::kDraw || penalized) {
      // The row is here (penalties applied or not, as picks says): sampled here, a draw
      // with the number already taken for it.
      next = sampler.sample(logits, history, last.u, penalized);
    } else {
      next = sampler.sample(logits, history);
    }
    bool grammar_done = false;
    if (matcher) {
      if (!matcher->accept(next)) {
        fail(ErrorKind::kInternal, "run", "the output constraint allows no next token after " +
                                               std::to_string(r.tokens.size()) + " tokens");
      }
      grammar_done = matcher->terminated();
      if (!grammar_done && matcher->completed()) {
        matcher->fill_mask(mask);
        grammar_done = grammar::only_stop_allowed(mask, eog, matcher->n_vocab());
      }
    }
    const auto now = Clock::now();
    if (r.tokens.empty()) {
      t_first = now;
      r.ttft_s = seconds(t0, now);
    }
    if (std::binary_search(eog.begin(), eog.end(), next)) {
      r.stop_reason = "stop";
      break;
    }
    t_last = now;
    r.tokens.push_back(next);
    history.push_back(next);
    if (options.n_logprobs > 0) {
      r.logprobs.push_back({next, token_logprob(raw, next), top_logprobs(raw, options.n_logprobs)});
    }
    const std::string piece = stream.push(next);
    if (!piece.empty()) {
      r.text += piece;
      if (on_text) on_text(piece);
    }
    if (grammar_done) {
      r.stop_reason = "stop";
      break;
    }
    if (static_cast<int32_t>(r.tokens.size()) >= options.max_tokens) break;
    // Positions before `next` (its own is computed by the next step): n_past, except that
    // a verification step has already computed the accepted tokens still queued.
    if (static_cast<int64_t>(history.size()) - 1 >= cache.n_ctx()) {
      r.stop_reason = "context";
      break;
    }
    if (n_verified < verified.size()) continue;  // verified already: no step for it
    if (spec) {
      // Drafted tokens after `next`, each with a row of logits; the target's greedy pick
      // at each row is the next token as long as the draft agreed up to it.
      // Prompt lookup: the match first, whose length picks the acceptance the draft's
      // length is judged by (a draft model's drafts are all class 0).
      const NgramMatch match = model_drafter || mtp ? NgramMatch{} : drafter.find(history);
      const int cls = match.n;
      const int64_t k = std::min<int64_t>({options.spec.adaptive
                                               ? draft_length(cost, 1, 1, acceptance.p(cls), options.spec.max_draft,
                                                              draft_s)
                                               : options.spec.max_draft,
                                           options.max_tokens - static_cast<int64_t>(r.tokens.size()) - 1,
                                           cache.n_ctx() - cache.n_past() - 1, spare_slots});
      std::vector<int32_t> draft;
      if (k > 0 && model_drafter) {
        std::vector<ModelDrafter::Job> job{{0, history, static_cast<int32_t>(k), {}}};
        const auto t_draft = Clock::now();
        model_drafter->draft(job);
        draft = std::move(job[0].out);
        if (!draft.empty()) note_draft_seconds(draft_s, seconds(t_draft, Clock::now()), draft.size());
      } else if (k > 0 && mtp) {
        // The MTP block's own rows up to `next` (the last takes it), then one pass a draft:
        // each on the block's output state and the draft before it.
        const auto t_draft = Clock::now();
        const int64_t n_past = cache.n_past();
        const int64_t rows = n_past - mtp_pos;
        int32_t d = mtp_catch_up(n_past, true);
        int64_t prev_row = rows - 1;
        while (d >= 0) {
          draft.push_back(d);
          if (static_cast<int64_t>(draft.size()) >= k) break;
          model::MtpSeq q{&cache.seq(), n_past + static_cast<int64_t>(draft.size()) - 1, &draft.back(), 1,
                          model::MtpSeq::From::kMtp, prev_row, true, true};
          model.forward_mtp(cache.pool(), {q}, mtp_logits);
          prev_row = 0;
          d = greedy_pick(model.picks(), mtp_logits, 0, static_cast<size_t>(model.hparams().n_vocab));
        }
        if (!draft.empty()) note_draft_seconds(draft_s, seconds(t_draft, Clock::now()), draft.size());
      } else if (k > 0) {
        draft = NgramDrafter::copy(history, match, static_cast<int32_t>(k));
      }
      if (k <= 0) {
        acceptance.idle(cls);
        note_draft_seconds(draft_s, 0, 0);  // (a dear drafter is tried again later)
      }
      if (!draft.empty()) {
        std::vector<int32_t> in(1, next);
        in.insert(in.end(), draft.begin(), draft.end());
        const int64_t n_past = cache.n_past();
        const auto t_step = Clock::now();
        // Each row attends as a one-token step would (BatchSeq::decode_rows): the same logits.
        model::BatchSeq b{&cache.seq(), in.data(), static_cast<int64_t>(in.size()), true, greedy};
        b.n_logits = b.n_tokens;
        b.decode_rows = true;
        // Hybrid models: the state after each row but the last, in spare slots 1 .. (the
        // recurrence runs a row per pass: the one-token step's arithmetic).
        if (state_slot >= 0) {
          for (size_t j = 0; j < draft.size(); ++j) {
            b.snaps.push_back({static_cast<int32_t>(j + 1), static_cast<int32_t>(j + 1)});
          }
        }
        model.forward_batch(cache.pool(), {b}, logits);
        hid_pos0 = n_past;
        cost.note(b.n_tokens, seconds(t_step, Clock::now()));
        // The argmax of each row, where the back-end reduced greedy rows; else rows copied.
        const auto& rows = greedy ? model.picks() : std::vector<ops::ArgmaxRow>{};
        const auto n_vocab = static_cast<size_t>(model.hparams().n_vocab);
        verified.clear();
        n_verified = 0;
        std::vector<int32_t> seen = history;  // row i's history: with the i tokens accepted before it
        for (size_t i = 0; i < in.size(); ++i) {
          if (rows.size() == in.size() && rows[i].bad >= 0) {
            fail(ErrorKind::kInternal, "run", "the model's output is not finite (logit of token " +
                                                  std::to_string(rows[i].bad) + ") at generated token " +
                                                  std::to_string(r.tokens.size() + i));
          }
          verified.push_back(rows.size() == in.size()
                                 ? rows[i].argmax
                                 : sampler.sample(std::span<float>(logits.data() + i * n_vocab, n_vocab), seen));
          if (i == draft.size() || verified.back() != draft[i]) break;
          seen.push_back(verified.back());
        }
        const auto accepted = static_cast<int32_t>(verified.size() - 1);
        r.drafted += static_cast<int32_t>(draft.size());
        r.accepted += accepted;
        acceptance.note(static_cast<int32_t>(draft.size()), accepted, cls);
        cache.seq().n_past = n_past + 1 + accepted;  // the rejected rows are written over later
        if (state_slot >= 0 && static_cast<size_t>(accepted) < draft.size()) {
          cache.pool().copy_state(1 + accepted, state_slot);  // the state at the last accepted token
        }
        continue;
      }
    }
    if (mtp) {  // the MTP block's rows before this step's (whose hidden states it replaces)
      mtp_catch_up(cache.n_past(), false);
      hid_pos0 = cache.n_past();
    }
    step[0] = next;
    offer();
    const auto t_step = Clock::now();
    model.forward(cache, step, false, logits, last, pens, options.media);
    if (spec) cost.note(1, seconds(t_step, Clock::now()));
  }
  const std::string tail = stream.flush();
  if (!tail.empty()) {
    r.text += tail;
    if (on_text) on_text(tail);
  }
  if (r.tokens.size() > 1) r.decode_s = seconds(t_first, t_last);
  return r;
}

}  // namespace hearth::engine

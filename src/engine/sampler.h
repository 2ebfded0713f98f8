// Token sampling: repetition / presence / frequency penalties over the recent
// history, then greedy (temperature <= 0) or top-k -> top-p -> min-p ->
// temperature -> a draw from a seeded generator (same seed, same tokens).
// One Sampler per sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace hearth::engine {

struct SamplerParams {
  float temperature = 0.0f;      // <= 0: greedy
  int32_t top_k = 40;            // <= 0: off
  float top_p = 0.95f;           // >= 1: off
  float min_p = 0.05f;           // <= 0: off
  float repeat_penalty = 1.0f;   // 1: off; > 1 discourages tokens seen in the last repeat_last_n
  float presence_penalty = 0.0f;   // subtracted once from a seen token's logit
  float frequency_penalty = 0.0f;  // subtracted per occurrence
  int32_t repeat_last_n = 64;    // history window for the penalties
  uint64_t seed = 0;
};

// Throws Error(kInvalidInput) naming the parameter when a value is out of range.
void validate(const SamplerParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);
  // Picks the next token from logits ([n_vocab], modified in place by the penalties)
  // given the tokens so far (prompt + generated).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);
  // The same with the draw's uniform number u (in [0, 1)) taken ahead by next_uniform():
  // a temperature draw is the token where u x the candidates' total probability falls
  // (one uniform number per sampled token, none for greedy).
  // penalties_applied: the row already has this sampler's penalties applied (a back-end
  // applied them where the logits are, then copied the row: ops::ArgmaxRow::penalized).
  int32_t sample(std::span<float> logits, std::span<const int32_t> history, double u, bool penalties_applied = false);
  double next_uniform();
  // Whether a repetition, presence or frequency penalty is on.
  bool has_penalties() const {
    return p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  }
  // The penalties' input: each distinct token of the last repeat_last_n of history with its
  // number of occurrences there, by increasing token (empty when no penalty is on). A
  // penalized logit l becomes (l > 0 ? l / repeat_penalty : l x repeat_penalty) - (count
  // x frequency_penalty + presence_penalty), each operation rounded to float; tokens outside
  // the row are ignored.
  void penalty_counts(std::span<const int32_t> history, std::vector<std::pair<int32_t, int32_t>>& out) const;
  // A temperature draw (top-k, top-p, min-p, penalties): a function of the row, the
  // parameters, the penalty counts and u alone, so a back-end may compute it where
  // the logits are (ops::RowReduce). Its arithmetic, which the back-end repeats exactly:
  // p(l) = exp_shifted_one(l, max, s) (s = 1 for the filters, draw_scale() for the draw);
  // totals over the whole vocabulary summed in double per 1024 tokens in sum_of's order,
  // the blocks in order; ranks by decreasing logit, ties by token id; top-k keeps the
  // first top_k ranks; top-p cuts at the first rank whose running double sum of p(l)
  // reaches top_p x total; min-p keeps the ranks before the first with p(l) < min_p; with
  // neither top-k nor top-p, min-p keeps tokens in id order. The draw: r = u x the kept
  // tokens' total (summed one by one in their order, or by blocks when every token is
  // kept unranked), then the first token whose running sum exceeds r.
  // (Penalties come first, as penalty_counts states; a back-end given the counts may apply them.)
  bool drawable() const { return p_.temperature > 0.0f; }
  const SamplerParams& params() const { return p_; }
  float draw_scale() const { return 1.0f / p_.temperature; }
  // Greedy with no penalties: sample() returns the row's first largest value, whatever
  // the history (so the argmax alone, computed elsewhere, is the sample).
  bool plain_greedy() const {
    return p_.temperature <= 0.0f && p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f &&
           p_.frequency_penalty == 0.0f;
  }

 private:
  void apply_penalties(std::span<float> logits, std::span<const int32_t> history);
  std::vector<std::pair<int32_t, int32_t>> counts_;
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> candidates_;
  std::vector<float> probs_;
  std::vector<double> block_sums_;  // probs_ in blocks of kSumBlock (the unranked draw)
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// log-softmax of logits at `token`, and the k most likely tokens with their
// log-probabilities (largest first).
float token_logprob(std::span<const float> logits, int32_t token);
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace hearth::engine

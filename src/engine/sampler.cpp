#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "engine/logit_scan.h"

namespace hearth::engine {
namespace {

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  fail(ErrorKind::kInvalidInput, "sampler", name + " " + why);
}

double log_sum_exp(std::span<const float> logits, float max_logit) {
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  return std::log(sum) + max_logit;
}

// Sums of many probabilities: 8 running sums (not one chain of dependent additions, which
// took ~250 us for a 248k-entry row), then added up.
double sum_of(const float* p, size_t n) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) a[k] += static_cast<double>(p[i + static_cast<size_t>(k)]);
  }
  double s = 0.0;
  for (; i < n; ++i) s += static_cast<double>(p[i]);
  for (double v : a) s += v;
  return s;
}

constexpr size_t kSumBlock = 1024;

// The total of probabilities p[0 .. n): sum_of per kSumBlock, the blocks added in order
// (block_sums holds the blocks' sums). Every total of a draw is taken this way, so that a
// back-end can repeat it (ops::RowReduce).
double blocked_total(const float* p, size_t n, std::vector<double>& block_sums) {
  block_sums.resize((n + kSumBlock - 1) / kSumBlock);
  double sum = 0.0;
  for (size_t b = 0; b < block_sums.size(); ++b) {
    block_sums[b] = sum_of(p + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
    sum += block_sums[b];
  }
  return sum;
}

}  // namespace

void validate(const SamplerParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) bad("temperature", "must be >= 0");
  if (p.top_k < 0) bad("top_k", "must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p", "must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p", "must be in [0, 1]");
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) bad("repeat_penalty", "must be > 0");
  if (!std::isfinite(p.presence_penalty) || std::fabs(p.presence_penalty) > 2.0f) {
    bad("presence_penalty", "must be in [-2, 2]");
  }
  if (!std::isfinite(p.frequency_penalty) || std::fabs(p.frequency_penalty) > 2.0f) {
    bad("frequency_penalty", "must be in [-2, 2]");
  }
  if (p.repeat_last_n < 0) bad("repeat_last_n", "must be >= 0");
}

Sampler::Sampler(const SamplerParams& params) : p_(params), rng_(params.seed) { validate(p_); }

void Sampler::penalty_counts(std::span<const int32_t> history, std::vector<std::pair<int32_t, int32_t>>& out) const {
  out.clear();
  if (!has_penalties() || p_.repeat_last_n == 0 || history.empty()) return;
  const size_t n = std::min(history.size(), static_cast<size_t>(p_.repeat_last_n));
  std::unordered_map<int32_t, int32_t> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) {
    if (history[i] >= 0) ++counts[history[i]];  // (an image row's key id is negative: no token)
  }
  out.assign(counts.begin(), counts.end());
  std::sort(out.begin(), out.end());
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  penalty_counts(history, counts_);
  for (const auto& [tok, count] : counts_) {
    if (tok < 0 || static_cast<size_t>(tok) >= logits.size()) continue;
    float& l = logits[static_cast<size_t>(tok)];
    // Repetition penalty as in CTRL / llama.cpp: shrink positive logits, grow negative ones.
    l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    l -= static_cast<float>(count) * p_.frequency_penalty + p_.presence_penalty;
  }
}

double Sampler::next_uniform() {
  return std::generate_canonical<double, std::numeric_limits<double>::digits>(rng_);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  if (p_.temperature <= 0.0f) {
    apply_penalties(logits, history);
    return static_cast<int32_t>(argmax_first(logits));
  }
  return sample(logits, history, next_uniform());
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history, double u, bool penalties_applied) {
  if (!penalties_applied) apply_penalties(logits, history);
  if (p_.temperature <= 0.0f) return static_cast<int32_t>(argmax_first(logits));
  const size_t vocab = logits.size();
  const float max_l = logits[static_cast<size_t>(argmax_first(logits))];
  // exp(l - max_l) of every token where a step needs them all (exp_shifted: vectorised,
  // within 2e-6 of std::exp): min-p's filter, top-p's total, the draw without ranking.
  auto all_exps = [&](float scale) {
    probs_.resize(vocab);
    exp_shifted(logits, max_l, scale, probs_.data());
  };
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  candidates_.resize(vocab);
  std::iota(candidates_.begin(), candidates_.end(), 0);
  size_t n = vocab;
  bool ranked = false;  // candidates_ sorted by logit (else token ids in order)
  const bool top_k_on = p_.top_k > 0 && static_cast<size_t>(p_.top_k) < vocab;
  if (!top_k_on && p_.top_p >= 1.0f) {
    // No ranking needed (the OpenAI defaults): every token stays a candidate, in id
    // order, except those min-p cuts. Sorting a whole vocabulary per token would cost
    // milliseconds per sequence and step.
    if (p_.min_p > 0.0f) {
      all_exps(1.0f);
      n = 0;
      for (size_t i = 0; i < vocab; ++i) {
        if (probs_[i] >= p_.min_p) candidates_[n++] = static_cast<int32_t>(i);
      }
    }
  } else {
    ranked = true;
    // Candidates by decreasing logit. Top-k sorts only k; top-p alone first sorts the
    // best 256, then, when they hold less than top_p, the tokens of the highest 1/16-nat
    // buckets of l - max_l that hold it (they are the top tokens: the same order and cut
    // as a full sort), and sorts everything only if rounding still leaves the cut short.
    double total = 0.0;
    if (p_.top_p < 1.0f) {
      all_exps(1.0f);
      total = blocked_total(probs_.data(), vocab, block_sums_);
    }
    // The cut: the first rank whose running sum of exp(l - max_l) reaches top_p x total.
    const double threshold = static_cast<double>(p_.top_p) * total;
    size_t sorted = vocab;
    if (top_k_on) {
      sorted = n = static_cast<size_t>(p_.top_k);
    } else if (vocab > 256) {
      sorted = 256;
    }
    constexpr int kBuckets = 1024;
    constexpr float kPerNat = 16.0f;
    auto bucket = [&](float l) {  // 0 for the top; -inf and far below: the last
      const float d = (max_l - l) * kPerNat;
      return d >= static_cast<float>(kBuckets - 1) ? kBuckets - 1 : static_cast<int>(d);
    };
    bool by_buckets = false;
    for (;;) {
      if (by_buckets) {
        std::sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(sorted), by_logit);
      } else {
        std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(sorted),
                          candidates_.end(), by_logit);
      }
      if (p_.top_p >= 1.0f) break;
      double cum = 0.0;
      size_t cut = 0;
      for (size_t i = 0; i < sorted && cut == 0; ++i) {
        cum += static_cast<double>(probs_[static_cast<size_t>(candidates_[i])]);
        if (cum >= threshold) cut = i + 1;
      }
      if (cut != 0) {
        n = cut;
        break;
      }
      if (sorted == vocab || top_k_on) break;  // every candidate kept
      std::iota(candidates_.begin(), candidates_.end(), 0);
      if (!by_buckets) {
        by_buckets = true;
        std::vector<double> mass(kBuckets, 0.0);
        for (size_t i = 0; i < vocab; ++i) mass[static_cast<size_t>(bucket(logits[i]))] += probs_[i];
        const double want = threshold * (1.0 + 1e-6);
        double acc = 0.0;
        int last = 0;
        for (; last < kBuckets - 1; ++last) {
          acc += mass[static_cast<size_t>(last)];
          if (acc >= want) break;
        }
        const auto mid = std::partition(candidates_.begin(), candidates_.end(),
                                        [&](int32_t t) { return bucket(logits[static_cast<size_t>(t)]) <= last; });
        sorted = static_cast<size_t>(mid - candidates_.begin());
      } else {
        sorted = vocab;
      }
    }
    if (p_.min_p > 0.0f) {
      // Sorted: the first is the most likely (exp(0) = 1); keep p >= min_p * p_max.
      size_t keep = 1;
      while (keep < n && exp_shifted_one(logits[candidates_[keep]], max_l, 1.0f) >= p_.min_p) ++keep;
      n = keep;
    }
  }
  // Temperature, then a draw.
  double sum = 0.0;
  size_t from = 0;  // where the draw's running sum starts (the block that holds r, for every token)
  double acc = 0.0;
  if (n == vocab && !ranked) {  // every token, in id order: sums per block, then the block of r
    all_exps(1.0f / p_.temperature);
    sum = blocked_total(probs_.data(), n, block_sums_);
    const double r = u * sum;  // (what std::uniform_real_distribution(0, sum) makes of u)
    for (size_t b = 0; b + 1 < block_sums_.size() && r >= acc + block_sums_[b]; ++b) {
      acc += block_sums_[b];
      from = (b + 1) * kSumBlock;
    }
    for (size_t i = from; i < n; ++i) {
      acc += probs_[i];
      if (r < acc) return candidates_[i];
    }
  } else {
    probs_.resize(n);
    const float scale = 1.0f / p_.temperature;
    for (size_t i = 0; i < n; ++i) {
      probs_[i] = exp_shifted_one(logits[candidates_[i]], max_l, scale);
      sum += probs_[i];
    }
    const double r = u * sum;
    for (size_t i = 0; i < n; ++i) {
      acc += probs_[i];
      if (r < acc) return candidates_[i];
    }
  }
  // Rounding left r at the very top: the last candidate that can be drawn (a token a
  // grammar mask set to -inf has probability 0 and is never returned).
  for (size_t i = n; i-- > 0;) {
    if (probs_[i] > 0.0f) return candidates_[i];
  }
  return candidates_[n - 1];
}

float token_logprob(std::span<const float> logits, int32_t token) {
  const float max_l = *std::max_element(logits.begin(), logits.end());
  return static_cast<float>(logits[static_cast<size_t>(token)] - log_sum_exp(logits, max_l));
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t k) {
  const float max_l = *std::max_element(logits.begin(), logits.end());
  const double lse = log_sum_exp(logits, max_l);
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  const size_t kk = std::min(idx.size(), static_cast<size_t>(std::max(0, k)));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (size_t i = 0; i < kk; ++i) out.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
  return out;
}

}  // namespace hearth::engine

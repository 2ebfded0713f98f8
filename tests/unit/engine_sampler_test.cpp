#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/logit_scan.h"
#include "engine/sampler.h"

using hearth::engine::Sampler;
using hearth::engine::SamplerParams;

namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

std::map<int, int> histogram(const SamplerParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::map<int, int> h;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ++h[s.sample(l, {})];
  }
  return h;
}

}  // namespace

TEST(Sampler, GreedyPicksTheLargestLogit) {
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  auto l = logits_of({0.1f, 3.0f, 2.9f, -1.0f});
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  std::vector<float> base(100);
  for (int i = 0; i < 100; ++i) base[i] = std::sin(static_cast<float>(i));
  Sampler a(p), b(p);
  std::vector<int> ta, tb;
  for (int i = 0; i < 50; ++i) {
    auto la = base, lb = base;
    ta.push_back(a.sample(la, {}));
    tb.push_back(b.sample(lb, {}));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 99;
  Sampler c(p);
  std::vector<int> tc;
  for (int i = 0; i < 50; ++i) {
    auto l = base;
    tc.push_back(c.sample(l, {}));
  }
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopKKeepsOnlyKTokens) {
  SamplerParams p;
  p.temperature = 5.0f;  // flat: every surviving token is drawn
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  auto h = histogram(p, logits_of({1.0f, 4.0f, 3.0f, 2.0f}), 2000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[2], 0);
}

TEST(Sampler, TopPCutsTheTail) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.top_p = 0.5f;
  // Token 0 has probability ~0.84 at temperature 1: it alone covers top_p.
  auto h = histogram(p, logits_of({3.0f, 1.0f, 0.0f, 0.0f}), 500);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 0);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplerParams p;
  p.temperature = 3.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.2f;
  // exp(-2) = 0.135 < 0.2 of the top token's probability: token 2 never drawn.
  auto h = histogram(p, logits_of({2.0f, 1.5f, 0.0f}), 2000);
  EXPECT_EQ(h.count(2), 0u);
  EXPECT_GT(h[0], 0);
  EXPECT_GT(h[1], 0);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  SamplerParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  auto logits = logits_of({1.0f, 0.0f});
  p.temperature = 0.25f;
  auto cold = histogram(p, logits, 4000);
  p.temperature = 4.0f;
  auto hot = histogram(p, logits, 4000);
  // P(0) = 1/(1+e^-4) = 0.982 cold, 1/(1+e^-0.25) = 0.562 hot.
  EXPECT_NEAR(cold[0] / 4000.0, 0.982, 0.02);
  EXPECT_NEAR(hot[0] / 4000.0, 0.562, 0.04);
}

TEST(Sampler, RepetitionPenaltyChangesTheGreedyChoice) {
  SamplerParams p;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  auto l = logits_of({2.0f, 1.5f, 0.0f});
  std::vector<int32_t> history = {0};
  EXPECT_EQ(s.sample(l, history), 1);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  auto neg = logits_of({-1.0f, -1.5f});
  EXPECT_EQ(s.sample(neg, history), 1);  // -1 * 2 = -2 < -1.5
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplerParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  auto l = logits_of({3.0f, 2.0f, 1.0f});
  std::vector<int32_t> history = {0, 0, 0, 1};
  s.sample(l, history);
  EXPECT_FLOAT_EQ(l[0], 3.0f - 3 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[1], 2.0f - 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(l[2], 1.0f);
}

TEST(Sampler, PenaltyWindowOnlyCoversRecentTokens) {
  SamplerParams p;
  p.repeat_penalty = 4.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  auto l = logits_of({2.0f, 1.9f});
  std::vector<int32_t> history = {0, 1, 1};  // token 0 is outside the window of 2
  EXPECT_EQ(s.sample(l, history), 0);
}

TEST(Sampler, RejectsBadParameters) {
  SamplerParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, hearth::Error);
  p = {};
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler{p}, hearth::Error);
  p = {};
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, hearth::Error);
  p = {};
  p.min_p = 1.5f;
  EXPECT_THROW(Sampler{p}, hearth::Error);
}

TEST(Logprobs, SumToOneAndRankCorrectly) {
  auto l = logits_of({1.0f, 3.0f, 2.0f});
  auto top = hearth::engine::top_logprobs(l, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 2);
  EXPECT_EQ(top[2].token, 0);
  double total = 0;
  for (const auto& t : top) total += std::exp(t.logprob);
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_NEAR(hearth::engine::token_logprob(l, 1), top[0].logprob, 1e-6);
}

// A large vocabulary: with no truncation (the OpenAI defaults) tokens are drawn without
// ranking, and the draw frequencies follow softmax(logits / T).
TEST(Sampler, UntruncatedLargeVocabularyFollowsSoftmax) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  std::vector<float> logits(5000, -10.0f);
  logits[4321] = 2.0f;
  logits[17] = 1.0f;
  logits[2500] = 0.0f;
  double z = std::exp(2.0) + std::exp(1.0) + 1.0 + 4997 * std::exp(-10.0);
  auto h = histogram(p, logits, 20000);
  EXPECT_NEAR(h[4321] / 20000.0, std::exp(2.0) / z, 0.02);
  EXPECT_NEAR(h[17] / 20000.0, std::exp(1.0) / z, 0.02);
  EXPECT_NEAR(h[2500] / 20000.0, 1.0 / z, 0.02);
}

// Top-p alone over a flat vocabulary larger than the first sorted batch (256): the
// nucleus needs most tokens, so the cut is found after a full sort.
TEST(Sampler, TopPOverAFlatLargeVocabulary) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.top_p = 0.5f;
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = -0.001f * static_cast<float>(i);  // almost flat
  auto h = histogram(p, logits, 4000);
  int max_token = 0;
  for (const auto& [tok, count] : h) max_token = std::max(max_token, tok);
  // Half the mass is in tokens 0 .. m with 1 - e^(-0.001 m) = 0.5 (1 - e^-1): m ~ 380.
  EXPECT_GT(max_token, 340);
  EXPECT_LE(max_token, 381);
}

// Top-p alone on a flat distribution (the best 256 tokens hold far less than top_p): the
// sampler sorts only the top buckets' tokens; its draws equal those of a plain full sort
// with the same cut, candidates and random draw, for many seeds.
TEST(Sampler, TopPOnAFlatDistributionMatchesAFullSort) {
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(5000);
  for (auto& l : logits) l = nd(gen);
  logits[17] = logits[4000];  // a tie, broken by the lower id
  SamplerParams p;
  p.temperature = 0.9f;
  p.top_k = 0;
  p.top_p = 0.95f;
  p.min_p = 0.0f;
  const size_t vocab = logits.size();
  const float max_l = *std::max_element(logits.begin(), logits.end());
  std::vector<float> e(vocab);
  hearth::engine::exp_shifted(logits, max_l, 1.0f, e.data());
  double total = 0.0;
  for (float v : e) total += v;
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  double cum = 0.0;
  size_t cut = vocab;
  for (size_t i = 0; i < vocab; ++i) {
    cum += std::exp(static_cast<double>(logits[order[i]]) - max_l) / total;
    if (cum >= p.top_p) {
      cut = i + 1;
      break;
    }
  }
  ASSERT_GT(cut, 256u);  // the fast path cannot take this case
  ASSERT_LT(cut, vocab);
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    p.seed = seed;
    Sampler s(p);
    auto l = logits;
    const int32_t got = s.sample(l, {});
    // The reference draw: the same generator, the same probabilities over the cut.
    std::mt19937_64 rng(seed);
    std::vector<double> probs(cut);
    double sum = 0.0;
    for (size_t i = 0; i < cut; ++i) {
      probs[i] = std::exp((logits[order[i]] - max_l) / p.temperature);
      sum += probs[i];
    }
    std::uniform_real_distribution<double> uniform(0.0, sum);
    const double r = uniform(rng);
    double acc = 0.0;
    int32_t want = order[cut - 1];
    for (size_t i = 0; i < cut; ++i) {
      acc += probs[i];
      if (r < acc) {
        want = order[i];
        break;
      }
    }
    ASSERT_EQ(got, want) << "seed " << seed;
  }
}

namespace {
// A uniform number taken ahead (next_uniform) and passed in draws what sample() draws
// with the same seed, on every path of the sampler.
TEST(SamplerUniformAhead, SameTokensAsDrawingInside) {
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> row(5000);
  for (auto& x : row) x = nd(gen);
  for (int mode = 0; mode < 4; ++mode) {
    hearth::engine::SamplerParams p;
    p.temperature = 0.8f;
    p.seed = 99;
    p.top_k = mode == 1 ? 50 : 0;
    p.top_p = mode == 2 ? 0.9f : 1.0f;
    p.min_p = mode == 3 ? 0.05f : 0.0f;
    hearth::engine::Sampler a(p), b(p);
    EXPECT_TRUE(a.drawable());
    for (int i = 0; i < 20; ++i) {
      std::vector<float> ra = row, rb = row;
      const int32_t ta = a.sample(ra, {});
      const double u = b.next_uniform();
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
      EXPECT_EQ(ta, b.sample(rb, {}, u)) << "mode " << mode << " draw " << i;
    }
  }
}
}  // namespace

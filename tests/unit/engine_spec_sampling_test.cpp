// Speculative decoding of sampled requests (serve_engine_spec.cpp): a drafted token x is
// accepted with probability p(x) (rejection sampling with the prompt-lookup draft's point
// mass q) and a rejection draws from p without x, renormalised, where p is the sampler's
// final distribution (temperature, top-k, top-p, min-p). The engine does it with the
// sampler's own draw: accepted when the row's draw is x.
//   - Statistically, over many draws with a fixed seed: the acceptance rate is p(x), the
//     tokens after a rejection follow the residual, and the output follows p (chi-square
//     bounds), for drafted tokens of high, low and zero probability under several sampler
//     settings; and the same check fails for two wrong rules (a rejection that draws from
//     p instead of the residual, and an acceptance of min(1, p(x) / q) with q = 1/2), so
//     it can tell.
//   - End to end on the default model: seeded sampled requests (penalties too) give the
//     same tokens with --spec ngram as without, through ServeEngine (alone and batched)
//     and engine::generate, with drafts accepted.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"
#include "spec_test_util.h"

namespace engine = hearth::engine;
namespace model = hearth::model;
using spec_test::Loaded;
using spec_test::loaded;
using spec_test::Outcome;
using spec_test::serve;
using namespace std::chrono_literals;

namespace {

// ---- The rule, statistically ---------------------------------------------------------

// The sampler's final distribution of `logits` computed here from its documented rules in
// double precision: rank by logit (ties by id), top-k, top-p (first rank whose running
// sum of exp(l - max) reaches top_p x the total), min-p (exp(l - max) >= min_p), then
// softmax at the temperature over what is kept.
std::vector<double> exact(const std::vector<float>& logits, const engine::SamplerParams& sp) {
  const size_t V = logits.size();
  std::vector<int32_t> rank(V);
  std::iota(rank.begin(), rank.end(), 0);
  std::sort(rank.begin(), rank.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const double mx = logits[static_cast<size_t>(rank[0])];
  size_t n = V;
  if (sp.top_k > 0) n = std::min(n, static_cast<size_t>(sp.top_k));
  if (sp.top_p < 1.0f) {
    double total = 0;
    for (float l : logits) total += std::exp(l - mx);
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += std::exp(logits[static_cast<size_t>(rank[i])] - mx);
      if (cum >= sp.top_p * total) {
        n = i + 1;
        break;
      }
    }
  }
  if (sp.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && std::exp(logits[static_cast<size_t>(rank[keep])] - mx) >= sp.min_p) ++keep;
    n = keep;
  }
  std::vector<double> p(V, 0.0);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<size_t>(rank[i]);
    sum += p[t] = std::exp((logits[t] - mx) / sp.temperature);
  }
  for (double& v : p) v /= sum;
  return p;
}

// One verification of drafted token x: (accepted, token).
using Rule = std::function<std::pair<bool, int32_t>(engine::Sampler&, std::vector<float>, int32_t x)>;

// The engine's rule: the row's draw (one uniform number), accepted when it is x.
std::pair<bool, int32_t> engine_rule(engine::Sampler& s, std::vector<float> row, int32_t x) {
  const int32_t t = s.sample(row, {});
  return {t == x, t};
}

// Pearson's chi-square of counts against probabilities (cells with p > 0; a count in a cell
// of probability 0 makes it infinite) and its degrees of freedom.
std::pair<double, int> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  double x2 = 0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      if (counts[i] > 0) return {std::numeric_limits<double>::infinity(), 1};
      continue;
    }
    const double e = p[i] * static_cast<double>(total);
    x2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++cells;
  }
  return {x2, std::max(1, cells - 1)};
}

// A chi-square statistic far in its upper tail: beyond mean + 7 standard deviations (for
// these degrees of freedom the chance is below 1e-6, so a correct rule passes with a fixed
// seed and any other seed alike).
bool too_large(std::pair<double, int> c) { return c.first > c.second + 7.0 * std::sqrt(2.0 * c.second); }

struct Verdict {
  bool acceptance_ok = false, residual_ok = false, output_ok = false;
  double accept_rate = 0, p_x = 0;
  std::pair<double, int> residual_x2, output_x2;  // chi-square and degrees of freedom
  bool ok() const { return acceptance_ok && residual_ok && output_ok; }
};

// N verifications of drafted token x under `rule` with a seeded sampler.
Verdict check(const Rule& rule, const std::vector<float>& logits, const engine::SamplerParams& sp, int32_t x, int N) {
  const std::vector<double> p = exact(logits, sp);
  engine::SamplerParams seeded = sp;
  seeded.seed = 20261207;
  engine::Sampler s(seeded);
  std::vector<int64_t> out(logits.size(), 0), after_reject(logits.size(), 0);
  int64_t accepted = 0;
  for (int i = 0; i < N; ++i) {
    const auto [acc, t] = rule(s, logits, x);
    ++out[static_cast<size_t>(t)];
    if (acc) {
      EXPECT_EQ(t, x);
      ++accepted;
    } else {
      ++after_reject[static_cast<size_t>(t)];
    }
  }
  Verdict v;
  const double px = p[static_cast<size_t>(x)];
  const double sd = std::sqrt(std::max(px * (1 - px), 1e-12) / N);
  v.acceptance_ok = std::fabs(static_cast<double>(accepted) / N - px) <= 6 * sd + 1e-12;
  std::vector<double> residual = p;
  residual[static_cast<size_t>(x)] = 0;
  const double rest = 1 - px;
  for (double& r : residual) r /= rest;
  v.accept_rate = static_cast<double>(accepted) / N;
  v.p_x = px;
  v.residual_x2 = chi_square(after_reject, residual);
  v.output_x2 = chi_square(out, p);
  v.residual_ok = !too_large(v.residual_x2);
  v.output_ok = !too_large(v.output_x2);
  std::printf("  p(x) %.4f accepted %.4f; residual chi2 %.1f (df %d); output chi2 %.1f (df %d)\n", px, v.accept_rate,
              v.residual_x2.first, v.residual_x2.second, v.output_x2.first, v.output_x2.second);
  return v;
}

std::vector<float> test_logits() {
  // 64 tokens, logits spread over ~9 nats without ties near the cuts.
  std::vector<float> l(64);
  for (size_t i = 0; i < l.size(); ++i) {
    l[i] = 3.0f - 0.14f * static_cast<float>((i * 23) % 64) + 0.01f * static_cast<float>(i % 7);
  }
  return l;
}

}  // namespace

TEST(SpecSampling, AcceptanceAndResidualFollowTheTargetDistribution) {
  const std::vector<float> logits = test_logits();
  std::vector<engine::SamplerParams> settings(4);
  settings[0].temperature = 1.0f;  // top-k 40, top-p 0.95, min-p 0.05 (the defaults)
  settings[1].temperature = 0.7f;
  settings[1].top_k = 12;
  settings[1].top_p = 1.0f;
  settings[1].min_p = 0.0f;
  settings[2].temperature = 1.3f;
  settings[2].top_k = 0;
  settings[2].top_p = 0.8f;
  settings[2].min_p = 0.0f;
  settings[3].temperature = 0.9f;
  settings[3].top_k = 0;
  settings[3].top_p = 1.0f;
  settings[3].min_p = 0.1f;
  const int N = 100000;
  for (size_t k = 0; k < settings.size(); ++k) {
    const std::vector<double> p = exact(logits, settings[k]);
    // The most likely token, one of middling probability, and one the filters cut.
    std::vector<int32_t> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    size_t kept = 0;
    while (kept < p.size() && p[static_cast<size_t>(order[kept])] > 0) ++kept;
    ASSERT_GE(kept, 3u);
    ASSERT_LT(kept, p.size());
    for (int32_t x : {order[0], order[kept / 2], order[kept]}) {
      const Verdict v = check(engine_rule, logits, settings[k], x, N);
      EXPECT_TRUE(v.acceptance_ok) << "setting " << k << " token " << x << " p " << p[static_cast<size_t>(x)];
      EXPECT_TRUE(v.residual_ok) << "setting " << k << " token " << x;
      EXPECT_TRUE(v.output_ok) << "setting " << k << " token " << x;
    }
  }
}

TEST(SpecSampling, TheCheckRejectsWrongRules) {
  const std::vector<float> logits = test_logits();
  engine::SamplerParams sp;
  sp.temperature = 1.0f;
  const std::vector<double> p = exact(logits, sp);
  const auto x = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  // Accepted with probability p(x), but a rejection draws from p itself (x included): the
  // output over-weights x.
  const Rule from_p = [](engine::Sampler& s, std::vector<float> row, int32_t tok) -> std::pair<bool, int32_t> {
    std::vector<float> copy = row;
    const int32_t t = s.sample(copy, {});
    if (t == tok) return {true, t};
    return {false, s.sample(row, {})};
  };
  const Verdict a = check(from_p, logits, sp, x, 100000);
  EXPECT_FALSE(a.ok()) << "a rejection that draws from p passed";
  EXPECT_FALSE(a.residual_ok);
  // min(1, p(x) / q) with q = 1/2 (as if the draft were not a point mass): accepts too
  // often, then draws the residual.
  const Rule half_q = [&](engine::Sampler& s, std::vector<float> row, int32_t tok) -> std::pair<bool, int32_t> {
    if (s.next_uniform() < std::min(1.0, p[static_cast<size_t>(tok)] / 0.5)) return {true, tok};
    for (;;) {  // the residual, by drawing until the token is not x
      std::vector<float> copy = row;
      const int32_t t = s.sample(copy, {});
      if (t != tok) return {false, t};
    }
  };
  const Verdict b = check(half_q, logits, sp, x, 100000);
  EXPECT_FALSE(b.ok()) << "acceptance min(1, p / 0.5) passed";
  EXPECT_FALSE(b.acceptance_ok);
  EXPECT_FALSE(b.output_ok);
}

// ---- End to end on the default model ---------------------------------------------------

namespace {


const char* kRepeat =
    "def area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\n";
const char* kCount = "one two three four, one two three four, one two three four, one two";

engine::GenRequest sampled(const std::string& text, int32_t max_tokens, float temperature, uint64_t seed) {
  engine::GenRequest r;
  r.prompt = loaded()->tok.encode(text);
  r.max_tokens = max_tokens;
  r.sampler.temperature = temperature;
  r.sampler.seed = seed;
  return r;
}

engine::EngineConfig config(bool spec, bool adaptive = false) {
  engine::EngineConfig c;
  c.n_ctx = 512;
  c.n_blocks = 160;
  c.block_size = 16;
  c.kv_type = hearth::ops::KvType::F16;
  c.max_seqs = 4;
  c.max_queue = 16;
  c.spec.mode = spec ? engine::SpecMode::kNgram : engine::SpecMode::kOff;
  c.spec.max_draft = 6;
  c.spec.adaptive = adaptive;
  return c;
}



}  // namespace

TEST(SpecSampledEngine, SeededRequestsGiveTheTokensWithoutSpeculation) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  std::vector<engine::GenRequest> reqs = {sampled(kRepeat, 48, 0.7f, 11), sampled(kCount, 40, 1.0f, 12),
                                          sampled(kRepeat, 40, 0.4f, 13), sampled(kCount, 40, 0.8f, 14),
                                          sampled(kRepeat, 40, 0.0f, 15)};
  reqs[1].sampler.top_k = 0;
  reqs[1].sampler.top_p = 0.9f;
  reqs[2].sampler.min_p = 0.2f;
  reqs[3].sampler.repeat_penalty = 1.1f;  // penalties: each row's history has the tokens accepted before it
  reqs[3].sampler.presence_penalty = 0.2f;
  reqs[4].sampler.repeat_penalty = 1.3f;  // greedy with a penalty: rows copied, penalized on the host
  engine::EngineStats off_stats, on_stats, alone_stats;
  const auto off = serve(config(false), reqs, off_stats);
  // Batched, with the measured drafting policy (draft lengths vary with timings: the
  // tokens must not).
  const auto on = serve(config(true, true), reqs, on_stats);
  const auto fixed = serve(config(true), reqs, on_stats);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_EQ(fixed[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_TRUE(fixed[i].fin.error.empty()) << fixed[i].fin.error;
    const auto one = serve(config(true), {reqs[i]}, alone_stats);
    EXPECT_EQ(one[0].tokens, off[i].tokens) << "request " << i << " alone";
  }
  EXPECT_GT(on_stats.spec_accepted, 0u);
  EXPECT_GT(on_stats.spec_drafted, on_stats.spec_accepted);
  EXPECT_EQ(on_stats.kv_blocks_used, 0);
  // And another seed gives other tokens (the seed is what fixes them).
  std::vector<engine::GenRequest> other = {reqs[1]};
  other[0].sampler.seed = 99;
  const auto o = serve(config(true), other, alone_stats);
  EXPECT_NE(o[0].tokens, off[1].tokens);
}

TEST(SpecSampledEngine, GenerateSeededIsTheOutputWithoutSpeculation) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  for (float temp : {0.5f, 1.0f}) {
    std::vector<engine::GenerateResult> r;
    for (bool spec : {false, true}) {
      model::KvCache cache(m.backend, m.model.hparams(), 512, hearth::ops::KvType::F16);
      engine::GenerateOptions o;
      o.max_tokens = 48;
      o.sampler.temperature = temp;
      o.sampler.seed = 5;
      o.sampler.repeat_penalty = 1.05f;
      if (spec) o.spec.mode = engine::SpecMode::kNgram;
      o.spec.adaptive = false;
      r.push_back(engine::generate(m.model, cache, m.tok, m.tok.encode(kRepeat), o, nullptr));
    }
    EXPECT_EQ(r[1].tokens, r[0].tokens) << "temperature " << temp;
    EXPECT_GT(r[1].accepted, 0) << "temperature " << temp;
  }
}

// hearth bench: the metric arithmetic and the honesty flags on hand-made timings.
#include <gtest/gtest.h>

#include "bench/metrics.h"

namespace hearth::bench {
namespace {

// `n` tokens, one per event, `gap` seconds apart, the first `ttft` after start.
RequestResult stream(int n, double gap, double ttft = 0.1, int64_t usage = -2) {
  RequestResult r;
  r.ok = true;
  r.t_start = 1.0;
  for (int i = 0; i < n; ++i) r.token_times.push_back(r.t_start + ttft + gap * i);
  r.chunks = n;
  r.chars = 4 * n;
  if (n > 0) {
    r.t_first = r.token_times.front();
    r.t_last = r.token_times.back();
  }
  r.t_end = (n > 0 ? r.t_last : r.t_start) + 0.01;
  if (usage != -1) {
    r.has_usage = true;
    r.prompt_tokens = 100;
    r.completion_tokens = usage == -2 ? n : usage;
  }
  return r;
}

TEST(BenchMetrics, TenTokensFiftyMsApartIsTwentyPerSecondDecodeOnly) {
  const RequestResult r = stream(10, 0.05);
  ASSERT_TRUE(decode_tps(r));
  EXPECT_NEAR(*decode_tps(r), 20.0, 1e-9);
  EXPECT_NEAR(*ttft(r), 0.1, 1e-12);
  // wall: 10 tokens over 0.1 + 0.45 + 0.01 s.
  EXPECT_NEAR(*wall_tps(r), 10.0 / 0.56, 1e-9);
  EXPECT_TRUE(trust_issues(r).empty());
}

TEST(BenchMetrics, InterTokenLatenciesAndPercentiles) {
  RequestResult r = stream(5, 0.01);
  r.token_times = {0.0, 0.01, 0.03, 0.06, 0.10};
  const std::vector<double> itl = inter_token_latencies(r);
  ASSERT_EQ(itl.size(), 4u);
  EXPECT_NEAR(itl[2], 0.03, 1e-12);
  EXPECT_NEAR(percentile(itl, 50), 0.025, 1e-12);  // between 0.02 and 0.03
  EXPECT_NEAR(percentile(itl, 100), 0.04, 1e-12);
  EXPECT_NEAR(percentile(itl, 0), 0.01, 1e-12);
  EXPECT_NEAR(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100}, 99), 10 + 0.9 * 90, 1e-9);  // pos 9.9
  EXPECT_EQ(percentile({}, 50), 0);
}

TEST(BenchMetrics, SummarizeMedianMinMax) {
  const Stat s = summarize({5, 1, 3, 2, 4});
  EXPECT_EQ(s.median, 3);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(s.n, 5);
  EXPECT_EQ(summarize({1, 2}).median, 1.5);
  EXPECT_EQ(summarize({}).n, 0);
}

TEST(BenchMetrics, UndefinedFiguresAreAbsent) {
  EXPECT_FALSE(decode_tps(stream(1, 0.05)));  // one token: no decode interval
  EXPECT_FALSE(ttft(stream(0, 0.05)));
  RequestResult same = stream(3, 0.0);        // all tokens in one read: no interval
  EXPECT_FALSE(decode_tps(same));
}

TEST(BenchMetrics, AggregateOverTheGroup) {
  RequestResult a = stream(10, 0.05), b = stream(10, 0.05);
  a.t_start = 0.0;
  a.t_end = 1.0;
  b.t_start = 0.5;
  b.t_end = 2.0;
  EXPECT_NEAR(*aggregate_tps({a, b}), 20.0 / 2.0, 1e-12);
  RequestResult failed = stream(50, 0.05);
  failed.ok = false;
  failed.t_end = 100;
  EXPECT_NEAR(*aggregate_tps({a, b, failed}), 10.0, 1e-12);  // failures carry no tokens or time
  EXPECT_FALSE(aggregate_tps({failed}));
}

TEST(BenchMetrics, CompletionTokensComeFromUsageWhenReported) {
  EXPECT_EQ(completion_tokens(stream(10, 0.05, 0.1, 12)), 12);
  EXPECT_EQ(completion_tokens(stream(10, 0.05, 0.1, -1)), 10);  // no usage: the events
}

bool has(const RequestResult& r, Flag f) {
  for (Flag g : trust_flags(r))
    if (g == f) return true;
  return false;
}

TEST(BenchTrust, PackedTokensAreFlagged) {
  RequestResult r = stream(2, 0.2, 0.1, 10);  // 10 tokens in 2 events
  r.chars = 40;
  EXPECT_TRUE(has(r, Flag::kPacked));
  ASSERT_FALSE(trust_issues(r).empty());
  EXPECT_NE(trust_issues(r)[0].find("packs about 5.0 tokens"), std::string::npos);
}

TEST(BenchTrust, UsageThatDisagreesWithTheStreamIsFlagged) {
  EXPECT_TRUE(has(stream(10, 0.05, 0.1, 15), Flag::kDisagrees));  // 50% apart
  EXPECT_TRUE(has(stream(20, 0.05, 0.1, 10), Flag::kDisagrees));  // more events than tokens
  EXPECT_TRUE(trust_flags(stream(100, 0.01, 0.1, 104)).empty());   // within 5%
  EXPECT_TRUE(has(stream(100, 0.01, 0.1, 106), Flag::kDisagrees)); // beyond 5%
}

TEST(BenchTrust, MissingUsageIsFlagged) {
  const RequestResult r = stream(10, 0.05, 0.1, -1);
  EXPECT_TRUE(has(r, Flag::kNoUsage));
  EXPECT_NE(trust_issues(r)[0].find("no usage"), std::string::npos);
}

TEST(BenchTrust, TextThatCannotHoldTheTokensIsFlagged) {
  RequestResult r = stream(10, 0.05);
  r.chars = 1;
  EXPECT_TRUE(has(r, Flag::kCharsDisagree));
  r.chars = 10 * 40;
  EXPECT_TRUE(has(r, Flag::kCharsDisagree));
  r.chars = 10 * 3;
  EXPECT_TRUE(trust_flags(r).empty());
}

}  // namespace
}  // namespace hearth::bench

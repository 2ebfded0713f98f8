// hearth bench: the engine-step account read from a Hearth server's /metrics text.
#include <gtest/gtest.h>

#include <string>

#include "bench/engine_steps.h"

namespace hearth::bench {
namespace {

std::string exposition(double steps, double forward, double plan, double stream, double dsteps, double drows,
                       double dfwd, double dhost) {
  auto num = [](double v) { return std::to_string(v); };
  return "# HELP hearth_engine_steps_total Engine steps that ran a forward pass\n"
         "# TYPE hearth_engine_steps_total counter\n"
         "hearth_engine_steps_total " + num(steps) + "\n"
         "hearth_engine_steps_totally_other 99\n"
         "hearth_engine_step_seconds_total{phase=\"forward\"} " + num(forward) + "\n"
         "hearth_engine_step_seconds_total{phase=\"plan\"} " + num(plan) + "\n"
         "hearth_engine_step_seconds_total{phase=\"stream\"} " + num(stream) + "\n"
         "hearth_engine_decode_steps_total " + num(dsteps) + "\n"
         "hearth_engine_decode_rows_total " + num(drows) + "\n"
         "hearth_engine_decode_step_seconds_total{part=\"forward\"} " + num(dfwd) + "\n"
         "hearth_engine_decode_step_seconds_total{part=\"host\"} " + num(dhost) + "\n";
}

TEST(BenchEngineSteps, PerStepMillisecondsBetweenTwoReadings) {
  const auto a = parse_engine_steps(exposition(10, 1.0, 0.01, 0.02, 8, 512, 0.8, 0.02));
  const auto b = parse_engine_steps(exposition(110, 11.0, 0.11, 0.32, 98, 6272, 9.8, 0.35));
  ASSERT_TRUE(a && b);
  EXPECT_DOUBLE_EQ(b->steps, 110);
  const auto acc = step_account(*a, *b);
  ASSERT_TRUE(acc);
  EXPECT_EQ(acc->steps, 100);
  EXPECT_NEAR(acc->forward_ms, 100.0, 1e-9);    // 10 s over 100 steps
  EXPECT_NEAR(acc->phase_ms.at("plan"), 1.0, 1e-9);
  EXPECT_NEAR(acc->phase_ms.at("stream"), 3.0, 1e-9);
  EXPECT_NEAR(acc->host_ms, 4.0, 1e-9);         // the host phases summed, forward left out
  EXPECT_EQ(acc->decode_steps, 90);
  EXPECT_NEAR(acc->decode_rows, 64.0, 1e-9);    // 5760 rows over 90 steps
  EXPECT_NEAR(acc->decode_forward_ms, 100.0, 1e-9);
  EXPECT_NEAR(acc->decode_host_ms, 3.666666666666, 1e-6);
  EXPECT_NEAR(acc->decode_tps(), 64.0 * 1000.0 / 103.666666666666, 1e-6);
  EXPECT_NEAR(acc->steps_s, 10.4, 1e-9);   // forward 10 s + host 0.4 s
  EXPECT_NEAR(acc->decode_s, 9.33, 1e-9);  // decode forward 9 s + host 0.33 s
}

TEST(BenchEngineSteps, NoStepsNoAccount) {
  EXPECT_FALSE(parse_engine_steps("# a server without the series\nother_total 3\n"));
  const auto a = parse_engine_steps(exposition(5, 1, 0, 0, 0, 0, 0, 0));
  ASSERT_TRUE(a);
  EXPECT_FALSE(step_account(*a, *a));  // no step in between
  const auto b = parse_engine_steps(exposition(6, 1.5, 0, 0, 0, 0, 0, 0));
  const auto acc = step_account(*a, *b);
  ASSERT_TRUE(acc);
  EXPECT_EQ(acc->decode_steps, 0);  // a prefill step only
  EXPECT_DOUBLE_EQ(acc->decode_tps(), 0.0);
}

}  // namespace
}  // namespace hearth::bench

// The Prometheus registry: histogram bucket math, the text exposition format,
// registration rules, concurrent updates, and the server's metric set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "server/engine_metrics_sync.h"
#include "server/metrics.h"

using namespace hearth::server;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(ServerMetrics, ValueFormat) {
  EXPECT_EQ(format_metric_value(0), "0");
  EXPECT_EQ(format_metric_value(3), "3");
  EXPECT_EQ(format_metric_value(0.005), "0.005");
  EXPECT_EQ(format_metric_value(-1.5), "-1.5");
  EXPECT_EQ(format_metric_value(1e21), "1e+21");
  EXPECT_EQ(format_metric_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_metric_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_metric_value(std::nan("")), "NaN");
}

TEST(ServerMetrics, HistogramBucketsAreInclusiveAndCumulative) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.1000001, 1.0, 5.0, 10.0, 11.0, 1e9, -3.0}) h.observe(v);
  h.observe(std::nan(""));  // ignored
  // <= 0.1: 0.05, 0.1, -3 | <= 1: +0.1000001, 1 | <= 10: +5, 10 | +Inf: +11, 1e9
  EXPECT_EQ(h.cumulative(), (std::vector<uint64_t>{3, 5, 7, 9}));
  EXPECT_EQ(h.count(), 9u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.05 + 0.1 + 0.1000001 + 1 + 5 + 10 + 11 + 1e9 - 3);
  Histogram empty({1});
  EXPECT_EQ(empty.cumulative(), (std::vector<uint64_t>{0, 0}));
  EXPECT_THROW(Histogram({1, 1}), hearth::Error);
  EXPECT_THROW(Histogram({2, 1}), hearth::Error);
  EXPECT_THROW(Histogram({1, std::numeric_limits<double>::infinity()}), hearth::Error);
}

TEST(ServerMetrics, ExpositionFormat) {
  Registry r;
  Counter& c = r.counter("app_requests_total", "Requests\nserved \\ ok", {{"code", "200"}});
  Counter& c2 = r.counter("app_requests_total", "Requests\nserved \\ ok", {{"code", "a\"b\\c\nd"}});
  Gauge& g = r.gauge("app_temperature", "Temp");
  Histogram& h = r.histogram("app_latency_seconds", "Latency", {0.5, 2}, {{"route", "/x"}});
  c.inc();
  c.inc(2);
  c2.inc();
  g.set(4);
  g.add(-5.5);
  h.observe(0.25);
  h.observe(1);
  h.observe(3);
  const std::string expected =
      "# HELP app_requests_total Requests\\nserved \\\\ ok\n"
      "# TYPE app_requests_total counter\n"
      "app_requests_total{code=\"200\"} 3\n"
      "app_requests_total{code=\"a\\\"b\\\\c\\nd\"} 1\n"
      "# HELP app_temperature Temp\n"
      "# TYPE app_temperature gauge\n"
      "app_temperature -1.5\n"
      "# HELP app_latency_seconds Latency\n"
      "# TYPE app_latency_seconds histogram\n"
      "app_latency_seconds_bucket{route=\"/x\",le=\"0.5\"} 1\n"
      "app_latency_seconds_bucket{route=\"/x\",le=\"2\"} 2\n"
      "app_latency_seconds_bucket{route=\"/x\",le=\"+Inf\"} 3\n"
      "app_latency_seconds_sum{route=\"/x\"} 4.25\n"
      "app_latency_seconds_count{route=\"/x\"} 3\n";
  EXPECT_EQ(r.render(), expected);
}

TEST(ServerMetrics, RegistrationRules) {
  Registry r;
  Counter& a = r.counter("x_total", "X");
  EXPECT_EQ(&r.counter("x_total", "X"), &a);  // same name and labels: the same series
  EXPECT_NE(&r.counter("x_total", "X", {{"k", "v"}}), &a);
  EXPECT_THROW(r.gauge("x_total", "X"), hearth::Error);        // another type
  EXPECT_THROW(r.counter("x_total", "other"), hearth::Error);  // another help
  EXPECT_THROW(r.counter("1bad", "B"), hearth::Error);
  EXPECT_THROW(r.counter("bad-name", "B"), hearth::Error);
  EXPECT_THROW(r.counter("ok_total", "B", {{"bad-label", "v"}}), hearth::Error);
  EXPECT_THROW(r.counter("ok_total", "B", {{"__reserved", "v"}}), hearth::Error);
  EXPECT_THROW(r.histogram("h", "H", {1}, {{"le", "1"}}), hearth::Error);
  EXPECT_NO_THROW(r.counter("ns:ok_total", "Colons are allowed in names"));
  Histogram& h = r.histogram("h", "H", {1, 2});
  EXPECT_EQ(&r.histogram("h", "H", {1, 2}), &h);
  EXPECT_THROW(r.histogram("h", "H", {1, 3}), hearth::Error);
}

TEST(ServerMetrics, ConcurrentUpdatesAreNotLost) {
  Registry r;
  Counter& c = r.counter("c_total", "C");
  Histogram& h = r.histogram("h", "H", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(i % 2 ? 1.0 : 0.0);
        if (i % 1000 == 0) (void)r.render();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000.0);
  EXPECT_EQ(h.cumulative(), (std::vector<uint64_t>{20000, 40000}));
  EXPECT_EQ(h.sum(), 20000.0);
}

TEST(ServerMetrics, ServerMetricSet) {
  ServerMetrics m;
  m.requests_running.set(3);
  m.requests_waiting.set(1);
  m.request_finished("stop");
  m.request_finished("stop");
  m.request_finished("length");
  m.request_finished("cancelled");
  m.request_finished("error");
  m.request_finished("something else");
  m.requests_rejected.inc();
  m.prompt_tokens.inc(120);
  m.generation_tokens.inc(30);
  m.time_to_first_token.observe(0.2);
  m.inter_token_latency.observe(0.015);
  m.kv_blocks_used.set(10);
  m.kv_blocks_cached.set(7);
  m.kv_blocks_total.set(256);
  m.requests_admitted.inc(6);
  m.preemptions.inc(2);
  m.spec_drafted.inc(40);
  m.spec_accepted.inc(25);
  m.state_snapshots.set(5);
  m.prefix_cache_queries.inc(120);
  m.prefix_cache_hits.inc(64);
  m.batch_size.observe(3);
  m.batch_tokens.observe(515);
  m.sampled_tokens.inc(31);
  m.kv_swap_out.inc(4);
  m.kv_swap_no_room.inc(1);
  m.kv_swap_bytes.set(4096);
  m.kv_swap_disk_out.inc(3);
  m.kv_swap_disk_fallbacks.inc(1);
  m.kv_swap_disk_capacity.set(1 << 20);
  const std::string text = m.render();
  for (const char* line : {
           "# TYPE hearth_requests_running gauge",
           "hearth_requests_running 3",
           "hearth_requests_waiting 1",
           "# TYPE hearth_requests_total counter",
           "hearth_requests_total{outcome=\"stop\"} 2",
           "hearth_requests_total{outcome=\"length\"} 1",
           "hearth_requests_total{outcome=\"cancelled\"} 1",
           "hearth_requests_total{outcome=\"error\"} 2",
           "hearth_requests_total{outcome=\"rejected\"} 1",
           "hearth_prompt_tokens_total 120",
           "hearth_generation_tokens_total 30",
           "# TYPE hearth_time_to_first_token_seconds histogram",
           "hearth_time_to_first_token_seconds_bucket{le=\"0.1\"} 0",
           "hearth_time_to_first_token_seconds_bucket{le=\"0.25\"} 1",
           "hearth_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1",
           "hearth_time_to_first_token_seconds_sum 0.2",
           "hearth_time_to_first_token_seconds_count 1",
           "hearth_inter_token_latency_seconds_bucket{le=\"0.02\"} 1",
           "hearth_inter_token_latency_seconds_count 1",
           "hearth_kv_blocks_used 10",
           "hearth_kv_blocks_total 256",
           "hearth_state_snapshots 5",
           "hearth_prefix_cache_queries_total 120",
           "hearth_kv_blocks_cached 7",
           "hearth_requests_admitted_total 6",
           "hearth_preemptions_total 2",
           "# TYPE hearth_spec_drafted_tokens_total counter",
           "hearth_spec_drafted_tokens_total 40",
           "hearth_spec_accepted_tokens_total 25",
           "hearth_prefix_cache_hits_total 64",
           "# TYPE hearth_batch_size histogram",
           "hearth_batch_size_bucket{le=\"2\"} 0",
           "hearth_batch_size_bucket{le=\"4\"} 1",
           "hearth_batch_tokens_bucket{le=\"512\"} 0",
           "hearth_batch_tokens_bucket{le=\"1024\"} 1",
           "# TYPE hearth_sampled_tokens_total counter",
           "hearth_sampled_tokens_total 31",
           "# TYPE hearth_kv_swap_out_total counter",
           "hearth_kv_swap_out_total 4",
           "hearth_kv_swap_in_total 0",
           "hearth_kv_swap_skipped_total{reason=\"no_room\"} 1",
           "hearth_kv_swap_skipped_total{reason=\"recompute_cheaper\"} 0",
           "hearth_kv_swap_bytes 4096",
           "# TYPE hearth_kv_swap_disk_out_total counter",
           "hearth_kv_swap_disk_out_total 3",
           "hearth_kv_swap_disk_in_total 0",
           "hearth_kv_swap_disk_fallbacks_total 1",
           "# TYPE hearth_kv_swap_disk_bytes gauge",
           "hearth_kv_swap_disk_capacity_bytes 1048576",
       }) {
    EXPECT_TRUE(has_line(text, line)) << "missing: " << line << "\n" << text;
  }
  // Every sample line is "name{labels} value" or "name value"; every family has HELP and TYPE.
  std::istringstream in(text);
  int help = 0, type = 0;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("# HELP ", 0) == 0) {
      ++help;
    } else if (l.rfind("# TYPE ", 0) == 0) {
      ++type;
    } else {
      EXPECT_EQ(l.rfind("hearth_", 0), 0u) << l;
      EXPECT_EQ(std::count(l.begin(), l.end(), ' '), 1) << l;
    }
  }
  EXPECT_EQ(help, 56);
  EXPECT_EQ(type, 56);
}

// The engines' step account (engine::StepTimes) reaches /metrics as counters that advance
// by what is new since the last scrape.
TEST(ServerMetrics, EngineStepAccount) {
  ServerMetrics m;
  EngineMetricsSync sync;
  hearth::engine::EngineStats s;
  s.step_times.steps = 10;
  s.step_times.forward = 0.5;
  s.step_times.sample = 0.01;
  s.step_times.stream = 0.02;
  s.step_times.decode_steps = 8;
  s.step_times.decode_rows = 512;
  s.step_times.decode_forward = 0.4;
  s.step_times.decode_host = 0.025;
  sync.apply(m, s);
  s.step_times.steps = 30;
  s.step_times.forward = 1.5;
  s.step_times.decode_steps = 28;
  s.step_times.decode_rows = 1792;
  sync.apply(m, s);
  sync.apply(m, s);  // nothing new: nothing added
  const std::string text = m.render();
  for (const char* line : {
           "# TYPE hearth_engine_steps_total counter",
           "hearth_engine_steps_total 30",
           "# TYPE hearth_engine_step_seconds_total counter",
           "hearth_engine_step_seconds_total{phase=\"forward\"} 1.5",
           "hearth_engine_step_seconds_total{phase=\"sample\"} 0.01",
           "hearth_engine_step_seconds_total{phase=\"stream\"} 0.02",
           "hearth_engine_step_seconds_total{phase=\"plan\"} 0",
           "hearth_engine_decode_steps_total 28",
           "hearth_engine_decode_rows_total 1792",
           "hearth_engine_decode_step_seconds_total{part=\"forward\"} 0.4",
           "hearth_engine_decode_step_seconds_total{part=\"host\"} 0.025",
       }) {
    EXPECT_TRUE(has_line(text, line)) << "missing: " << line << "\n" << text;
  }
}

}  // namespace

// Summaries of a bench run: per scenario, x (length / streams / turn) and target,
// the median, min and max of every metric over the repetitions, the failures,
// and the honesty flags.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/runner.h"

namespace hearth::bench {

struct SummaryRow {
  std::string scenario, target;
  double x = 0;
  int requests = 0, failed = 0, truncated = 0;
  int empty = 0;                        // succeeded without a single streamed token
  bool trusted = true;
  std::map<std::string, int> flags;     // flag name -> requests flagged
  std::vector<std::string> reasons;     // distinct reasons, first few
  std::vector<std::string> errors;      // distinct failure messages, first few
  // ttft_ms, decode_tps, wall_tps, itl_p50_ms, itl_p99_ms, prompt_tokens,
  // cached_tokens, completion_tokens, aggregate_tps, speedup (double), ttft_p90_ms (the
  // 90th percentile of the TTFTs, in every field of its Stat).
  std::map<std::string, Stat> metrics;
};

struct TargetSummary {
  std::string name;
  int requests = 0, failed = 0, truncated = 0;
  bool trusted = true;
  std::map<std::string, int> flags;
  std::vector<std::string> reasons;
};

std::vector<SummaryRow> summarize_rows(const BenchResults& res);
std::vector<TargetSummary> summarize_targets(const BenchResults& res);

// The row of (scenario, target, x), or nullptr.
const SummaryRow* find_row(const std::vector<SummaryRow>& rows, const std::string& scenario,
                           const std::string& target, double x);
// Metrics that are speeds (marked untrusted when their row is not trusted).
bool is_speed_metric(const std::string& metric);

}  // namespace hearth::bench

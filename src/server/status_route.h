// GET /v1/status: what the server is doing now, as JSON, for the web page's live view
// (server/ui_page.h) and for people with curl. Every number comes from what /metrics
// renders (ServerMetrics, after the same refresh of its gauges) and from the model
// registry, so the two never disagree: totals are the /metrics counters and histogram
// counts as they are; rates (tokens/s) and recent percentiles (TTFT, inter-token
// latency, batch size) are differences of those counters over a recent window, kept
// as a short history of samples taken when the route is asked (no thread of its own).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/metrics.h"
#include "server/model_metrics.h"
#include "server/model_registry.h"

namespace hearth::server {

// The q-quantile (0..1) of observations counted per bucket: `cumulative` as
// Histogram::cumulative() (bounds.size() + 1 values, the last +Inf), linearly
// interpolated inside the bucket it falls in, as Prometheus's histogram_quantile does
// (the first bucket starts at 0; a rank in +Inf gives the last finite bound). NaN when
// there are no observations.
double histogram_quantile(double q, const std::vector<double>& bounds, const std::vector<uint64_t>& cumulative);

class StatusRoute {
 public:
  // `model_metrics`: the per-model series of /metrics (several models: one per model, in
  // the registry's order; empty with one model), reported with each model.
  StatusRoute(ModelRegistry& models, ServerMetrics& metrics, std::vector<ModelMetrics*> model_metrics = {});
  StatusRoute(const StatusRoute&) = delete;
  StatusRoute& operator=(const StatusRoute&) = delete;

  // Longest window a rate or recent percentile may cover (seconds).
  static constexpr double kMaxWindowS = 60;

  // The status document. The caller refreshes the metrics' gauges and counters first
  // (as GET /metrics does). `window_s` in [1, kMaxWindowS]: how far back rates and recent
  // percentiles look; the first call after start has no history yet (rates null).
  nlohmann::ordered_json status(double window_s);

 private:
  using Clock = std::chrono::steady_clock;
  struct Sample {
    Clock::time_point t;
    double prompt_tokens = 0, generation_tokens = 0, sampled_tokens = 0, batch_tokens_sum = 0;
    double prefix_queries = 0, prefix_hits = 0, preemptions = 0, finished = 0;
    std::vector<uint64_t> ttft, inter_token, batch_size;  // cumulative bucket counts
    double batch_size_sum = 0, ttft_sum = 0, inter_token_sum = 0;
  };
  Sample take() const;

  ModelRegistry& models_;
  ServerMetrics& m_;
  std::vector<ModelMetrics*> model_metrics_;
  const Clock::time_point start_ = Clock::now();
  std::mutex mu_;
  std::deque<Sample> history_;  // oldest first, one per 0.2 s at most (status_route.cpp)
};

}  // namespace hearth::server

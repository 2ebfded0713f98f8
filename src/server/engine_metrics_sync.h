// The engines' statistics into the server's /metrics: gauges set to the latest values,
// counters advanced by what is new since the last scrape (the engines keep running
// totals; Prometheus counters only ever grow).
#pragma once

#include <cstdint>
#include <mutex>

#include "engine/serve_engine.h"
#include "server/metrics.h"

namespace hearth::server {

class EngineMetricsSync {
 public:
  // Sets metrics from s (the sum over the loaded models). Two scrapes may race: each adds
  // only what is new since the highest value seen.
  void apply(ServerMetrics& metrics, const engine::EngineStats& s);

 private:
  std::mutex mu_;
  uint64_t seen_queries_ = 0, seen_hits_ = 0, seen_admitted_ = 0, seen_preemptions_ = 0;
  uint64_t seen_spec_drafted_ = 0, seen_spec_accepted_ = 0;
  uint64_t seen_disk_hits_ = 0, seen_disk_read_ = 0, seen_disk_written_ = 0, seen_disk_writes_ = 0,
           seen_disk_dropped_ = 0, seen_disk_rejected_ = 0;
  engine::SwapStats seen_swap_;
  engine::StepTimes seen_steps_;
};

}  // namespace hearth::server

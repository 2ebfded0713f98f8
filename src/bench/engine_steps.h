// The engine-step account a Hearth server publishes in GET /metrics
// (hearth_engine_steps_total, hearth_engine_step_seconds_total{phase}), read before and
// after a group of requests: per engine step, the model's forward pass against the host
// work of the engine thread around it. Other servers have no such series (nothing is
// reported for them).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace hearth::bench {

struct EngineSteps {
  double steps = 0;
  std::map<std::string, double> seconds;  // by phase ("forward", "plan", ...)
  // The decode steps (no prompt chunk): steps, sampled rows, forward and host seconds.
  double decode_steps = 0, decode_rows = 0, decode_forward = 0, decode_host = 0;
};

// The series in a Prometheus text exposition; nullopt when it has no
// hearth_engine_steps_total.
std::optional<EngineSteps> parse_engine_steps(const std::string& metrics_text);

// Milliseconds per step between two readings (steps > 0 in between).
struct StepAccount {
  int64_t steps = 0;
  double forward_ms = 0;  // the model's forward pass
  double host_ms = 0;     // every other phase, summed
  std::map<std::string, double> phase_ms;  // the host phases one by one
  // The decode steps alone (decode_steps 0: none): rows per step (bench_step's --batch)
  // and ms per step.
  int64_t decode_steps = 0;
  double decode_rows = 0, decode_forward_ms = 0, decode_host_ms = 0;
  // Seconds of all steps (forward + host) and of the decode steps alone: against the
  // group's wall time, what the prompt steps (prefill, admissions) and the time the engine
  // did not step at all (requests arriving, the last ones ending) took.
  double steps_s = 0, decode_s = 0;
  // Tokens per second of the decode steps (rows / (forward + host)): the serving side's
  // step rate, against bench_step's B / step.
  double decode_tps() const {
    const double ms = decode_forward_ms + decode_host_ms;
    return ms > 0 ? decode_rows * 1000.0 / ms : 0.0;
  }
};
std::optional<StepAccount> step_account(const EngineSteps& before, const EngineSteps& after);

}  // namespace hearth::bench

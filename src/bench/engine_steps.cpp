#include "bench/engine_steps.h"

#include <cstdlib>
#include <sstream>

namespace hearth::bench {

std::optional<EngineSteps> parse_engine_steps(const std::string& metrics_text) {
  static const std::string kSteps = "hearth_engine_steps_total ";
  static const std::string kPhase = "hearth_engine_step_seconds_total{phase=\"";
  const auto value = [](const std::string& line, const std::string& name, double& out) {
    if (line.rfind(name, 0) != 0) return false;
    out = std::strtod(line.c_str() + name.size(), nullptr);
    return true;
  };
  EngineSteps out;
  bool found = false;
  std::istringstream in(metrics_text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kSteps, 0) == 0) {
      out.steps = std::strtod(line.c_str() + kSteps.size(), nullptr);
      found = true;
    } else if (value(line, "hearth_engine_decode_steps_total ", out.decode_steps) ||
               value(line, "hearth_engine_decode_rows_total ", out.decode_rows) ||
               value(line, "hearth_engine_decode_step_seconds_total{part=\"forward\"} ", out.decode_forward) ||
               value(line, "hearth_engine_decode_step_seconds_total{part=\"host\"} ", out.decode_host)) {
      continue;
    } else if (line.rfind(kPhase, 0) == 0) {
      const size_t q = line.find('"', kPhase.size());
      const size_t sp = line.find(' ', q == std::string::npos ? line.size() : q);
      if (q == std::string::npos || sp == std::string::npos) continue;
      out.seconds[line.substr(kPhase.size(), q - kPhase.size())] = std::strtod(line.c_str() + sp + 1, nullptr);
    }
  }
  if (!found) return std::nullopt;
  return out;
}

std::optional<StepAccount> step_account(const EngineSteps& before, const EngineSteps& after) {
  const double steps = after.steps - before.steps;
  if (steps < 1) return std::nullopt;
  StepAccount a;
  a.steps = static_cast<int64_t>(steps);
  for (const auto& [phase, s] : after.seconds) {
    const auto it = before.seconds.find(phase);
    const double ms = (s - (it == before.seconds.end() ? 0.0 : it->second)) * 1000.0 / steps;
    if (phase == "forward") {
      a.forward_ms = ms;
    } else {
      a.phase_ms[phase] = ms;
      a.host_ms += ms;
    }
  }
  a.steps_s = (a.forward_ms + a.host_ms) * steps / 1000.0;
  const double d = after.decode_steps - before.decode_steps;
  if (d >= 1) {
    a.decode_steps = static_cast<int64_t>(d);
    a.decode_rows = (after.decode_rows - before.decode_rows) / d;
    a.decode_forward_ms = (after.decode_forward - before.decode_forward) * 1000.0 / d;
    a.decode_host_ms = (after.decode_host - before.decode_host) * 1000.0 / d;
    a.decode_s = (a.decode_forward_ms + a.decode_host_ms) * d / 1000.0;
  }
  return a;
}

}  // namespace hearth::bench

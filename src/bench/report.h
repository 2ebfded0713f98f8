// Output of `hearth bench`: results.json (every raw sample plus the summary),
// report.md (tables per scenario, targets side by side, ratios), SVG charts,
// and the summary table printed at the end.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/runner.h"

namespace hearth::bench {

nlohmann::json results_json(const BenchResults& res, const std::string& command_line);
std::string report_markdown(const BenchResults& res, const std::string& command_line);
// Writes results.json, report.md and the charts into `dir` (created); throws
// Error when it cannot. Returns the files written.
std::vector<std::string> write_outputs(const BenchResults& res, const std::string& dir,
                                       const std::string& command_line);
// The charts that have data: (file name, SVG document).
std::vector<std::pair<std::string, std::string>> charts(const BenchResults& res);
// The terminal summary: one row per target with the headline figures.
std::string summary_table(const BenchResults& res);

}  // namespace hearth::bench

#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "bench/summary.h"
#include "bench/svg.h"
#include "core/error.h"

namespace hearth::bench {

using nlohmann::json;

namespace {

json stat_json(const Stat& s) { return json{{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}}; }

json sample_json(const Sample& s) {
  const RequestResult& r = s.r;
  json times = json::array();
  for (double t : r.token_times) times.push_back(std::round(t * 1e6) / 1e6);
  json j = {{"scenario", s.scenario}, {"target", s.target}, {"x", s.x}, {"rep", s.rep}, {"group", s.group},
            {"prompt_words", s.words}, {"ok", r.ok}, {"truncated", r.truncated}, {"http_status", r.http_status},
            {"t_start", r.t_start}, {"t_first", r.t_first}, {"t_last", r.t_last}, {"t_end", r.t_end},
            {"chunks", r.chunks}, {"chars", r.chars}, {"usage_reported", r.has_usage},
            {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
            {"cached_tokens", r.cached_tokens}, {"drafted_tokens", r.drafted_tokens},
            {"accepted_tokens", r.accepted_tokens}, {"finish_reason", r.finish_reason}, {"token_times", times}};
  if (!s.role.empty()) j["role"] = s.role;
  if (!r.error.empty()) j["error"] = r.error;
  const auto opt = [](std::optional<double> v) { return v ? json(*v) : json(nullptr); };
  j["ttft_s"] = opt(ttft(r));
  j["decode_tps"] = opt(decode_tps(r));
  j["wall_tps"] = opt(wall_tps(r));
  j["flags"] = json::array();
  if (r.ok)
    for (const std::string& why : trust_issues(r)) j["flags"].push_back(why);
  return j;
}

std::string fmt(double v) {
  char b[64];
  if (std::fabs(v) >= 100 || v == std::floor(v)) std::snprintf(b, sizeof b, "%.0f", v);
  else if (std::fabs(v) >= 10) std::snprintf(b, sizeof b, "%.1f", v);
  else std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// "median (min-max)", "untrusted: ..." for a speed in an untrusted row, "-" when absent.
std::string cell(const SummaryRow& row, const std::string& metric, bool range = true) {
  const auto it = row.metrics.find(metric);
  if (it == row.metrics.end() || it->second.n == 0) return "-";
  const Stat& s = it->second;
  std::string c = fmt(s.median);
  if (range && s.n > 1 && s.min != s.max) c += " (" + fmt(s.min) + "-" + fmt(s.max) + ")";
  if (!row.trusted && is_speed_metric(metric)) c = "untrusted: " + c;
  return c;
}

double median_of(const SummaryRow* row, const std::string& metric) {
  if (!row) return -1;
  const auto it = row->metrics.find(metric);
  return it == row->metrics.end() || it->second.n == 0 ? -1 : it->second.median;
}

struct ScenarioView {
  const char* name;
  const char* title;
  const char* x_name;
  const char* headline;  // the metric the ratio column compares
  std::vector<std::pair<const char*, const char*>> columns;  // metric, header
};

const std::vector<ScenarioView>& views() {
  static const std::vector<ScenarioView> v = {
      {"single", "Single stream", "length", "decode_tps",
       {{"prompt_tokens", "prompt tok"}, {"ttft_ms", "TTFT ms"}, {"decode_tps", "decode tok/s"},
        {"wall_tps", "wall tok/s"}, {"itl_p50_ms", "ITL p50 ms"}, {"itl_p99_ms", "ITL p99 ms"},
        {"completion_tokens", "completion tok"}, {"draft_accept_pct", "drafts accepted %"}}},
      {"prefill", "Prefill: time to first token vs prompt length", "length", "ttft_ms",
       {{"prompt_tokens", "prompt tok"}, {"cached_tokens", "cached tok"}, {"ttft_ms", "TTFT ms"}}},
      {"decode-vs-input", "Decode speed vs prompt length", "length", "decode_tps",
       {{"prompt_tokens", "prompt tok"}, {"decode_tps", "decode tok/s"}, {"itl_p50_ms", "ITL p50 ms"},
        {"itl_p99_ms", "ITL p99 ms"}}},
      {"double", "Two requests at the same instant", "length", "speedup",
       {{"prompt_tokens", "prompt tok"}, {"ttft_ms", "TTFT ms"}, {"decode_tps", "decode tok/s (each)"},
        {"aggregate_tps", "aggregate tok/s"}, {"speedup", "speedup"}}},
      {"concurrency", "Concurrent streams", "streams", "aggregate_tps",
       {{"ttft_ms", "TTFT ms"}, {"decode_tps", "decode tok/s (each)"}, {"wall_tps", "wall tok/s (each)"},
        {"aggregate_tps", "aggregate tok/s"}, {"itl_p99_ms", "ITL p99 ms"}, {"draft_accept_pct", "drafts accepted %"},
        {"step_forward_ms", "engine forward ms/step"}, {"step_host_ms", "engine host ms/step"},
        {"decode_rows", "decode step rows"}, {"decode_forward_ms", "decode step forward ms"},
        {"decode_host_ms", "decode step host ms"}, {"engine_decode_tps", "decode steps tok/s"},
        {"group_wall_s", "wall s"}, {"group_decode_s", "of which decode steps s"},
        {"group_prompt_s", "prompt steps s"}, {"group_idle_s", "no step s"}}},
      {"agent", "Agent conversation: TTFT per turn", "turn", "ttft_ms",
       {{"prompt_tokens", "prompt tok"}, {"cached_tokens", "cached tok"}, {"ttft_ms", "TTFT ms"},
        {"decode_tps", "decode tok/s"}}},
      {"image", "Image + question: time to first token", "image side px (0: --image file)", "ttft_ms",
       {{"prompt_tokens", "prompt tok (with the image's)"}, {"cached_tokens", "cached tok"}, {"ttft_ms", "TTFT ms"},
        {"ttft_p90_ms", "TTFT p90 ms"}, {"decode_tps", "decode tok/s"}}},
  };
  return v;
}

double shown_x(const std::string& scenario, double x) { return scenario == "agent" ? x + 1 : x; }

}  // namespace

json results_json(const BenchResults& res, const std::string& command_line) {
  const BenchOptions& o = res.options;
  json j;
  j["tool"] = "hearth bench";
  j["command"] = command_line;
  j["wall_s"] = res.wall_s;
  j["options"] = {{"scenarios", o.scenarios}, {"reps", o.reps}, {"max_tokens", o.max_tokens},
                  {"lengths", o.lengths}, {"concurrency", o.concurrency}, {"seed", o.seed}, {"temperature", o.temperature},
                  {"top_p", o.top_p}, {"top_k", o.top_k}, {"frequency_penalty", o.frequency_penalty},
                  {"presence_penalty", o.presence_penalty},
                  {"agent_turns", o.agent_turns}, {"agent_system_tokens", o.agent_system_tokens},
                  {"image_size", o.image_size}, {"image_file", o.image_file}, {"image_words", o.image_words}};
  const std::vector<TargetSummary> ts = summarize_targets(res);
  j["targets"] = json::array();
  for (size_t i = 0; i < res.targets.size(); ++i) {
    const Target& t = res.targets[i];
    json tj = {{"name", t.name}, {"url", t.url}, {"model", t.model}, {"launched", !t.launch_command.empty()},
               {"calibration", {{"tokens_per_word", t.calibration.tokens_per_word},
                                {"overhead_tokens", t.calibration.overhead}, {"from_usage", t.calibrated}}},
               {"requests", ts[i].requests}, {"failed", ts[i].failed}, {"truncated", ts[i].truncated},
               {"trusted", t.error.empty() && ts[i].trusted}, {"flags", ts[i].flags}, {"flag_reasons", ts[i].reasons},
               {"notes", t.notes}};
    if (!t.launch_command.empty()) tj["launch_command"] = t.launch_command;
    tj["error"] = t.error.empty() ? json(nullptr) : json(t.error);
    j["targets"].push_back(tj);
  }
  j["summary"] = json::array();
  for (const SummaryRow& r : summarize_rows(res)) {
    json m = json::object();
    for (const auto& [k, s] : r.metrics) m[k] = stat_json(s);
    j["summary"].push_back({{"scenario", r.scenario}, {"target", r.target}, {"x", r.x}, {"requests", r.requests},
                            {"failed", r.failed}, {"truncated", r.truncated}, {"without_tokens", r.empty}, {"trusted", r.trusted},
                            {"flags", r.flags}, {"flag_reasons", r.reasons}, {"errors", r.errors}, {"metrics", m}});
  }
  j["groups"] = json::array();
  for (const GroupResult& g : res.groups) {
    j["groups"].push_back({{"scenario", g.scenario}, {"target", g.target}, {"x", g.x}, {"rep", g.rep},
                           {"group", g.group}, {"requests", g.n}, {"failed", g.n_failed},
                           {"aggregate_tps", g.aggregate_tps > 0 ? json(g.aggregate_tps) : json(nullptr)},
                           {"speedup", g.speedup > 0 ? json(g.speedup) : json(nullptr)}});
    if (g.engine_steps > 0) {
      json& e = j["groups"].back()["engine_steps"];
      e = {{"steps", g.engine_steps}, {"forward_ms", g.step_forward_ms}, {"host_ms", g.step_host_ms}};
      for (const auto& [phase, ms] : g.host_phase_ms) e["host_phase_ms"][phase] = ms;
      if (g.decode_steps > 0) {
        e["decode"] = {{"steps", g.decode_steps}, {"rows", g.decode_rows}, {"forward_ms", g.decode_forward_ms},
                       {"host_ms", g.decode_host_ms}, {"tps", g.decode_tps}};
      }
      if (g.wall_s > 0) {
        e["wall_s"] = {{"total", g.wall_s}, {"decode_steps", g.decode_s}, {"prompt_steps", g.prompt_s},
                       {"no_step", g.idle_s}};
      }
    }
  }
  j["samples"] = json::array();
  for (const Sample& s : res.samples) j["samples"].push_back(sample_json(s));
  return j;
}

namespace {
Chart chart_of(const BenchResults& res, const std::vector<SummaryRow>& rows, const std::string& scenario,
               const std::string& metric, bool x_is_prompt_tokens, const std::string& title,
               const std::string& x_label, const std::string& y_label);
}  // namespace
std::vector<std::pair<std::string, std::string>> charts(const BenchResults& res);

std::string report_markdown(const BenchResults& res, const std::string& command_line) {
  const std::vector<SummaryRow> rows = summarize_rows(res);
  const std::vector<TargetSummary> ts = summarize_targets(res);
  std::string md = "# hearth bench report\n\n```\n" + command_line + "\n```\n\n";
  std::string sampling = "greedy";
  if (res.options.temperature > 0.0) {
    sampling = "temperature " + std::to_string(res.options.temperature).substr(0, 4);
    if (res.options.top_k > 0) sampling += ", top_k " + std::to_string(res.options.top_k);
    if (res.options.top_p < 1.0) sampling += ", top_p " + std::to_string(res.options.top_p).substr(0, 4);
  }
  if (res.options.frequency_penalty != 0.0) {
    sampling += ", frequency_penalty " + std::to_string(res.options.frequency_penalty).substr(0, 4);
  }
  if (res.options.presence_penalty != 0.0) {
    sampling += ", presence_penalty " + std::to_string(res.options.presence_penalty).substr(0, 4);
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d repetitions, max %d completion tokens, seed %llu, %s; run took %.0f s.\n\n",
                res.options.reps, res.options.max_tokens, static_cast<unsigned long long>(res.options.seed),
                sampling.c_str(), res.wall_s);
  md += buf;
  md += "Figures are medians over repetitions with (min-max). TTFT = request start to first streamed token; "
        "decode tok/s = (completion tokens - 1) / (last token time - first token time); wall tok/s = completion "
        "tokens / (end - start); aggregate tok/s = all completion tokens of requests released together / (last end "
        "- first start); ITL = gaps between streamed events (p50 and p99 per request); prompt and cached tokens as "
        "the server reports them. See docs/BENCH.md.\n\n";
  md += "## Targets\n\n| target | URL | model | requests | failed | truncated | trust |\n|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < res.targets.size(); ++i) {
    const Target& t = res.targets[i];
    std::string trust;
    if (!t.error.empty()) trust = "did not run: " + t.error;
    else if (ts[i].trusted) trust = "ok";
    else {
      trust = "**untrusted**:";
      for (const std::string& why : ts[i].reasons) trust += " " + why + ";";
    }
    md += "| " + t.name + " | " + t.url + " | " + t.model + " | " + std::to_string(ts[i].requests) + " | " +
          std::to_string(ts[i].failed) + " | " + std::to_string(ts[i].truncated) + " | " + trust + " |\n";
  }
  for (const Target& t : res.targets)
    for (const std::string& n : t.notes) md += "\n- " + t.name + ": " + n;
  md += "\n";
  const std::string first = res.targets.empty() ? "" : res.targets.front().name;
  for (const ScenarioView& v : views()) {
    std::vector<const SummaryRow*> sr;
    for (const SummaryRow& r : rows)
      if (r.scenario == v.name) sr.push_back(&r);
    if (sr.empty()) continue;
    md += std::string("\n## ") + v.title + " (`" + v.name + "`)\n\n| " + v.x_name + " | target |";
    // The drafts column only where some server reported speculative decoding, the engine
    // step columns only where some server reported its steps (Hearth's /metrics).
    std::vector<std::pair<const char*, const char*>> columns;
    for (const auto& c : v.columns) {
      const std::string key = c.first;
      const bool optional = key == "draft_accept_pct" || key.rfind("step_", 0) == 0 || key.rfind("decode_", 0) == 0 ||
                            key == "engine_decode_tps" || key.rfind("group_", 0) == 0;
      if (!optional || std::any_of(sr.begin(), sr.end(), [&](const SummaryRow* r) { return median_of(r, c.first) >= 0; }))
        columns.push_back(c);
    }
    for (auto& [m, h] : columns) md += std::string(" ") + h + " |";
    const bool ratio = res.targets.size() > 1;
    if (ratio) md += std::string(" ") + v.headline + " vs " + first + " |";
    md += " failed / requests |\n|---|---|";
    for (size_t i = 0; i < columns.size() + (ratio ? 2 : 1); ++i) md += "---|";
    md += "\n";
    for (const SummaryRow* r : sr) {
      md += "| " + fmt(shown_x(v.name, r->x)) + " | " + r->target + (r->trusted ? "" : " (untrusted)") + " |";
      for (auto& [m, h] : columns) {
        md += ' ';
        md += cell(*r, m);
        md += " |";
      }
      if (ratio) {
        const double a = median_of(r, v.headline);
        const double b = median_of(find_row(rows, v.name, first, r->x), v.headline);
        md += a > 0 && b > 0 ? " " + fmt(a / b) + "x |" : " - |";
      }
      md += ' ';
      md += std::to_string(r->failed);
      md += '/';
      md += std::to_string(r->requests);
      if (r->empty > 0) {
        md += ", ";
        md += std::to_string(r->empty);
        md += " without tokens";
      }
      if (!r->errors.empty()) {
        md += " (";
        md += r->errors.front();
        md += ')';
      }
      md += " |\n";
    }
  }
  const auto cs = charts(res);
  if (!cs.empty()) md += "\n## Charts\n\n";
  for (const auto& c : cs) md += "![" + c.first + "](" + c.first + ")\n";
  return md;
}

namespace {

Chart chart_of(const BenchResults& res, const std::vector<SummaryRow>& rows, const std::string& scenario,
               const std::string& metric, bool x_is_prompt_tokens, const std::string& title,
               const std::string& x_label, const std::string& y_label) {
  Chart c{title, x_label, y_label, {}};
  for (const Target& t : res.targets) {
    Series s{t.name, {}, false};
    for (const SummaryRow& r : rows) {
      if (r.scenario != scenario || r.target != t.name) continue;
      const double y = median_of(&r, metric);
      double x = shown_x(scenario, r.x);
      if (x_is_prompt_tokens && median_of(&r, "prompt_tokens") > 0) x = median_of(&r, "prompt_tokens");
      if (y < 0) continue;
      s.points.emplace_back(x, y);
      if (!r.trusted && is_speed_metric(metric)) s.untrusted = true;
    }
    if (!s.points.empty()) c.series.push_back(std::move(s));
  }
  return c;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> charts(const BenchResults& res) {
  const std::vector<SummaryRow> rows = summarize_rows(res);
  const auto ran = [&](const char* sc) {
    return std::any_of(rows.begin(), rows.end(), [&](const SummaryRow& r) { return r.scenario == sc; });
  };
  std::vector<std::pair<std::string, std::string>> out;
  const auto add = [&](const char* name, const Chart& c) {
    if (std::string svg = render_svg(c); !svg.empty()) out.emplace_back(name, std::move(svg));
  };
  add("concurrency.svg", chart_of(res, rows, "concurrency", "aggregate_tps", false,
                                  "Aggregate tokens/s vs concurrent streams", "concurrent streams", "aggregate tokens/s"));
  add("prefill_ttft.svg", chart_of(res, rows, ran("prefill") ? "prefill" : "single", "ttft_ms", true,
                                   "Time to first token vs prompt length", "prompt tokens", "TTFT (ms)"));
  add("decode_vs_input.svg", chart_of(res, rows, ran("decode-vs-input") ? "decode-vs-input" : "single", "decode_tps",
                                      true, "Decode speed vs prompt length", "prompt tokens", "decode-only tokens/s"));
  add("agent_ttft.svg", chart_of(res, rows, "agent", "ttft_ms", false, "Time to first token per agent turn", "turn",
                                 "TTFT (ms)"));
  return out;
}

std::vector<std::string> write_outputs(const BenchResults& res, const std::string& dir,
                                       const std::string& command_line) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorKind::kIo, "bench", "cannot create " + dir + ": " + ec.message());
  std::vector<std::string> written;
  const auto write = [&](const std::string& name, const std::string& text) {
    if (text.empty()) return;
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) fail(ErrorKind::kIo, "bench", "cannot write " + path);
    written.push_back(path);
  };
  write("results.json", results_json(res, command_line).dump(1) + "\n");
  write("report.md", report_markdown(res, command_line));
  for (const auto& [name, svg] : charts(res)) write(name, svg);
  return written;
}

std::string summary_table(const BenchResults& res) {
  const std::vector<SummaryRow> rows = summarize_rows(res);
  const std::vector<TargetSummary> ts = summarize_targets(res);
  const BenchOptions& o = res.options;
  // Headline x values: single at the first length, prefill nearest 512, the most streams, the last agent turn.
  int64_t pre_len = o.lengths.empty() ? 0 : o.lengths.front();
  for (int64_t l : o.lengths)
    if (std::llabs(l - 512) < std::llabs(pre_len - 512)) pre_len = l;
  const double c_max = o.concurrency.empty() ? 0 : *std::max_element(o.concurrency.begin(), o.concurrency.end());
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-14s %12s %12s %14s %10s %16s %16s %8s  %s\n", "target", "decode tok/s",
                "wall tok/s", ("TTFT@" + std::to_string(pre_len) + " ms").c_str(), "2x speedup",
                ("agg tok/s @" + fmt(c_max)).c_str(), "agent TTFT ms", "failed", "trust");
  out += buf;
  for (size_t i = 0; i < res.targets.size(); ++i) {
    const Target& t = res.targets[i];
    if (!t.error.empty()) {
      out += t.name + ": did not run: " + t.error + "\n";
      continue;
    }
    const auto val = [&](const char* sc, double x, const char* m) {
      const SummaryRow* r = find_row(rows, sc, t.name, x);
      const double v = median_of(r, m);
      if (v < 0) return std::string("-");
      return (r && !r->trusted && is_speed_metric(m) ? "?" : "") + fmt(v);
    };
    const double first_len = o.lengths.empty() ? 0 : static_cast<double>(o.lengths.front());
    const std::string ttft = find_row(rows, "prefill", t.name, static_cast<double>(pre_len))
                                 ? val("prefill", static_cast<double>(pre_len), "ttft_ms")
                                 : val("single", static_cast<double>(pre_len), "ttft_ms");
    const std::string agent = val("agent", 0, "ttft_ms") + " -> " + val("agent", o.agent_turns - 1, "ttft_ms");
    std::snprintf(buf, sizeof buf, "%-14s %12s %12s %14s %10s %16s %16s %8s  %s\n", t.name.c_str(),
                  val("single", first_len, "decode_tps").c_str(), val("single", first_len, "wall_tps").c_str(),
                  ttft.c_str(), val("double", first_len, "speedup").c_str(),
                  val("concurrency", c_max, "aggregate_tps").c_str(), agent.c_str(),
                  (std::to_string(ts[i].failed) + "/" + std::to_string(ts[i].requests)).c_str(),
                  ts[i].trusted ? "ok" : "UNTRUSTED (see report.md)");
    out += buf;
  }
  // A Hearth server's engine steps under the concurrency scenario: the model's forward
  // pass against the host work that serializes with it (medians over the repetitions).
  for (const Target& t : res.targets) {
    for (const int c : o.concurrency) {
      const SummaryRow* r = find_row(rows, "concurrency", t.name, c);
      const double fwd = median_of(r, "step_forward_ms"), host = median_of(r, "step_host_ms");
      if (fwd < 0 || host < 0 || !t.error.empty()) continue;
      std::snprintf(buf, sizeof buf, "%-14s engine step @%d streams: forward %s ms + host %s ms (host %.1f%% of the step)",
                    t.name.c_str(), c, fmt(fwd).c_str(), fmt(host).c_str(),
                    fwd + host > 0 ? 100.0 * host / (fwd + host) : 0.0);
      out += buf;
      const double rows_d = median_of(r, "decode_rows");
      if (rows_d > 0) {
        std::snprintf(buf, sizeof buf, "; decode steps of %s rows: forward %s ms + host %s ms = %s tok/s", fmt(rows_d).c_str(),
                      fmt(median_of(r, "decode_forward_ms")).c_str(), fmt(median_of(r, "decode_host_ms")).c_str(),
                      fmt(median_of(r, "engine_decode_tps")).c_str());
        out += buf;
      }
      const double wall = median_of(r, "group_wall_s");
      if (wall > 0) {
        std::snprintf(buf, sizeof buf, "; wall %s s = decode steps %s + prompt steps %s + no step %s",
                      fmt(wall).c_str(), fmt(median_of(r, "group_decode_s")).c_str(),
                      fmt(median_of(r, "group_prompt_s")).c_str(), fmt(median_of(r, "group_idle_s")).c_str());
        out += buf;
      }
      out += "\n";
    }
  }
  for (const Target& t : res.targets) {
    const double x = o.image_file.empty() ? o.image_size : 0;
    const SummaryRow* r = find_row(rows, "image", t.name, x);
    if (r == nullptr || !t.error.empty()) continue;
    std::snprintf(buf, sizeof buf, "%-14s image %s + %lld-word question: TTFT median %s ms, p90 %s ms, %s prompt tokens, %d/%d failed\n",
                  t.name.c_str(), o.image_file.empty() ? (std::to_string(o.image_size) + "x" + std::to_string(o.image_size)).c_str() : o.image_file.c_str(),
                  static_cast<long long>(o.image_words), cell(*r, "ttft_ms", false).c_str(),
                  cell(*r, "ttft_p90_ms", false).c_str(), cell(*r, "prompt_tokens", false).c_str(), r->failed, r->requests);
    out += buf;
  }
  return out;
}

}  // namespace hearth::bench

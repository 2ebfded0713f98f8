#include "bench/summary.h"

#include <algorithm>
#include <set>

namespace hearth::bench {

namespace {

void add_unique(std::vector<std::string>& v, const std::string& s, size_t cap = 4) {
  if (v.size() < cap && std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

}  // namespace

bool is_speed_metric(const std::string& m) {
  return m == "decode_tps" || m == "wall_tps" || m == "aggregate_tps" || m == "speedup" || m == "itl_p50_ms" ||
         m == "itl_p99_ms";
}

std::vector<SummaryRow> summarize_rows(const BenchResults& res) {
  // Keys in plan order: scenario order, then x ascending, then target order.
  std::vector<SummaryRow> rows;
  for (const std::string& sc : all_scenarios()) {
    std::set<double> xs;
    for (const Sample& s : res.samples)
      if (s.scenario == sc) xs.insert(s.x);
    for (double x : xs) {
      for (const Target& t : res.targets) {
        SummaryRow row;
        row.scenario = sc;
        row.target = t.name;
        row.x = x;
        std::map<std::string, std::vector<double>> v;
        for (const Sample& s : res.samples) {
          if (s.scenario != sc || s.target != t.name || s.x != x) continue;
          const RequestResult& r = s.r;
          ++row.requests;
          if (!r.ok) {
            ++row.failed;
            if (r.truncated) ++row.truncated;
            add_unique(row.errors, r.error);
            continue;
          }
          if (r.chunks == 0) ++row.empty;
          for (Flag f : trust_flags(r)) ++row.flags[flag_name(f)];
          for (const std::string& why : trust_issues(r)) add_unique(row.reasons, why, 3);
          if (s.role == "alone") continue;  // `double`: the reference request only feeds the speedup
          if (auto a = ttft(r)) v["ttft_ms"].push_back(*a * 1000);
          if (auto a = decode_tps(r)) v["decode_tps"].push_back(*a);
          if (auto a = wall_tps(r)) v["wall_tps"].push_back(*a);
          const std::vector<double> itl = inter_token_latencies(r);
          if (!itl.empty()) {
            v["itl_p50_ms"].push_back(percentile(itl, 50) * 1000);
            v["itl_p99_ms"].push_back(percentile(itl, 99) * 1000);
          }
          if (r.prompt_tokens >= 0) v["prompt_tokens"].push_back(static_cast<double>(r.prompt_tokens));
          if (r.cached_tokens >= 0) v["cached_tokens"].push_back(static_cast<double>(r.cached_tokens));
          // Speculative decoding (a server that reports it): the share of drafted tokens accepted.
          if (r.drafted_tokens > 0) {
            v["draft_accept_pct"].push_back(100.0 * static_cast<double>(r.accepted_tokens) /
                                            static_cast<double>(r.drafted_tokens));
          }
          v["completion_tokens"].push_back(static_cast<double>(completion_tokens(r)));
        }
        if (row.requests == 0) continue;
        for (const GroupResult& g : res.groups) {
          if (g.scenario != sc || g.target != t.name || g.x != x) continue;
          if (g.aggregate_tps > 0 && g.n_failed == 0 && !(sc == "double" && g.n == 1))
            v["aggregate_tps"].push_back(g.aggregate_tps);
          if (g.speedup > 0) v["speedup"].push_back(g.speedup);
          if (g.engine_steps > 0 && g.n_failed == 0) {
            v["step_forward_ms"].push_back(g.step_forward_ms);
            v["step_host_ms"].push_back(g.step_host_ms);
          }
          if (g.decode_steps > 0 && g.n_failed == 0) {
            v["decode_rows"].push_back(g.decode_rows);
            v["decode_forward_ms"].push_back(g.decode_forward_ms);
            v["decode_host_ms"].push_back(g.decode_host_ms);
            v["engine_decode_tps"].push_back(g.decode_tps);
          }
          if (g.wall_s > 0 && g.n_failed == 0) {
            v["group_wall_s"].push_back(g.wall_s);
            v["group_decode_s"].push_back(g.decode_s);
            v["group_prompt_s"].push_back(g.prompt_s);
            v["group_idle_s"].push_back(g.idle_s);
          }
        }
        row.trusted = row.flags.empty();
        for (auto& [k, vals] : v) row.metrics[k] = summarize(vals);
        if (auto it = v.find("ttft_ms"); it != v.end() && !it->second.empty()) {
          // The 90th percentile over the repetitions (median, min and max all hold it).
          const double p90 = percentile(it->second, 90);
          row.metrics["ttft_p90_ms"] = Stat{p90, p90, p90, static_cast<int64_t>(it->second.size())};
        }
        rows.push_back(std::move(row));
      }
    }
  }
  return rows;
}

std::vector<TargetSummary> summarize_targets(const BenchResults& res) {
  std::vector<TargetSummary> out;
  for (const Target& t : res.targets) {
    TargetSummary ts;
    ts.name = t.name;
    for (const Sample& s : res.samples) {
      if (s.target != t.name) continue;
      ++ts.requests;
      if (!s.r.ok) {
        ++ts.failed;
        if (s.r.truncated) ++ts.truncated;
        continue;
      }
      for (Flag f : trust_flags(s.r)) ++ts.flags[flag_name(f)];
      for (const std::string& why : trust_issues(s.r)) add_unique(ts.reasons, why, 3);
    }
    ts.trusted = ts.flags.empty();
    out.push_back(std::move(ts));
  }
  return out;
}

const SummaryRow* find_row(const std::vector<SummaryRow>& rows, const std::string& scenario,
                           const std::string& target, double x) {
  for (const SummaryRow& r : rows)
    if (r.scenario == scenario && r.target == target && r.x == x) return &r;
  return nullptr;
}

}  // namespace hearth::bench

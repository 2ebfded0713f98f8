#include "bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hearth::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  p = std::clamp(p, 0.0, 100.0);
  const double pos = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Stat summarize(const std::vector<double>& values) {
  Stat s;
  if (values.empty()) return s;
  s.n = static_cast<int64_t>(values.size());
  s.median = percentile(values, 50);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

int64_t completion_tokens(const RequestResult& r) {
  return r.has_usage && r.completion_tokens >= 0 ? r.completion_tokens : r.chunks;
}

std::optional<double> ttft(const RequestResult& r) {
  if (r.t_first < 0) return std::nullopt;
  return r.t_first - r.t_start;
}

std::optional<double> decode_tps(const RequestResult& r) {
  const int64_t n = completion_tokens(r);
  if (n < 2 || r.t_first < 0 || r.t_last <= r.t_first) return std::nullopt;
  return static_cast<double>(n - 1) / (r.t_last - r.t_first);
}

std::optional<double> wall_tps(const RequestResult& r) {
  const int64_t n = completion_tokens(r);
  if (n < 1 || r.t_end <= r.t_start) return std::nullopt;
  return static_cast<double>(n) / (r.t_end - r.t_start);
}

std::vector<double> inter_token_latencies(const RequestResult& r) {
  std::vector<double> gaps;
  for (size_t i = 1; i < r.token_times.size(); ++i) gaps.push_back(r.token_times[i] - r.token_times[i - 1]);
  return gaps;
}

std::optional<double> aggregate_tps(const std::vector<RequestResult>& group) {
  int64_t tokens = 0;
  double first_start = 0, last_end = 0;
  bool any = false;
  for (const RequestResult& r : group) {
    if (!r.ok) continue;
    tokens += completion_tokens(r);
    first_start = any ? std::min(first_start, r.t_start) : r.t_start;
    last_end = any ? std::max(last_end, r.t_end) : r.t_end;
    any = true;
  }
  if (!any || tokens < 1 || last_end <= first_start) return std::nullopt;
  return static_cast<double>(tokens) / (last_end - first_start);
}

namespace {

// Streamed events per reported token below this: the server packs tokens.
constexpr double kPackedRatio = 0.5;
// Events and reported tokens further apart than this: they disagree.
constexpr double kAgreeTolerance = 0.05;
// Fewer streamed bytes per reported token than this: the text cannot hold them.
constexpr double kMinCharsPerToken = 0.3;
// More streamed bytes per reported token than this: usage undercounts.
constexpr double kMaxCharsPerToken = 32.0;

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

}  // namespace

std::vector<Flag> trust_flags(const RequestResult& r) {
  std::vector<Flag> flags;
  if (!r.has_usage || r.completion_tokens < 0) {
    flags.push_back(Flag::kNoUsage);
    return flags;
  }
  const auto tokens = static_cast<double>(r.completion_tokens);
  const auto chunks = static_cast<double>(r.chunks);
  if (r.completion_tokens >= 2) {
    if (chunks < kPackedRatio * tokens) {
      flags.push_back(Flag::kPacked);
    } else if (std::fabs(chunks - tokens) > kAgreeTolerance * tokens) {
      flags.push_back(Flag::kDisagrees);
    }
  } else if (r.completion_tokens == 0 && r.chunks > 1) {
    flags.push_back(Flag::kDisagrees);
  }
  if (r.completion_tokens >= 8) {
    const double cpt = static_cast<double>(r.chars) / tokens;
    if (cpt < kMinCharsPerToken || cpt > kMaxCharsPerToken) flags.push_back(Flag::kCharsDisagree);
  }
  return flags;
}

const char* flag_name(Flag f) {
  switch (f) {
    case Flag::kNoUsage: return "no-usage";
    case Flag::kPacked: return "packed";
    case Flag::kDisagrees: return "usage-disagrees";
    case Flag::kCharsDisagree: return "text-disagrees";
  }
  return "?";
}

std::vector<std::string> trust_issues(const RequestResult& r) {
  std::vector<std::string> out;
  const auto tokens = static_cast<double>(r.completion_tokens);
  const auto chunks = static_cast<double>(r.chunks);
  for (Flag f : trust_flags(r)) {
    switch (f) {
      case Flag::kNoUsage:
        out.push_back("the stream carries no usage: token counts are only streamed events");
        break;
      case Flag::kPacked:
        out.push_back(fmt("packs about %.1f tokens per streamed event (%.0f tokens in %.0f events): per-token timing "
                          "is not observable",
                          tokens / std::max(1.0, chunks), tokens, chunks));
        break;
      case Flag::kDisagrees:
        out.push_back(fmt("usage reports %.0f completion tokens but %.0f token events were streamed (%.0f%% apart)",
                          tokens, chunks, 100.0 * std::fabs(chunks - tokens) / std::max(1.0, tokens)));
        break;
      case Flag::kCharsDisagree:
        out.push_back(fmt("usage reports %.0f completion tokens for %.0f bytes of streamed text", tokens,
                          static_cast<double>(r.chars)));
        break;
    }
  }
  return out;
}

}  // namespace hearth::bench

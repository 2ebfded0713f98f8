// Metric arithmetic for `hearth bench` (docs/BENCH.md defines every figure):
// pure functions over the raw timings of one streamed request, or of a group of
// requests released together, plus the honesty checks that decide whether a
// target's token counts (and so its speeds) can be trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hearth::bench {

// One streamed request as observed by the client. Times are seconds on the
// steady clock, relative to the start of the run.
struct RequestResult {
  bool ok = false;          // HTTP 200 and the stream ended normally
  bool truncated = false;   // the stream closed before its end ([DONE] / finish_reason)
  std::string error;        // why it failed (empty when ok)
  int http_status = 0;
  double t_start = 0;       // request sent (before connecting)
  double t_first = -1;      // first streamed token (content) arrived; -1: none
  double t_last = -1;       // last streamed token arrived; -1: none
  double t_end = 0;         // response complete
  std::vector<double> token_times;  // arrival time of every event that carried text
  int64_t chunks = 0;       // events that carried text (= token_times.size())
  int64_t chars = 0;        // bytes of streamed text
  bool has_usage = false;   // the stream carried a usage object
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;  // prompt_tokens_details.cached_tokens; -1: not reported
  // Speculative decoding, from the server's `timings` (Hearth: drafted_n / accepted_n;
  // llama-server: draft_n / draft_n_accepted); -1: not reported.
  int64_t drafted_tokens = -1;
  int64_t accepted_tokens = -1;
  std::string finish_reason;
};

// Median, min and max of a set of values (n = 0: all zero).
struct Stat {
  double median = 0, min = 0, max = 0;
  int64_t n = 0;
};

// Linear-interpolated percentile (p in [0, 100]) of unsorted values; 0 for none.
double percentile(std::vector<double> values, double p);
Stat summarize(const std::vector<double>& values);

// Completion tokens: the server's usage when reported, else the streamed events.
int64_t completion_tokens(const RequestResult& r);
// Request start to first streamed token, in seconds; nullopt without a token.
std::optional<double> ttft(const RequestResult& r);
// (completion tokens - 1) / (last token time - first token time); nullopt when
// fewer than 2 tokens or no time between first and last.
std::optional<double> decode_tps(const RequestResult& r);
// completion tokens / (end - start).
std::optional<double> wall_tps(const RequestResult& r);
// Gaps between consecutive streamed events, in seconds.
std::vector<double> inter_token_latencies(const RequestResult& r);
// All completion tokens of the successful requests / (last end - first start).
std::optional<double> aggregate_tps(const std::vector<RequestResult>& group);

// Honesty checks over one successful request; each string is a reason its token
// counts cannot be trusted (empty: trusted). See docs/BENCH.md for the thresholds.
std::vector<std::string> trust_issues(const RequestResult& r);

// Flag kinds behind trust_issues, for counting in the report.
enum class Flag { kNoUsage, kPacked, kDisagrees, kCharsDisagree };
std::vector<Flag> trust_flags(const RequestResult& r);
const char* flag_name(Flag f);

}  // namespace hearth::bench

// A small Prometheus registry for `hearth serve`'s GET /metrics: counters, gauges and
// histograms with fixed buckets, rendered in the text exposition format (version
// 0.0.4). Updates are lock-free atomics (cheap enough for every engine step); the
// registry's mutex guards only registration and render(). Metrics live as long as
// their Registry; the references it hands out stay valid.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::server {

// Label pairs of one series, in the order given: {{"outcome", "stop"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }  // v >= 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Buckets by upper bound (inclusive, as Prometheus's `le`), plus +Inf.
class Histogram {
 public:
  // `bounds`: finite, strictly increasing. Throws Error(kInvalidInput) otherwise.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);  // NaN is ignored
  const std::vector<double>& bounds() const { return bounds_; }
  // Cumulative counts per bound, then +Inf (== count()): bounds().size() + 1 values.
  std::vector<uint64_t> cumulative() const;
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
};

class Registry {
 public:
  // Registers a series (or returns the one registered with the same name and labels).
  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* ("le"
  // is reserved for histograms); one name has one type and one help text. Throws
  // Error(kInvalidInput) on a violation.
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                       const Labels& labels = {});

  // Every family in registration order: "# HELP", "# TYPE", then its series.
  std::string render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name, help;
    Type type;
    std::vector<Series> series;
  };
  Series& series(const std::string& name, const std::string& help, Type type, const Labels& labels);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
};

// A number as the exposition format writes it: shortest round-trip decimal, "+Inf",
// "-Inf", "NaN".
std::string format_metric_value(double v);

// Default buckets (seconds / counts) of the server's histograms.
std::vector<double> ttft_buckets_seconds();
std::vector<double> inter_token_buckets_seconds();
std::vector<double> batch_size_buckets();
std::vector<double> batch_tokens_buckets();

// The metrics of `hearth serve`, registered in `registry`.
struct ServerMetrics {
  ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  Registry registry;  // first: everything below points into it

  Gauge& requests_running;  // hearth_requests_running: sequences in the running batch
  Gauge& requests_waiting;  // hearth_requests_waiting: queued, not yet scheduled
  // hearth_requests_total{outcome="stop"|"length"|"cancelled"|"error"|"rejected"};
  // rejected: refused before reaching the engine (4xx, queue full).
  Counter& requests_stop;
  Counter& requests_length;
  Counter& requests_cancelled;
  Counter& requests_error;
  Counter& requests_rejected;
  // hearth_requests_admitted_total: accepted by the engine; equals the sum of the
  // stop, length, cancelled and error outcomes plus the requests running and waiting.
  Counter& requests_admitted;
  Counter& prompt_tokens;          // hearth_prompt_tokens_total
  Counter& generation_tokens;      // hearth_generation_tokens_total
  Histogram& time_to_first_token;  // hearth_time_to_first_token_seconds
  Histogram& inter_token_latency;  // hearth_inter_token_latency_seconds
  Gauge& kv_blocks_used;           // hearth_kv_blocks_used: held by live sequences
  Gauge& kv_blocks_cached;         // hearth_kv_blocks_cached: unreferenced, kept for prefix reuse
  Gauge& kv_blocks_total;          // hearth_kv_blocks_total
  Gauge& state_snapshots;          // hearth_state_snapshots: recurrent-state snapshots held (hybrid models)
  Counter& preemptions;            // hearth_preemptions_total: sequences preempted for want of KV blocks (swapped or recomputed)
  Counter& spec_drafted;           // hearth_spec_drafted_tokens_total: speculative decoding's drafted tokens
  Counter& spec_accepted;          // hearth_spec_accepted_tokens_total: ... of which the target accepted
  Counter& prefix_cache_queries;   // hearth_prefix_cache_queries_total (prompt tokens looked up)
  Counter& prefix_cache_hits;      // hearth_prefix_cache_hits_total (of which were cached)
  // The KV disk tier (--kv-disk); all zero without it.
  Gauge& kv_disk_blocks;            // hearth_kv_disk_blocks: KV block files on disk
  Gauge& kv_disk_snapshots;         // hearth_kv_disk_snapshots: state snapshot files on disk
  Gauge& kv_disk_bytes;             // hearth_kv_disk_bytes: their bytes
  Gauge& kv_disk_disabled;          // hearth_kv_disk_disabled: 1 after a disk error turned the tier off
  Counter& kv_disk_hits;            // hearth_kv_disk_hits_total: files read back (and checked)
  Counter& kv_disk_hit_tokens;      // hearth_kv_disk_prompt_tokens_total: prompt tokens restored from disk
  Counter& kv_disk_read_bytes;      // hearth_kv_disk_read_bytes_total
  Counter& kv_disk_written_bytes;   // hearth_kv_disk_written_bytes_total
  Counter& kv_disk_writes;          // hearth_kv_disk_writes_total: files written
  Counter& kv_disk_writes_dropped;  // hearth_kv_disk_writes_dropped_total: write queue full
  Counter& kv_disk_rejected;        // hearth_kv_disk_files_rejected_total: torn / foreign / corrupt, removed
  Histogram& kv_disk_read_seconds;  // hearth_kv_disk_read_seconds: one request's disk blocks read back
  // Preemption by swapping (--kv-swap-bytes; engine/serve_engine_swap.cpp).
  Counter& kv_swap_out;             // hearth_kv_swap_out_total: preempted sequences swapped out to host memory
  Counter& kv_swap_in;              // hearth_kv_swap_in_total: ... and swapped back in
  Counter& kv_swap_out_bytes;       // hearth_kv_swap_out_bytes_total
  Counter& kv_swap_in_bytes;        // hearth_kv_swap_in_bytes_total
  Counter& kv_swap_seconds;         // hearth_kv_swap_seconds_total: time spent copying, both ways
  Counter& kv_preempt_recomputed;   // hearth_kv_preemptions_recomputed_total: preempted and recomputed
  Counter& kv_swap_no_room;         // hearth_kv_swap_skipped_total{reason="no_room"}: swap space full
  Counter& kv_swap_cheaper;         // hearth_kv_swap_skipped_total{reason="recompute_cheaper"}
  Gauge& kv_swap_bytes;             // hearth_kv_swap_bytes: held in the swap space now
  Gauge& kv_swap_capacity;          // hearth_kv_swap_capacity_bytes: --kv-swap-bytes
  Gauge& kv_swap_bandwidth;         // hearth_kv_swap_copy_bytes_per_second: measured (the decision's estimate)
  Gauge& kv_swap_prefill_speed;     // hearth_kv_swap_prefill_tokens_per_second: measured (likewise)
  // The disk level of swapping (--kv-swap-disk-bytes, with --kv-disk): a part of the above.
  Counter& kv_swap_disk_out;        // hearth_kv_swap_disk_out_total: swapped out to disk
  Counter& kv_swap_disk_in;         // hearth_kv_swap_disk_in_total: read back from disk
  Counter& kv_swap_disk_out_bytes;  // hearth_kv_swap_disk_out_bytes_total: swap files' bytes written
  Counter& kv_swap_disk_in_bytes;   // hearth_kv_swap_disk_in_bytes_total: ... read back
  Counter& kv_swap_disk_fallbacks;  // hearth_kv_swap_disk_fallbacks_total: disk swaps recomputed (I/O error, corrupt)
  Gauge& kv_swap_disk_bytes;        // hearth_kv_swap_disk_bytes: reserved on disk now
  Gauge& kv_swap_disk_capacity;     // hearth_kv_swap_disk_capacity_bytes: --kv-swap-disk-bytes
  Gauge& kv_swap_disk_read_speed;   // hearth_kv_swap_disk_read_bytes_per_second: measured (the decision's)
  Histogram& batch_size;           // hearth_batch_size: sequences per engine step
  Histogram& batch_tokens;         // hearth_batch_tokens: tokens per engine step
  // hearth_sampled_tokens_total: tokens generated, counted as each is sampled (the
  // generation total above counts a request's tokens when it ends); the live view's
  // output rate.
  Counter& sampled_tokens;
  // Where the engine steps spend their time (engine::StepTimes): hearth_engine_steps_total
  // (steps that ran a forward pass) and hearth_engine_step_seconds_total{phase}: "forward"
  // (the model's step) and the engine thread's host work around it, "between", "plan",
  // "prepare", "sample", "stream", "finish". Host seconds over steps: what each step adds
  // to the model's own step time.
  Counter& engine_steps;
  Counter& step_forward;
  Counter& step_between;
  Counter& step_plan;
  Counter& step_prepare;
  Counter& step_sample;
  Counter& step_stream;
  Counter& step_finish;
  // The decode steps among them (no prompt chunk: one token per sampled row), what
  // bench_step --batch ROWS compares with: hearth_engine_decode_steps_total,
  // hearth_engine_decode_rows_total, hearth_engine_decode_step_seconds_total{part="forward"|"host"}.
  Counter& decode_steps;
  Counter& decode_rows;
  Counter& decode_forward;
  Counter& decode_host;

  // Counts a finished request by engine::Final::finish_reason ("stop", "length",
  // "cancelled"; anything else counts as "error").
  void request_finished(std::string_view finish_reason);

  std::string render() const { return registry.render(); }
};

}  // namespace hearth::server

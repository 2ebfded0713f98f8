// Prometheus registry and the server's metrics; see metrics.h.
#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace hearth::server {

namespace {

bool valid_name(std::string_view name, bool colon_ok) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void escape_into(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

// {a="x",b="y"} (plus le="..." when `le` is set); "" without labels.
std::string label_text(const Labels& labels, const std::string* le = nullptr) {
  if (labels.empty() && !le) return {};
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    escape_into(out, v, true);
    out += '"';
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (le) add("le", *le);
  out += '}';
  return out;
}

}  // namespace

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// ---------------------------------------------------------------------------
// Histogram

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i] > bounds_[i - 1]))) {
      fail(ErrorKind::kInvalidInput, "metrics",
           "histogram bounds must be finite and strictly increasing");
    }
  }
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  // The first bucket whose bound is >= v (le is inclusive); past the end: +Inf.
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

uint64_t Histogram::count() const { return cumulative().back(); }

// ---------------------------------------------------------------------------
// Registry

Registry::Series& Registry::series(const std::string& name, const std::string& help, Type type,
                                   const Labels& labels) {
  if (!valid_name(name, true))
    fail(ErrorKind::kInvalidInput, "metrics", "bad metric name '" + name + "'");
  for (const auto& [k, v] : labels) {
    if (!valid_name(k, false) || k.rfind("__", 0) == 0 || (type == Type::kHistogram && k == "le")) {
      fail(ErrorKind::kInvalidInput, "metrics",
           "bad label name '" + k + "' on metric '" + name + "'");
    }
  }
  Family* family = nullptr;
  for (auto& f : families_) {
    if (f->name == name) family = f.get();
  }
  if (family) {
    if (family->type != type || family->help != help) {
      fail(ErrorKind::kInvalidInput, "metrics",
           "metric '" + name + "' registered again with another type or help text");
    }
    for (Series& s : family->series) {
      if (s.labels == labels) return s;
    }
  } else {
    families_.push_back(std::make_unique<Family>(Family{name, help, type, {}}));
    family = families_.back().get();
  }
  family->series.push_back(Series{labels, nullptr, nullptr, nullptr});
  return family->series.back();
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Type::kCounter, labels);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Type::kGauge, labels);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help,
                               std::vector<double> bounds, const Labels& labels) {
  Histogram fresh_check(bounds);  // validates before anything is registered
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, help, Type::kHistogram, labels);
  if (!s.histogram) {
    s.histogram = std::make_unique<Histogram>(std::move(bounds));
  } else if (s.histogram->bounds() != bounds) {
    fail(ErrorKind::kInvalidInput, "metrics",
         "histogram '" + name + "' registered again with other buckets");
  }
  return *s.histogram;
}

std::string Registry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " ";
    escape_into(out, f->help, false);
    out += "\n# TYPE " + f->name + " ";
    out += f->type == Type::kCounter ? "counter" : f->type == Type::kGauge ? "gauge" : "histogram";
    out += '\n';
    for (const Series& s : f->series) {
      if (f->type == Type::kCounter || f->type == Type::kGauge) {
        const double v = f->type == Type::kCounter ? s.counter->value() : s.gauge->value();
        out += f->name + label_text(s.labels) + " " + format_metric_value(v) + "\n";
        continue;
      }
      const Histogram& h = *s.histogram;
      const std::vector<uint64_t> cum = h.cumulative();
      for (size_t i = 0; i < cum.size(); ++i) {
        const std::string le = i < h.bounds().size() ? format_metric_value(h.bounds()[i]) : "+Inf";
        out +=
            f->name + "_bucket" + label_text(s.labels, &le) + " " + std::to_string(cum[i]) + "\n";
      }
      out += f->name + "_sum" + label_text(s.labels) + " " + format_metric_value(h.sum()) + "\n";
      out += f->name + "_count" + label_text(s.labels) + " " + std::to_string(cum.back()) + "\n";
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// ServerMetrics

std::vector<double> ttft_buckets_seconds() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}
std::vector<double> inter_token_buckets_seconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1};
}
std::vector<double> batch_size_buckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}; }  // --max-seqs <= 1024
std::vector<double> batch_tokens_buckets() {
  return {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
}

namespace {
const char kRequestsHelp[] = "Requests finished, by outcome";
}  // namespace

namespace {
Counter& step_phase(Registry& r, const char* phase) {
  return r.counter("hearth_engine_step_seconds_total",
                   "Engine thread time in steps, by phase: forward (the model's step) and the host work around it",
                   {{"phase", phase}});
}
Counter& decode_part(Registry& r, const char* part) {
  return r.counter("hearth_engine_decode_step_seconds_total",
                   "Engine thread time in decode steps: forward (the model's step) and host (the rest)",
                   {{"part", part}});
}
}  // namespace

ServerMetrics::ServerMetrics()
    : requests_running(registry.gauge("hearth_requests_running", "Requests in the running batch")),
      requests_waiting(
          registry.gauge("hearth_requests_waiting", "Requests queued, not yet scheduled")),
      requests_stop(
          registry.counter("hearth_requests_total", kRequestsHelp, {{"outcome", "stop"}})),
      requests_length(
          registry.counter("hearth_requests_total", kRequestsHelp, {{"outcome", "length"}})),
      requests_cancelled(
          registry.counter("hearth_requests_total", kRequestsHelp, {{"outcome", "cancelled"}})),
      requests_error(
          registry.counter("hearth_requests_total", kRequestsHelp, {{"outcome", "error"}})),
      requests_rejected(
          registry.counter("hearth_requests_total", kRequestsHelp, {{"outcome", "rejected"}})),
      requests_admitted(registry.counter(
          "hearth_requests_admitted_total",
          "Requests accepted by the engine (each ends as stop, length, cancelled or error)")),
      prompt_tokens(
          registry.counter("hearth_prompt_tokens_total", "Prompt tokens of finished requests")),
      generation_tokens(registry.counter("hearth_generation_tokens_total", "Tokens generated")),
      time_to_first_token(registry.histogram(
          "hearth_time_to_first_token_seconds",
          "Time from request arrival to the first generated token", ttft_buckets_seconds())),
      inter_token_latency(registry.histogram(
          "hearth_inter_token_latency_seconds",
          "Time between consecutive generated tokens of a request", inter_token_buckets_seconds())),
      kv_blocks_used(registry.gauge("hearth_kv_blocks_used", "KV-cache blocks held by live sequences")),
      kv_blocks_cached(registry.gauge("hearth_kv_blocks_cached",
                                      "KV-cache blocks held by no sequence, kept for prefix reuse")),
      kv_blocks_total(registry.gauge("hearth_kv_blocks_total", "KV-cache blocks in the pool")),
      state_snapshots(registry.gauge("hearth_state_snapshots",
                                     "Recurrent-state snapshots kept for prefix reuse (hybrid models)")),
      preemptions(registry.counter("hearth_preemptions_total",
                                   "Sequences sent back to the queue for want of KV blocks (swapped out or recomputed later)")),
      spec_drafted(registry.counter("hearth_spec_drafted_tokens_total",
                                    "Tokens drafted by speculative decoding (--spec) and verified by the model")),
      spec_accepted(registry.counter("hearth_spec_accepted_tokens_total",
                                     "Drafted tokens the model accepted (each a token without a step of its own)")),
      prefix_cache_queries(registry.counter("hearth_prefix_cache_queries_total",
                                            "Prompt tokens looked up in the prefix cache")),
      prefix_cache_hits(registry.counter("hearth_prefix_cache_hits_total",
                                         "Prompt tokens found in the prefix cache")),
      kv_disk_blocks(registry.gauge("hearth_kv_disk_blocks", "KV blocks in the KV disk tier (--kv-disk)")),
      kv_disk_snapshots(registry.gauge("hearth_kv_disk_snapshots",
                                       "Recurrent-state snapshots in the KV disk tier (hybrid models)")),
      kv_disk_bytes(registry.gauge("hearth_kv_disk_bytes", "Bytes of the KV disk tier's files")),
      kv_disk_disabled(registry.gauge("hearth_kv_disk_disabled",
                                      "1 when a disk error (full disk, I/O error) turned the KV disk tier off")),
      kv_disk_hits(registry.counter("hearth_kv_disk_hits_total", "KV disk tier files read back for a prefix hit")),
      kv_disk_hit_tokens(registry.counter("hearth_kv_disk_prompt_tokens_total",
                                          "Prompt tokens of finished requests restored from the KV disk tier")),
      kv_disk_read_bytes(registry.counter("hearth_kv_disk_read_bytes_total", "Bytes read from the KV disk tier")),
      kv_disk_written_bytes(registry.counter("hearth_kv_disk_written_bytes_total",
                                             "Bytes written to the KV disk tier")),
      kv_disk_writes(registry.counter("hearth_kv_disk_writes_total", "Files written to the KV disk tier")),
      kv_disk_writes_dropped(registry.counter("hearth_kv_disk_writes_dropped_total",
                                              "KV disk tier writes dropped (the write queue was full)")),
      kv_disk_rejected(registry.counter("hearth_kv_disk_files_rejected_total",
                                        "KV disk tier files found torn, foreign or corrupt (removed, not loaded)")),
      kv_disk_read_seconds(registry.histogram("hearth_kv_disk_read_seconds",
                                              "Time to read back one request's prefix from the KV disk tier",
                                              {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})),
      kv_swap_out(registry.counter("hearth_kv_swap_out_total",
                                   "Preempted sequences whose KV was swapped out to host memory or disk (not recomputed)")),
      kv_swap_in(registry.counter("hearth_kv_swap_in_total", "Swapped-out sequences copied back into the KV pool")),
      kv_swap_out_bytes(registry.counter("hearth_kv_swap_out_bytes_total", "Bytes copied out to the swap space")),
      kv_swap_in_bytes(registry.counter("hearth_kv_swap_in_bytes_total", "Bytes copied back from the swap space")),
      kv_swap_seconds(registry.counter("hearth_kv_swap_seconds_total", "Time spent on swap copies, out and in")),
      kv_preempt_recomputed(registry.counter("hearth_kv_preemptions_recomputed_total",
                                             "Preempted sequences left to be recomputed (not swapped)")),
      kv_swap_no_room(registry.counter("hearth_kv_swap_skipped_total",
                                       "Preemptions recomputed instead of swapped, by reason", {{"reason", "no_room"}})),
      kv_swap_cheaper(registry.counter("hearth_kv_swap_skipped_total",
                                       "Preemptions recomputed instead of swapped, by reason",
                                       {{"reason", "recompute_cheaper"}})),
      kv_swap_bytes(registry.gauge("hearth_kv_swap_bytes", "Bytes held in the swap space of preempted sequences")),
      kv_swap_capacity(registry.gauge("hearth_kv_swap_capacity_bytes", "Size of the swap space (--kv-swap-bytes)")),
      kv_swap_bandwidth(registry.gauge("hearth_kv_swap_copy_bytes_per_second",
                                       "Measured block copy bandwidth the swap decision uses (largest of the models)")),
      kv_swap_prefill_speed(registry.gauge("hearth_kv_swap_prefill_tokens_per_second",
                                           "Measured prefill speed the swap decision uses (largest of the models)")),
      kv_swap_disk_out(registry.counter("hearth_kv_swap_disk_out_total",
                                        "Preempted sequences swapped out to the KV disk folder (host swap space full)")),
      kv_swap_disk_in(registry.counter("hearth_kv_swap_disk_in_total", "Disk-swapped sequences read back")),
      kv_swap_disk_out_bytes(registry.counter("hearth_kv_swap_disk_out_bytes_total", "Bytes of swap files written")),
      kv_swap_disk_in_bytes(registry.counter("hearth_kv_swap_disk_in_bytes_total", "Bytes of swap files read back")),
      kv_swap_disk_fallbacks(registry.counter("hearth_kv_swap_disk_fallbacks_total",
                                              "Disk-swapped sequences recomputed instead (a failed write or read, a "
                                              "corrupt file)")),
      kv_swap_disk_bytes(registry.gauge("hearth_kv_swap_disk_bytes", "Bytes of preempted sequences held on disk")),
      kv_swap_disk_capacity(registry.gauge("hearth_kv_swap_disk_capacity_bytes",
                                           "Disk share for preempted sequences (--kv-swap-disk-bytes)")),
      kv_swap_disk_read_speed(registry.gauge("hearth_kv_swap_disk_read_bytes_per_second",
                                             "Measured KV disk read throughput the swap decision uses (largest of the "
                                             "models)")),
      batch_size(registry.histogram("hearth_batch_size", "Sequences per engine step",
                                    batch_size_buckets())),
      batch_tokens(registry.histogram("hearth_batch_tokens", "Tokens per engine step",
                                      batch_tokens_buckets())),
      sampled_tokens(registry.counter("hearth_sampled_tokens_total",
                                      "Tokens generated, counted as each is sampled")),
      engine_steps(registry.counter("hearth_engine_steps_total", "Engine steps that ran a forward pass")),
      step_forward(step_phase(registry, "forward")),
      step_between(step_phase(registry, "between")),
      step_plan(step_phase(registry, "plan")),
      step_prepare(step_phase(registry, "prepare")),
      step_sample(step_phase(registry, "sample")),
      step_stream(step_phase(registry, "stream")),
      step_finish(step_phase(registry, "finish")),
      decode_steps(registry.counter("hearth_engine_decode_steps_total",
                                    "Engine steps that only decoded (one token per sampled row, no prompt chunk)")),
      decode_rows(registry.counter("hearth_engine_decode_rows_total", "Sampled rows of those decode steps")),
      decode_forward(decode_part(registry, "forward")),
      decode_host(decode_part(registry, "host")) {}

void ServerMetrics::request_finished(std::string_view finish_reason) {
  if (finish_reason == "stop") {
    requests_stop.inc();
  } else if (finish_reason == "length") {
    requests_length.inc();
  } else if (finish_reason == "cancelled") {
    requests_cancelled.inc();
  } else {
    requests_error.inc();
  }
}

}  // namespace hearth::server

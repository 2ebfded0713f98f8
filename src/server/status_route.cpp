// GET /v1/status; see status_route.h.
#include "server/status_route.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;

// History: one sample per this much time at most (a page polling every second, or
// several pages, add one each), kept for the longest window.
constexpr double kSampleEveryS = 0.2;

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A number, or null for NaN / infinity (JSON has neither).
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A counter or gauge that holds a count (the registry keeps doubles): an integer in JSON.
json count(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9007199254740992.0) return json(static_cast<int64_t>(v));
  return num(v);
}

// cumulative(now) - cumulative(then), bucket by bucket (then may be empty: no history).
std::vector<uint64_t> minus(const std::vector<uint64_t>& now, const std::vector<uint64_t>& then) {
  std::vector<uint64_t> d = now;
  for (size_t i = 0; i < d.size() && i < then.size(); ++i) d[i] = now[i] >= then[i] ? now[i] - then[i] : 0;
  return d;
}

// A histogram as the status shows it: the /metrics totals, and percentiles of what
// was observed inside the window.
json histogram_json(const Histogram& h, const std::vector<uint64_t>& now, const std::vector<uint64_t>* then,
                    double sum_now, double sum_then) {
  json j;
  j["count"] = now.empty() ? 0 : now.back();
  j["sum"] = sum_now;
  json recent;
  if (then == nullptr) {
    recent = nullptr;
  } else {
    const std::vector<uint64_t> d = minus(now, *then);
    const uint64_t n = d.empty() ? 0 : d.back();
    recent["count"] = n;
    recent["mean"] = n ? num((sum_now - sum_then) / static_cast<double>(n)) : json(nullptr);
    recent["p50"] = num(histogram_quantile(0.5, h.bounds(), d));
    recent["p90"] = num(histogram_quantile(0.9, h.bounds(), d));
    recent["p99"] = num(histogram_quantile(0.99, h.bounds(), d));
  }
  j["recent"] = std::move(recent);
  return j;
}

}  // namespace

double histogram_quantile(double q, const std::vector<double>& bounds, const std::vector<uint64_t>& cumulative) {
  if (cumulative.size() != bounds.size() + 1 || cumulative.back() == 0 || bounds.empty()) return NAN;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(cumulative.back());
  size_t i = 0;
  while (i < bounds.size() && static_cast<double>(cumulative[i]) < rank) ++i;
  if (i == bounds.size()) return bounds.back();  // in +Inf: the last bound is all we know
  const double lo = i == 0 ? 0.0 : bounds[i - 1];
  const double below = i == 0 ? 0.0 : static_cast<double>(cumulative[i - 1]);
  const double in_bucket = static_cast<double>(cumulative[i]) - below;
  if (in_bucket <= 0) return bounds[i];
  return lo + (bounds[i] - lo) * (rank - below) / in_bucket;
}

StatusRoute::StatusRoute(ModelRegistry& models, ServerMetrics& metrics, std::vector<ModelMetrics*> model_metrics)
    : models_(models), m_(metrics), model_metrics_(std::move(model_metrics)) {}

StatusRoute::Sample StatusRoute::take() const {
  Sample s;
  s.t = Clock::now();
  s.prompt_tokens = m_.prompt_tokens.value();
  s.generation_tokens = m_.generation_tokens.value();
  s.sampled_tokens = m_.sampled_tokens.value();
  s.batch_tokens_sum = m_.batch_tokens.sum();
  s.prefix_queries = m_.prefix_cache_queries.value();
  s.prefix_hits = m_.prefix_cache_hits.value();
  s.preemptions = m_.preemptions.value();
  s.finished = m_.requests_stop.value() + m_.requests_length.value() + m_.requests_cancelled.value() +
               m_.requests_error.value();
  s.ttft = m_.time_to_first_token.cumulative();
  s.inter_token = m_.inter_token_latency.cumulative();
  s.batch_size = m_.batch_size.cumulative();
  s.batch_size_sum = m_.batch_size.sum();
  s.ttft_sum = m_.time_to_first_token.sum();
  s.inter_token_sum = m_.inter_token_latency.sum();
  return s;
}

json StatusRoute::status(double window_s) {
  window_s = std::clamp(window_s, 1.0, kMaxWindowS);
  const Sample now = take();
  // The window's start: the newest sample at least window_s old, else the oldest one
  // (the server has not kept history that long). None: no rate yet.
  std::optional<Sample> then;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Sample& s : history_) {
      if (seconds_between(s.t, now.t) >= window_s) {
        then = s;
      } else {
        if (!then) then = s;
        break;
      }
    }
    if (history_.empty() || seconds_between(history_.back().t, now.t) >= kSampleEveryS) history_.push_back(now);
    // Keep one sample older than the longest window, none older than that.
    while (history_.size() > 2 && seconds_between(history_[1].t, now.t) >= kMaxWindowS) history_.pop_front();
  }
  double dt = then ? seconds_between(then->t, now.t) : 0;
  if (dt < 0.05) then.reset();  // too close to the last sample for a rate
  auto rate = [&](double v_now, double v_then) { return then ? num((v_now - v_then) / dt) : json(nullptr); };

  const engine::EngineStats st = models_.total_stats();
  const std::vector<ModelStatus> models = models_.status();
  json j;
  j["object"] = "hearth.status";
  j["uptime_s"] = seconds_between(start_, now.t);
  j["window_s"] = then ? json(dt) : json(nullptr);
  j["status"] = st.running_loop ? "ok" : (st.failure.empty() ? "unavailable" : "error");

  json req;
  req["running"] = count(m_.requests_running.value());
  req["waiting"] = count(m_.requests_waiting.value());
  req["admitted"] = count(m_.requests_admitted.value());
  req["finished"] = json{{"stop", count(m_.requests_stop.value())},
                         {"length", count(m_.requests_length.value())},
                         {"cancelled", count(m_.requests_cancelled.value())},
                         {"error", count(m_.requests_error.value())}};
  req["rejected"] = count(m_.requests_rejected.value());
  req["finished_per_s"] = then ? rate(now.finished, then->finished) : json(nullptr);
  j["requests"] = std::move(req);

  // In: prompt tokens computed per second, i.e. the tokens run through the model less the
  // sampled tokens fed back (one per decoding sequence and step); out: tokens sampled.
  json tok;
  tok["prompt_total"] = count(now.prompt_tokens);
  tok["generation_total"] = count(now.generation_tokens);
  tok["sampled_total"] = count(now.sampled_tokens);
  tok["processed_total"] = count(now.batch_tokens_sum);
  if (then) {
    const double in = (now.batch_tokens_sum - then->batch_tokens_sum) - (now.sampled_tokens - then->sampled_tokens);
    tok["in_per_s"] = std::max(0.0, in) / dt;
    tok["out_per_s"] = (now.sampled_tokens - then->sampled_tokens) / dt;
  } else {
    tok["in_per_s"] = nullptr;
    tok["out_per_s"] = nullptr;
  }
  j["tokens"] = std::move(tok);

  j["latency"] = json{{"ttft_seconds", histogram_json(m_.time_to_first_token, now.ttft, then ? &then->ttft : nullptr,
                                                      now.ttft_sum, then ? then->ttft_sum : 0)},
                      {"inter_token_seconds",
                       histogram_json(m_.inter_token_latency, now.inter_token, then ? &then->inter_token : nullptr,
                                      now.inter_token_sum, then ? then->inter_token_sum : 0)}};
  j["batch"] = json{{"size", histogram_json(m_.batch_size, now.batch_size, then ? &then->batch_size : nullptr,
                                            now.batch_size_sum, then ? then->batch_size_sum : 0)},
                    {"steps", st.steps}};

  json kv;
  kv["blocks_used"] = count(m_.kv_blocks_used.value());
  kv["blocks_cached"] = count(m_.kv_blocks_cached.value());
  kv["blocks_total"] = count(m_.kv_blocks_total.value());
  kv["blocks_free"] =
      count(std::max(0.0, m_.kv_blocks_total.value() - m_.kv_blocks_used.value() - m_.kv_blocks_cached.value()));
  kv["state_snapshots"] = count(m_.state_snapshots.value());
  j["kv"] = std::move(kv);
  // The disk tier (--kv-disk): zeros and false when the server has none.
  j["kv_disk"] = json{{"blocks", count(m_.kv_disk_blocks.value())},
                      {"snapshots", count(m_.kv_disk_snapshots.value())},
                      {"bytes", count(m_.kv_disk_bytes.value())},
                      {"hit_tokens", count(m_.kv_disk_hit_tokens.value())},
                      {"disabled", m_.kv_disk_disabled.value() > 0}};
  // Preemption by swapping (--kv-swap-bytes): what preempted sequences became.
  j["kv_swap"] = json{{"swapped_out", count(m_.kv_swap_out.value())},
                      {"swapped_in", count(m_.kv_swap_in.value())},
                      {"recomputed", count(m_.kv_preempt_recomputed.value())},
                      {"bytes", count(m_.kv_swap_bytes.value())},
                      {"capacity_bytes", count(m_.kv_swap_capacity.value())},
                      {"disk_out", count(m_.kv_swap_disk_out.value())},
                      {"disk_in", count(m_.kv_swap_disk_in.value())},
                      {"disk_fallbacks", count(m_.kv_swap_disk_fallbacks.value())},
                      {"disk_bytes", count(m_.kv_swap_disk_bytes.value())}};

  json pc;
  pc["query_tokens"] = count(now.prefix_queries);
  pc["hit_tokens"] = count(now.prefix_hits);
  pc["hit_rate"] = now.prefix_queries > 0 ? num(now.prefix_hits / now.prefix_queries) : json(nullptr);
  const double dq = then ? now.prefix_queries - then->prefix_queries : 0;
  pc["recent_hit_rate"] = dq > 0 ? num((now.prefix_hits - then->prefix_hits) / dq) : json(nullptr);
  j["prefix_cache"] = std::move(pc);
  j["preemptions"] = count(now.preemptions);

  uint64_t device = 0;
  for (const ModelStatus& s : models) device += s.device_bytes;
  j["memory"] = json{{"host_resident_bytes", process_resident_bytes()}, {"device_bytes", device}};

  json list = json::array();
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelStatus& s = models[i];
    json e;
    e["name"] = s.name;
    e["aliases"] = s.aliases;
    e["state"] = model_state_name(s.state);
    e["pinned"] = s.pinned;
    e["in_flight"] = s.in_flight;
    e["vision"] = s.vision;
    e["context_length"] = s.n_ctx > 0 ? json(s.n_ctx) : json(nullptr);
    if (s.has_facts) {
      const ModelFacts& f = s.facts;
      e["architecture"] = f.architecture;
      e["parameters"] = f.parameters;
      e["quantization"] = f.quantization;
      e["size_bytes"] = f.size_bytes;
      e["context_train"] = f.context_train;
      e["device"] = f.device;
      e["kv_type"] = f.kv_type;
      e["max_seqs"] = f.max_seqs;
    }
    e["memory_bytes"] = s.memory_bytes;
    e["memory_measured"] = s.measured;
    e["device_bytes"] = s.device_bytes;
    e["loads"] = s.loads;
    e["load_seconds"] = s.load_seconds;
    if (s.state == ModelState::kLoaded) {
      const engine::EngineStats& es = s.engine;
      e["requests"] = json{{"running", es.running}, {"waiting", es.waiting}};
      e["kv"] = json{{"blocks_used", es.kv_blocks_used},
                     {"blocks_cached", es.kv_blocks_cached},
                     {"blocks_total", es.kv_blocks_total},
                     {"blocks_free", std::max(0, es.kv_blocks_total - es.kv_blocks_used - es.kv_blocks_cached)}};
    }
    if (i < model_metrics_.size()) {
      const ModelMetrics& mm = *model_metrics_[i];
      e["prompt_tokens_total"] = count(mm.prompt_tokens.value());
      e["generation_tokens_total"] = count(mm.generation_tokens.value());
      e["finished"] = json{{"stop", count(mm.requests_stop.value())},
                           {"length", count(mm.requests_length.value())},
                           {"cancelled", count(mm.requests_cancelled.value())},
                           {"error", count(mm.requests_error.value())}};
    }
    if (!s.error.empty()) e["error"] = s.error;
    list.push_back(std::move(e));
  }
  j["models"] = std::move(list);
  return j;
}

}  // namespace hearth::server

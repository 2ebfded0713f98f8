// Per-model metrics of `hearth serve`; see model_metrics.h.
#include "server/model_metrics.h"

namespace hearth::server {

namespace {
Labels model_label(const std::string& model) { return {{"model", model}}; }
Labels outcome(const std::string& model, const char* o) {
  return {{"model", model}, {"outcome", o}};
}
constexpr const char* kRequestsHelp = "Requests finished, by model and outcome";
}  // namespace

ModelMetrics::ModelMetrics(Registry& r, const std::string& model)
    : loaded(r.gauge("hearth_model_loaded", "1 while the model is loaded", model_label(model))),
      state(r.gauge("hearth_model_state", "0 unloaded, 1 loading, 2 loaded, 3 unloading",
                    model_label(model))),
      in_flight(r.gauge("hearth_model_requests_in_flight", "Requests holding the model",
                        model_label(model))),
      memory_bytes(
          r.gauge("hearth_model_memory_bytes",
                  "Host memory the model was measured to take (planned until first measured)",
                  model_label(model))),
      device_bytes(r.gauge("hearth_model_device_memory_bytes",
                           "Device memory the model's back-end holds", model_label(model))),
      load_seconds(r.gauge("hearth_model_load_seconds", "Time of the model's last load",
                           model_label(model))),
      loads(r.counter("hearth_model_loads_total", "Loads of the model", model_label(model))),
      unloads(r.counter("hearth_model_unloads_total", "Unloads of the model", model_label(model))),
      requests_stop(
          r.counter("hearth_model_requests_total", kRequestsHelp, outcome(model, "stop"))),
      requests_length(
          r.counter("hearth_model_requests_total", kRequestsHelp, outcome(model, "length"))),
      requests_cancelled(
          r.counter("hearth_model_requests_total", kRequestsHelp, outcome(model, "cancelled"))),
      requests_error(
          r.counter("hearth_model_requests_total", kRequestsHelp, outcome(model, "error"))),
      prompt_tokens(r.counter("hearth_model_prompt_tokens_total", "Prompt tokens processed",
                              model_label(model))),
      generation_tokens(r.counter("hearth_model_generation_tokens_total", "Tokens generated",
                                  model_label(model))),
      time_to_first_token(r.histogram("hearth_model_time_to_first_token_seconds",
                                      "Time to the first token", ttft_buckets_seconds(),
                                      model_label(model))) {}

void ModelMetrics::update(const ModelStatus& s) {
  loaded.set(s.state == ModelState::kLoaded ? 1 : 0);
  state.set(static_cast<double>(s.state));
  in_flight.set(s.in_flight);
  memory_bytes.set(static_cast<double>(s.memory_bytes));
  device_bytes.set(static_cast<double>(s.device_bytes));
  load_seconds.set(s.load_seconds);
  // The registry counts; the counters catch up (two scrapes may race: never backwards).
  if (const double d = static_cast<double>(s.loads) - loads.value(); d > 0) loads.inc(d);
  if (const double d = static_cast<double>(s.unloads) - unloads.value(); d > 0) unloads.inc(d);
}

void ModelObserver::on_step(int32_t n_seqs, int32_t n_tokens, double) {
  m_.batch_size.observe(n_seqs);
  m_.batch_tokens.observe(n_tokens);
}

void ModelObserver::on_first_token(double ttft_seconds) {
  m_.sampled_tokens.inc();
  m_.time_to_first_token.observe(ttft_seconds);
  if (model_) model_->time_to_first_token.observe(ttft_seconds);
}

void ModelObserver::on_token_interval(double seconds) {
  m_.sampled_tokens.inc();
  m_.inter_token_latency.observe(seconds);
}

void ModelObserver::on_disk_read(double seconds) { m_.kv_disk_read_seconds.observe(seconds); }

void ModelObserver::on_finish(const engine::Final& f) {
  m_.request_finished(f.finish_reason);
  m_.kv_disk_hit_tokens.inc(f.timings.disk_n);
  m_.prompt_tokens.inc(f.prompt_tokens);
  m_.generation_tokens.inc(f.completion_tokens);
  if (!model_) return;
  const std::string& r = f.finish_reason;
  (r == "stop"        ? model_->requests_stop
   : r == "length"    ? model_->requests_length
   : r == "cancelled" ? model_->requests_cancelled
                      : model_->requests_error)
      .inc();
  model_->prompt_tokens.inc(f.prompt_tokens);
  model_->generation_tokens.inc(f.completion_tokens);
}

}  // namespace hearth::server

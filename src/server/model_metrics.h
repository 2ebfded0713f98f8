// The per-model series of /metrics when `hearth serve` serves several models, labelled
// model="NAME" (the server-wide series stay as they are), and the engine observer that
// feeds both.
#pragma once

#include <string>

#include "engine/serve_engine.h"
#include "server/metrics.h"
#include "server/model_registry.h"

namespace hearth::server {

struct ModelMetrics {
  ModelMetrics(Registry& registry, const std::string& model);
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;

  Gauge& loaded;        // hearth_model_loaded: 1 while loaded, else 0
  Gauge& state;         // hearth_model_state: 0 unloaded, 1 loading, 2 loaded, 3 unloading
  Gauge& in_flight;     // hearth_model_requests_in_flight: requests holding the model
  Gauge& memory_bytes;  // hearth_model_memory_bytes: measured host memory (planned until measured)
  Gauge& device_bytes;  // hearth_model_device_memory_bytes
  Gauge& load_seconds;  // hearth_model_load_seconds: the last load
  Counter& loads;       // hearth_model_loads_total
  Counter& unloads;     // hearth_model_unloads_total
  Counter& requests_stop;  // hearth_model_requests_total{outcome}
  Counter& requests_length;
  Counter& requests_cancelled;
  Counter& requests_error;
  Counter& prompt_tokens;          // hearth_model_prompt_tokens_total
  Counter& generation_tokens;      // hearth_model_generation_tokens_total
  Histogram& time_to_first_token;  // hearth_model_time_to_first_token_seconds

  // Sets the gauges and advances the load / unload counters from the registry's status.
  void update(const ModelStatus& s);
};

// Feeds an engine's hooks to the server-wide metrics and, when given, to one model's.
class ModelObserver final : public engine::EngineObserver {
 public:
  ModelObserver(ServerMetrics& server, ModelMetrics* model) : m_(server), model_(model) {}
  void on_step(int32_t n_seqs, int32_t n_tokens, double seconds) override;
  void on_first_token(double ttft_seconds) override;
  void on_token_interval(double seconds) override;
  void on_finish(const engine::Final& f) override;
  void on_disk_read(double seconds) override;

 private:
  ServerMetrics& m_;
  ModelMetrics* model_;
};

}  // namespace hearth::server

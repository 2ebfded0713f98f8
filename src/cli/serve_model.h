// How `hearth serve` loads one model: the options every model shares (a model of
// --config may override some), and the factory the model registry loads through: it
// resolves the reference, sizes the KV cache, builds the back-end, the model, the chat
// template and the engine, and starts the engine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/media_fetch.h"
#include "server/metrics.h"
#include "server/model_metrics.h"
#include "server/model_registry.h"
#include "store/model_entry.h"

namespace hearth::cli {

struct ServeOptions {
  bool no_warmup = false;
  bool deterministic = false;
  std::vector<std::string> models;  // -m / --model: REF, or NAME=REF (repeatable)
  std::string models_dir;           // --models-dir DIR
  std::string config;               // --config FILE (YAML)
  std::vector<std::string> pin;     // --pin NAME: loaded at start, never unloaded
  int max_loaded = 0;
  std::string max_memory;  // --max-memory (bytes, 8G, ...)
  std::string max_device_memory;
  double idle_unload = 0;
  double load_timeout = 120;
  double drain_seconds = 0;  // --drain-seconds: SIGTERM drains for up to this long (0: stop at once)
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t ctx = 0;
  int32_t max_seqs = 8;
  std::string kv_cache_bytes;
  int32_t prefill_chunk = -1;  // -1: 512 on the CPU, kGpuPrefillChunk on a GPU
  int32_t max_queue = 64;
  std::string api_key;
  bool no_ui = false;  // --no-ui: no web page at / and /ui
  int threads = 0;
  std::string log_file;
  std::string kv_type = "f16";
  std::string model_id;
  int32_t state_snapshots = 32;
  std::string chat_template;         // --chat-template FILE
  std::string chat_template_kwargs;  // --chat-template-kwargs JSON
  std::string reasoning_format = "auto";
  int32_t reasoning_budget = -1;
  bool strict_model_names = false;
  std::vector<std::string> aliases;
  std::string device = "auto";
  // 0: 256, or --max-seqs + --max-queue + 64 when that is more (every running and waiting
  // request streams on a connection of its own, and /metrics, /health want theirs).
  int max_connections = 0;
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 64u << 10;
  double request_timeout = 30;
  bool kv_commit = false;
  std::string kv_disk;                // --kv-disk DIR (empty: no disk tier)
  std::string kv_disk_bytes = "16G";  // --kv-disk-bytes
  std::string kv_swap_bytes;          // --kv-swap-bytes (empty: a quarter of the KV pool; 0: off)
  std::string kv_swap_disk_bytes;     // --kv-swap-disk-bytes (empty: a quarter of --kv-disk-bytes; 0: off)
  server::MediaSettings media;  // --allowed-media-dir, --allow-remote-media, --max-media-bytes, ...
  std::string mmproj;           // --mmproj: the vision projector (default: found beside the model)
  int64_t max_image_pixels = 64LL << 20;  // --max-image-pixels
  std::string test_fault_inject;  // hidden, test only: engine::parse_fault_spec
  std::string spec = "off";       // --spec: speculative decoding's drafter (ngram, draft, mtp, off)
  int32_t spec_max = 8;           // --spec-max: drafted tokens per step at most
  std::string draft_model;        // --draft-model: --spec draft's model (each served model gets its own copy)
};

// Checks the options every model uses (ranges, --reasoning-format, ...); throws Error.
void check_serve_options(const ServeOptions& o);

class ServeModelFactory final : public server::ModelFactory {
 public:
  ServeModelFactory(const ServeOptions& options, server::ServerMetrics& metrics)
      : o_(options), metrics_(metrics) {}
  // Resolves a model reference (once: loads reuse it, the resolver's notes are printed
  // once); throws Error naming it when it cannot be found (`check_path`: also a path
  // that does not exist, which otherwise fails at its load).
  store::ModelEntry resolve(const std::string& ref, bool check_path = false);
  // The per-model metrics the engine of model `name` feeds (router mode).
  void set_model_metrics(const std::string& name, server::ModelMetrics* metrics);
  uint64_t planned_bytes(const server::ModelSpec& spec) override;
  uint64_t planned_device_bytes(const server::ModelSpec& spec) override;
  std::unique_ptr<server::LoadedModel> load(const server::ModelSpec& spec) override;

 private:
  const ServeOptions& o_;
  server::ServerMetrics& metrics_;
  std::mutex mu_;
  std::map<std::string, store::ModelEntry> resolved_;
  std::map<std::string, server::ModelMetrics*> model_metrics_;
};

}  // namespace hearth::cli

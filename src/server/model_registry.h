// The models of `hearth serve`: every configured model with its state (unloaded,
// loading, loaded, unloading), loaded on demand and unloaded least-recently-used first
// when a new one does not fit --max-loaded or the memory budgets, or when it sat idle
// for its idle time. Pinned models never unload.
//
// Threads: HTTP threads call acquire(), which leases a loaded model at once, or queues
// its load and waits (bounded) for it. One manager thread does every load, in order,
// and the idle unloads; loads therefore never run on an HTTP thread, and requests to
// the other loaded models go on while one loads. An unload (to make room, idle, or
// POST /models/unload) first marks the model unloading, so new requests for it wait,
// then waits for its requests in flight to finish before the engine stops. One mutex
// guards the table; it is never held while a model loads or is freed.
//
// Memory: --max-memory bounds the process's resident memory as measured now (the probe,
// /proc/self/status VmRSS by default) plus what the model to load takes: the most it
// was measured to take, the growth of the probe across its load or what was freed when
// it was last unloaded (the KV cache and mapped weights grow as they are touched); a
// model never loaded yet counts its planned size (weights + KV budget + states).
// Unloading the least recently used model and measuring again repeats until it fits.
// --max-device-memory bounds the device memory the loaded back-ends report holding.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/serve_engine.h"
#include "server/served_model.h"

namespace hearth::server {

enum class ModelState { kUnloaded, kLoading, kLoaded, kUnloading };
const char* model_state_name(ModelState s);  // "unloaded", "loading", "loaded", "unloading"

// One configured model: its name, where it lies, and how it is served. Unset optional
// settings take the server's own options.
struct ModelSpec {
  std::string name;                     // its id in /v1/models and in requests
  std::string ref;                      // what -m accepts: path, ORG/NAME[:QUANT], NAME:TAG
  std::vector<std::string> aliases;     // other names requests may use
  bool pinned = false;                  // loaded at start, never unloaded
  std::optional<double> idle_unload_s;  // 0: never; unset: --idle-unload
  std::optional<int64_t> ctx;
  std::optional<int32_t> max_seqs;
  std::optional<std::string> kv_cache_bytes;
  std::optional<std::string> chat_template;  // a Jinja file or tokenizer_config.json
  std::optional<std::string> device;
};

// What a loaded model is, for the status route and the web page (GET /v1/status): read
// from its file's header and its plan at load, kept after an unload.
struct ModelFacts {
  std::string architecture;  // general.architecture ("llama", "qwen3", ...)
  uint64_t parameters = 0;
  std::string quantization;  // "Q4_K_M", "F16", ... ("" when unknown)
  uint64_t size_bytes = 0;   // weights on disk
  int64_t context_train = 0; // the context the model was trained for
  std::string device;        // the back-end it runs on ("cpu", "cuda:0")
  std::string kv_type;       // KV cache element type ("f16", ...)
  int32_t max_seqs = 0;      // sequences decoded together
};

// A model in memory, with everything its requests use. Destroying it stops its engine
// (requests still running end with an error; the registry only frees idle models).
class LoadedModel {
 public:
  virtual ~LoadedModel() = default;
  virtual const ServedModel& served() const = 0;
  virtual uint64_t device_bytes() const { return 0; }  // device memory its back-end holds
  virtual ModelFacts facts() const { return {}; }
};

class ModelFactory {
 public:
  virtual ~ModelFactory() = default;
  // The memory loading `spec` is planned to take (weights, KV budget, states), used for
  // the budget until the model was measured once. Throws Error when the model cannot be
  // opened.
  virtual uint64_t planned_bytes(const ModelSpec& spec) = 0;
  // The device memory loading `spec` is planned to take (0: it would run on the CPU), used
  // for --max-device-memory until the model was loaded once (then its back-end's own count).
  virtual uint64_t planned_device_bytes(const ModelSpec& spec) {
    (void)spec;
    return 0;
  }
  // Loads the model and starts its engine. Throws Error.
  virtual std::unique_ptr<LoadedModel> load(const ModelSpec& spec) = 0;
};

struct RegistryOptions {
  int max_loaded = 0;              // models loaded at once; 0: no limit
  uint64_t max_memory = 0;         // host bytes for all loaded models; 0: no limit
  uint64_t max_device_memory = 0;  // device bytes for all loaded models; 0: no limit
  double idle_unload_s = 0;        // default idle time before an unload; 0: never
  double load_timeout_s = 120;     // how long a request waits for its model to load (then 503)
  double sweep_interval_s = 0.25;  // how often the manager checks idle models
  // Bytes the process uses now (default: resident memory, /proc/self/status VmRSS).
  std::function<uint64_t()> memory_probe;
  // Log lines (load, unload, why); default: stderr.
  std::function<void(const std::string&)> log;
};

struct ModelStatus {
  std::string name;
  std::vector<std::string> aliases;
  ModelState state = ModelState::kUnloaded;
  bool pinned = false;
  int in_flight = 0;
  uint64_t memory_bytes = 0;  // measured (or planned, when `measured` is false)
  bool measured = false;
  uint64_t device_bytes = 0;
  uint64_t loads = 0, unloads = 0;
  double load_seconds = 0;  // the last load
  int64_t n_ctx = 0;        // while loaded
  bool vision = false;      // while loaded: the model takes images (a vision encoder is on)
  std::string error;        // why the last load failed
  bool has_facts = false;   // loaded at least once
  ModelFacts facts;         // from its last load
  engine::EngineStats engine;  // while loaded: its engine's statistics
};

// Reads VmRSS of /proc/self/status in bytes (0 when unknown).
uint64_t process_resident_bytes();

class ModelRegistry {
 public:
  // `specs`: at least one; names and aliases must be unique (throws Error otherwise).
  ModelRegistry(std::vector<ModelSpec> specs, ModelFactory& factory, RegistryOptions options);
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Starts the manager thread (loads and idle unloads).
  void start();
  // Loads model `index` on this thread (at start: pinned models, the one -m model);
  // throws the loader's Error.
  void load_now(size_t index);

  size_t size() const { return entries_.size(); }
  const ModelSpec& spec(size_t index) const { return entries_[index]->spec; }
  // The model `name` names (its name or an alias), or nullopt.
  std::optional<size_t> find(const std::string& name) const;
  // Every name, then every alias, comma-separated (for a 404).
  std::string names() const;

  // Leases model `index` for one request: at once when loaded, else after its load
  // (queued on the manager thread). Throws ApiException: 503 with code "model_loading"
  // after load_timeout_s, 500 "model_load_failed" when the load failed, 503 when the
  // registry is stopping.
  ModelLease acquire(size_t index);
  // POST /models/load: as acquire(), without keeping the lease.
  void load(size_t index);
  // POST /models/unload: waits for the model's requests in flight, then unloads it.
  // Returns false when it was not loaded. Throws ApiException 400 for a pinned model.
  bool unload(size_t index);

  std::vector<ModelStatus> status() const;
  ModelState state(size_t index) const;
  // The engines' statistics summed over the loaded models; the counters (admitted,
  // prefix queries and hits, preemptions, steps) also count the models unloaded since
  // start, so they never go back.
  engine::EngineStats total_stats() const;
  // The engine of a loaded model's failure ("" when none is loaded or all run).
  std::string failure() const;

  // Stops every loaded engine (their requests end with an error) and the manager; no
  // load starts after. Safe from any thread, more than once.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    ModelSpec spec;
    ModelState state = ModelState::kUnloaded;
    std::unique_ptr<LoadedModel> loaded;
    int in_flight = 0;
    Clock::time_point last_used{};
    uint64_t load_seq = 0;   // loads queued so far
    uint64_t error_seq = 0;  // the load that failed last (error)
    std::string error;
    std::exception_ptr error_ptr;  // the loader's exception (load_now rethrows it)
    uint64_t planned = 0;          // planned_bytes, once asked
    uint64_t planned_device = 0;   // planned_device_bytes, once asked
    bool device_asked = false;
    uint64_t measured = 0;         // host bytes measured (0: never)
    uint64_t device = 0;           // device bytes of the loaded back-end
    uint64_t loads = 0, unloads = 0;
    double load_seconds = 0;
    std::optional<ModelFacts> facts;  // from the last load
    engine::EngineStats retired;  // counters of the engines unloaded so far
  };
  struct Release;  // a lease's end: in_flight - 1

  void manager();
  // With the lock held (may release it while it waits or frees).
  void queue_load(size_t index);
  // `quiet`: no log line for a failure (load_now: the caller reports it).
  void do_load(std::unique_lock<std::mutex>& lk, size_t index, bool quiet = false);
  // Makes room for `index`; false (with its error set) when nothing can be unloaded.
  bool make_room(std::unique_lock<std::mutex>& lk, size_t index);
  void unload_locked(std::unique_lock<std::mutex>& lk, size_t index, const std::string& why);
  void sweep_idle(std::unique_lock<std::mutex>& lk);
  bool ask_plan(std::unique_lock<std::mutex>& lk, Entry& e, uint64_t (ModelFactory::*plan)(const ModelSpec&),
                uint64_t& out);
  uint64_t host_bytes(const Entry& e) const { return e.measured ? e.measured : e.planned; }
  uint64_t device_bytes(const Entry& e) const { return e.device ? e.device : e.planned_device; }
  double idle_limit(const Entry& e) const;
  void log(const std::string& line) const;
  uint64_t probe() const;

  std::vector<std::unique_ptr<Entry>> entries_;
  ModelFactory& factory_;
  RegistryOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // any state change, a lease's end, a queued load
  std::deque<size_t> queue_;    // loads for the manager, in order
  bool stopping_ = false;
  std::thread manager_;
};

}  // namespace hearth::server

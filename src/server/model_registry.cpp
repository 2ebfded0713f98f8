// The model registry of `hearth serve`; see model_registry.h.
#include "server/model_registry.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "server/openai_protocol.h"

namespace hearth::server {

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::kUnloaded:
      return "unloaded";
    case ModelState::kLoading:
      return "loading";
    case ModelState::kLoaded:
      return "loaded";
    case ModelState::kUnloading:
      return "unloading";
  }
  return "unknown";
}

uint64_t process_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// The end of one lease: the request no longer holds its model.
struct ModelRegistry::Release {
  ModelRegistry* registry;
  size_t index;
  ~Release() {
    {
      std::lock_guard<std::mutex> lock(registry->mu_);
      Entry& e = *registry->entries_[index];
      --e.in_flight;
      e.last_used = Clock::now();  // idle time counts from the end of the last request
    }
    registry->cv_.notify_all();
  }
};

ModelRegistry::ModelRegistry(std::vector<ModelSpec> specs, ModelFactory& factory,
                             RegistryOptions options)
    : factory_(factory), opt_(std::move(options)) {
  if (specs.empty()) fail(ErrorKind::kInvalidInput, "serve", "no model to serve");
  std::set<std::string> seen;
  for (auto& s : specs) {
    if (s.name.empty())
      fail(ErrorKind::kInvalidInput, "serve", "a model without a name (" + s.ref + ")");
    for (const std::string* n : [&] {
           std::vector<const std::string*> all{&s.name};
           for (const auto& a : s.aliases) all.push_back(&a);
           return all;
         }()) {
      if (!seen.insert(*n).second) {
        fail(ErrorKind::kInvalidInput, "serve",
             "the model name '" + *n + "' is given twice (names and aliases must be unique)");
      }
    }
    auto e = std::make_unique<Entry>();
    e->spec = std::move(s);
    entries_.push_back(std::move(e));
  }
}

ModelRegistry::~ModelRegistry() {
  stop();
  if (manager_.joinable()) manager_.join();
}

void ModelRegistry::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!manager_.joinable() && !stopping_) manager_ = std::thread([this] { manager(); });
}

void ModelRegistry::log(const std::string& line) const {
  if (opt_.log) {
    opt_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

uint64_t ModelRegistry::probe() const {
  return opt_.memory_probe ? opt_.memory_probe() : process_resident_bytes();
}

double ModelRegistry::idle_limit(const Entry& e) const {
  return e.spec.idle_unload_s ? *e.spec.idle_unload_s : opt_.idle_unload_s;
}

std::optional<size_t> ModelRegistry::find(const std::string& name) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const ModelSpec& s = entries_[i]->spec;
    if (s.name == name || std::find(s.aliases.begin(), s.aliases.end(), name) != s.aliases.end())
      return i;
  }
  return std::nullopt;
}

std::string ModelRegistry::names() const {
  std::string out;
  auto add = [&](const std::string& n) { out += (out.empty() ? "" : ", ") + n; };
  for (const auto& e : entries_) add(e->spec.name);
  for (const auto& e : entries_) {
    for (const auto& a : e->spec.aliases) add(a);
  }
  return out;
}

void ModelRegistry::queue_load(size_t index) {
  Entry& e = *entries_[index];
  e.state = ModelState::kLoading;
  ++e.load_seq;
  queue_.push_back(index);
  cv_.notify_all();
}

ModelLease ModelRegistry::acquire(size_t index) {
  std::unique_lock<std::mutex> lk(mu_);
  Entry& e = *entries_[index];
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(opt_.load_timeout_s));
  uint64_t waiting_for = 0;  // the load this request waits for
  for (;;) {
    if (stopping_) throw ApiException(engine_stopped(""));
    if (e.state == ModelState::kLoaded) {
      ++e.in_flight;
      e.last_used = Clock::now();
      std::shared_ptr<Release> release(
          new Release{this, index});  // (no temporary: its end would release)
      return ModelLease(release, &e.loaded->served());
    }
    if (e.state == ModelState::kUnloaded) {
      if (waiting_for != 0 && e.error_seq == waiting_for) {
        throw ApiException(ApiError{500, "model '" + e.spec.name + "' failed to load: " + e.error,
                                    "server_error", "model", "model_load_failed"});
      }
      queue_load(index);
      waiting_for = e.load_seq;
    } else if (e.state == ModelState::kLoading && waiting_for == 0) {
      waiting_for = e.load_seq;
    }
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && e.state != ModelState::kLoaded) {
      throw ApiException(ApiError{503,
                                  "model '" + e.spec.name + "' is " + model_state_name(e.state) +
                                      " and was not ready within " +
                                      std::to_string(opt_.load_timeout_s) +
                                      " s (--load-timeout); retry later",
                                  "server_error", "model", "model_loading"});
    }
  }
}

void ModelRegistry::load(size_t index) { acquire(index); }

void ModelRegistry::load_now(size_t index) {
  std::unique_lock<std::mutex> lk(mu_);
  Entry& e = *entries_[index];
  if (e.state == ModelState::kLoaded) return;
  if (e.state != ModelState::kUnloaded)
    fail(ErrorKind::kInvalidInput, "serve", e.spec.name + " is already loading");
  e.state = ModelState::kLoading;
  ++e.load_seq;
  do_load(lk, index, true);
  if (e.state == ModelState::kLoaded) return;
  if (e.error_ptr) std::rethrow_exception(e.error_ptr);
  fail(ErrorKind::kResource, "serve", e.error);
}

bool ModelRegistry::unload(size_t index) {
  std::unique_lock<std::mutex> lk(mu_);
  Entry& e = *entries_[index];
  if (e.spec.pinned) {
    throw ApiException(
        invalid_request("model '" + e.spec.name + "' is pinned: it is never unloaded", "model"));
  }
  // A load or an unload under way: wait for its end, then unload what is loaded.
  cv_.wait(lk, [&] {
    return stopping_ || e.state == ModelState::kLoaded || e.state == ModelState::kUnloaded;
  });
  if (e.state != ModelState::kLoaded || stopping_) return false;
  unload_locked(lk, index, "asked (POST /models/unload)");
  return true;
}

// Asks the factory for a planned size (which may open the model file) without the lock,
// stored in `out` (a field of e) under it; false, with the entry's error set, when that fails.
bool ModelRegistry::ask_plan(std::unique_lock<std::mutex>& lk, Entry& e,
                             uint64_t (ModelFactory::*plan)(const ModelSpec&), uint64_t& out) {
  lk.unlock();
  uint64_t bytes = 0;
  std::string error;
  std::exception_ptr ep;
  try {
    bytes = (factory_.*plan)(e.spec);
  } catch (const std::exception& ex) {
    error = ex.what();
    ep = std::current_exception();
  }
  lk.lock();
  if (error.empty()) {
    out = bytes;  // (under the lock: others read the entry's sizes)
    return true;
  }
  e.error = error;
  e.error_ptr = ep;
  return false;
}

bool ModelRegistry::make_room(std::unique_lock<std::mutex>& lk, size_t index) {
  Entry& e = *entries_[index];
  if (!e.measured && e.planned == 0 && (opt_.max_memory != 0)) {
    if (!ask_plan(lk, e, &ModelFactory::planned_bytes, e.planned)) return false;
  }
  if (e.device == 0 && !e.device_asked && opt_.max_device_memory != 0) {
    // Never loaded yet: its planned device memory (weights, KV budget, states, reserve)
    // counts against --max-device-memory, not 0 (which let a second model load beside the first).
    if (!ask_plan(lk, e, &ModelFactory::planned_device_bytes, e.planned_device)) return false;
    e.device_asked = true;
  }
  for (;;) {
    if (stopping_) {
      e.error = "the server is stopping";
      e.error_ptr = nullptr;
      return false;
    }
    int resident = 0;
    uint64_t device = 0;
    bool unloading = false;
    std::vector<std::string> pinned;
    std::optional<size_t> victim;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& o = *entries_[i];
      if (i == index || (o.state != ModelState::kLoaded && o.state != ModelState::kUnloading))
        continue;
      ++resident;
      device += device_bytes(o);
      if (o.state == ModelState::kUnloading) unloading = true;
      if (o.state != ModelState::kLoaded) continue;
      if (o.spec.pinned) {
        pinned.push_back(o.spec.name);
        continue;
      }
      // Least recently used first, idle models before busy ones (a busy one is drained).
      if (!victim ||
          std::make_tuple(o.in_flight > 0, o.last_used) <
              std::make_tuple(entries_[*victim]->in_flight > 0, entries_[*victim]->last_used)) {
        victim = i;
      }
    }
    const bool fits_count = opt_.max_loaded == 0 || resident < opt_.max_loaded;
    // Host memory: what the process holds now (measured), plus what this model takes.
    const uint64_t bytes = opt_.max_memory != 0 ? probe() : 0;
    const bool fits_memory = opt_.max_memory == 0 || bytes + host_bytes(e) <= opt_.max_memory;
    const bool fits_device =
        opt_.max_device_memory == 0 || device + device_bytes(e) <= opt_.max_device_memory;
    if (fits_count && fits_memory && fits_device) return true;
    if (unloading) {  // an unload under way frees room: wait for it
      cv_.wait(lk);
      continue;
    }
    const std::string why = !fits_count    ? "--max-loaded " + std::to_string(opt_.max_loaded)
                            : !fits_memory ? "--max-memory " + mib(opt_.max_memory) +
                                                 " (in use: " + mib(bytes) +
                                                 ", this model: " + mib(host_bytes(e)) + ")"
                                           : "--max-device-memory " + mib(opt_.max_device_memory) +
                                                 " (in use: " + mib(device) + ", this model: " +
                                                 mib(device_bytes(e)) + ")";
    if (!victim) {
      if (resident == 0) {  // nothing else is loaded: the model alone is over the budget
        log("hearth: " + e.spec.name + " alone exceeds " + why + "; loading it anyway");
        return true;
      }
      std::string list;
      for (const auto& n : pinned) list += (list.empty() ? "" : ", ") + n;
      e.error =
          "no room under " + why + ": the loaded models are pinned (" + list + ") or still loading";
      e.error_ptr = nullptr;
      return false;
    }
    unload_locked(lk, *victim, "to make room for " + e.spec.name + " (" + why + ")");
  }
}

void ModelRegistry::do_load(std::unique_lock<std::mutex>& lk, size_t index, bool quiet) {
  Entry& e = *entries_[index];
  if (e.state != ModelState::kLoading) return;
  auto failed = [&] {
    e.state = ModelState::kUnloaded;
    e.error_seq = e.load_seq;
    if (!quiet) log("hearth: model " + e.spec.name + " failed to load: " + e.error);
    cv_.notify_all();
  };
  if (!make_room(lk, index)) return failed();
  lk.unlock();
  const auto t0 = Clock::now();
  const uint64_t before = probe();
  std::unique_ptr<LoadedModel> m;
  std::string error;
  std::exception_ptr ep;
  try {
    m = factory_.load(e.spec);
  } catch (const std::exception& ex) {
    error = ex.what();
    ep = std::current_exception();
  }
  const uint64_t after = probe();
  lk.lock();
  if (!m) {
    e.error = error;
    e.error_ptr = ep;
    return failed();
  }
  const uint64_t growth = after > before ? after - before : 0;
  e.measured = std::max(e.measured, growth);
  e.device = m->device_bytes();
  e.facts = m->facts();
  e.loaded = std::move(m);
  e.state = ModelState::kLoaded;
  e.error.clear();
  e.error_ptr = nullptr;
  ++e.loads;
  e.last_used = Clock::now();
  e.load_seconds = seconds_since(t0);
  if (stopping_) e.loaded->served().engine->stop();
  char line[256];
  std::snprintf(line, sizeof line, "hearth: model %s loaded in %.2f s (resident memory +%s",
                e.spec.name.c_str(), e.load_seconds, mib(growth).c_str());
  log(std::string(line) + (e.device ? ", device " + mib(e.device) : "") + ")");
  cv_.notify_all();
}

void ModelRegistry::unload_locked(std::unique_lock<std::mutex>& lk, size_t index,
                                  const std::string& why) {
  Entry& e = *entries_[index];
  e.state = ModelState::kUnloading;  // new requests for it wait from now on
  cv_.notify_all();
  if (e.in_flight > 0)
    log("hearth: unloading " + e.spec.name + " " + why + " once its " +
        std::to_string(e.in_flight) + " requests in flight end");
  cv_.wait(lk, [&] { return e.in_flight == 0; });
  std::unique_ptr<LoadedModel> m = std::move(e.loaded);
  if (const engine::ServeEngine* eng = m->served().engine) {
    const engine::EngineStats s = eng->stats();
    e.retired.steps += s.steps;
    e.retired.admitted += s.admitted;
    e.retired.preemptions += s.preemptions;
    e.retired.spec_drafted += s.spec_drafted;
    e.retired.spec_accepted += s.spec_accepted;
    e.retired.kv_swap.add(s.kv_swap);
    e.retired.step_times.add(s.step_times);
    // Gauges and estimates go with the engine; its counters stay in the totals.
    e.retired.kv_swap.bytes_held = e.retired.kv_swap.capacity = 0;
    e.retired.kv_swap.copy_bytes_per_s = e.retired.kv_swap.prefill_tokens_per_s = 0;
    e.retired.kv_swap.disk_bytes_held = e.retired.kv_swap.disk_capacity = 0;
    e.retired.kv_swap.disk_read_bytes_per_s = 0;
    e.retired.prefix_query_tokens += s.prefix_query_tokens;
    e.retired.prefix_hit_tokens += s.prefix_hit_tokens;
  }
  lk.unlock();
  const uint64_t before = probe();
  m.reset();  // stops the engine, frees the KV cache, the weights and their mapping
#if defined(__GLIBC__)
  malloc_trim(0);  // hand the freed heap back to the system, so resident memory falls
#endif
  const uint64_t after = probe();
  lk.lock();
  const uint64_t freed = before > after ? before - after : 0;
  e.measured = std::max(e.measured, freed);
  e.device = 0;
  e.state = ModelState::kUnloaded;
  ++e.unloads;
  log("hearth: model " + e.spec.name + " unloaded " + why + " (resident memory -" + mib(freed) +
      ")");
  cv_.notify_all();
}

void ModelRegistry::sweep_idle(std::unique_lock<std::mutex>& lk) {
  for (bool again = true; again && !stopping_;) {
    again = false;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = *entries_[i];
      const double limit = idle_limit(e);
      if (e.state != ModelState::kLoaded || e.spec.pinned || e.in_flight > 0 || limit <= 0)
        continue;
      const double idle = seconds_since(e.last_used);
      if (idle < limit) continue;
      char why[64];
      std::snprintf(why, sizeof why, "after %.1f s idle", idle);
      unload_locked(lk, i, why);
      again = true;  // the lock was released: look again
      break;
    }
  }
}

void ModelRegistry::manager() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    if (!queue_.empty()) {
      const size_t i = queue_.front();
      queue_.pop_front();
      do_load(lk, i);
      continue;
    }
    sweep_idle(lk);
    if (!queue_.empty() || stopping_) continue;
    cv_.wait_for(lk, std::chrono::duration<double>(opt_.sweep_interval_s));
  }
  for (size_t i : queue_) {  // loads that will not happen: their waiters get an error
    Entry& e = *entries_[i];
    e.state = ModelState::kUnloaded;
    e.error = "the server is stopping";
    e.error_seq = e.load_seq;
  }
  queue_.clear();
  cv_.notify_all();
}

void ModelRegistry::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& e : entries_) {
      if (e->loaded && e->loaded->served().engine) e->loaded->served().engine->stop();
    }
  }
  cv_.notify_all();
}

std::vector<ModelStatus> ModelRegistry::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelStatus> out;
  for (const auto& p : entries_) {
    const Entry& e = *p;
    ModelStatus s;
    s.name = e.spec.name;
    s.aliases = e.spec.aliases;
    s.state = e.state;
    s.pinned = e.spec.pinned;
    s.in_flight = e.in_flight;
    s.memory_bytes = host_bytes(e);
    s.measured = e.measured != 0;
    s.device_bytes = e.device;
    s.loads = e.loads;
    s.unloads = e.unloads;
    s.load_seconds = e.load_seconds;
    if (e.loaded && e.loaded->served().engine) s.n_ctx = e.loaded->served().engine->n_ctx();
    if (e.loaded && e.loaded->served().settings) s.vision = e.loaded->served().settings->vision;
    if (e.loaded && e.loaded->served().engine) s.engine = e.loaded->served().engine->stats();
    s.error = e.error;
    s.has_facts = e.facts.has_value();
    if (e.facts) s.facts = *e.facts;
    out.push_back(std::move(s));
  }
  return out;
}

ModelState ModelRegistry::state(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_[index]->state;
}

engine::EngineStats ModelRegistry::total_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  engine::EngineStats t;
  t.running_loop = !stopping_;
  for (const auto& p : entries_) {
    const Entry& e = *p;
    t.steps += e.retired.steps;
    t.admitted += e.retired.admitted;
    t.preemptions += e.retired.preemptions;
    t.spec_drafted += e.retired.spec_drafted;
    t.spec_accepted += e.retired.spec_accepted;
    t.kv_swap.add(e.retired.kv_swap);
    t.step_times.add(e.retired.step_times);
    t.prefix_query_tokens += e.retired.prefix_query_tokens;
    t.prefix_hit_tokens += e.retired.prefix_hit_tokens;
    if (!e.loaded || !e.loaded->served().engine) continue;
    const engine::EngineStats s = e.loaded->served().engine->stats();
    t.running += s.running;
    t.waiting += s.waiting;
    t.kv_blocks_used += s.kv_blocks_used;
    t.kv_blocks_total += s.kv_blocks_total;
    t.kv_blocks_cached += s.kv_blocks_cached;
    t.state_snapshots += s.state_snapshots;
    t.steps += s.steps;
    t.admitted += s.admitted;
    t.preemptions += s.preemptions;
    t.spec_drafted += s.spec_drafted;
    t.spec_accepted += s.spec_accepted;
    t.prefix_query_tokens += s.prefix_query_tokens;
    t.prefix_hit_tokens += s.prefix_hit_tokens;
    t.kv_swap.add(s.kv_swap);
    t.step_times.add(s.step_times);
    if (s.kv_disk) {
      // Each model has its own fingerprint folder: the numbers add up.
      engine::kvdisk::DiskStats& a = t.kv_disk_stats;
      const engine::kvdisk::DiskStats& b = s.kv_disk_stats;
      t.kv_disk = true;
      a.kv_files += b.kv_files;
      a.state_files += b.state_files;
      a.bytes_on_disk += b.bytes_on_disk;
      a.files_read += b.files_read;
      a.bytes_read += b.bytes_read;
      a.files_written += b.files_written;
      a.bytes_written += b.bytes_written;
      a.writes_dropped += b.writes_dropped;
      a.files_rejected += b.files_rejected;
      a.reads += b.reads;
      a.read_seconds += b.read_seconds;
      a.disabled = a.disabled || b.disabled;
    }
    if (!s.running_loop) {
      t.running_loop = false;
      if (t.failure.empty()) t.failure = s.failure;
    }
  }
  return t;
}

std::string ModelRegistry::failure() const { return total_stats().failure; }

}  // namespace hearth::server

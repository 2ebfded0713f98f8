// The model registry of `hearth serve` (server/model_registry.h): least-recently-used
// unloading under --max-loaded and the memory budget, pinned models, idle unloads, waits
// for loads and for requests in flight, load failures and timeouts; and the YAML model
// list (server/model_config.h). The models here are stand-ins that hold a number of
// "resident" bytes the registry's memory probe reads, so the budget logic is checked
// exactly; real models behind a real server are tests/e2e/test_multi_model.py.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "server/model_config.h"
#include "server/model_registry.h"
#include "server/openai_protocol.h"

using namespace hearth;
using namespace hearth::server;
using namespace std::chrono_literals;

namespace {

// Stand-in models: each load adds its size to `resident` (what the probe reports) and
// its destruction takes it away. A model named "bad" fails to load; loads wait while
// `gate` is closed.
struct Factory : ModelFactory {
  std::atomic<uint64_t> resident{0};
  std::map<std::string, uint64_t> sizes;  // default 100
  std::map<std::string, uint64_t> device_sizes;  // device memory a loaded model holds (default 0)
  uint64_t planned = 100;
  uint64_t planned_device = 0;
  std::atomic<int> planned_device_calls{0};
  std::atomic<int> loads{0}, planned_calls{0};
  std::mutex mu;
  std::condition_variable cv;
  bool gate_open = true;

  struct Model : LoadedModel {
    Factory* f;
    uint64_t size;
    ServedModel view;
    Model(Factory* factory, uint64_t s, std::string name) : f(factory), size(s) {
      view.id = std::move(name);
      f->resident += size;
    }
    ~Model() override { f->resident -= size; }
    const ServedModel& served() const override { return view; }
    uint64_t device_bytes() const override {
      auto it = f->device_sizes.find(view.id);
      return it == f->device_sizes.end() ? 0 : it->second;
    }
  };
  uint64_t planned_device_bytes(const ModelSpec&) override {
    ++planned_device_calls;
    return planned_device;
  }

  uint64_t planned_bytes(const ModelSpec&) override {
    ++planned_calls;
    return planned;
  }
  std::unique_ptr<LoadedModel> load(const ModelSpec& spec) override {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return gate_open; });
    }
    if (spec.name == "bad") throw Error(ErrorKind::kInvalidInput, "[gguf] bad: not a GGUF file");
    ++loads;
    auto it = sizes.find(spec.name);
    return std::make_unique<Model>(this, it == sizes.end() ? 100 : it->second, spec.name);
  }
  void set_gate(bool open) {
    {
      std::lock_guard<std::mutex> lock(mu);
      gate_open = open;
    }
    cv.notify_all();
  }
};

std::vector<ModelSpec> specs(std::initializer_list<const char*> names) {
  std::vector<ModelSpec> out;
  for (const char* n : names) {
    ModelSpec s;
    s.name = n;
    s.ref = std::string(n) + ".gguf";
    out.push_back(s);
  }
  return out;
}

RegistryOptions options(Factory& f) {
  RegistryOptions o;
  o.memory_probe = [&f] { return f.resident.load(); };
  o.log = [](const std::string&) {};
  o.sweep_interval_s = 0.02;
  o.load_timeout_s = 10;
  return o;
}

ModelState state_of(const ModelRegistry& r, const std::string& name) {
  return r.state(*r.find(name));
}

// Waits (up to 5 s) for `pred`.
template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

int api_status(const std::function<void()>& f, std::string* message = nullptr,
               std::string* code = nullptr) {
  try {
    f();
  } catch (const ApiException& e) {
    if (message) *message = e.error().message;
    if (code) *code = e.error().code;
    return e.error().status;
  }
  return 0;
}

}  // namespace

TEST(ModelRegistry, LeastRecentlyUsedIsUnloadedAtMaxLoaded) {
  Factory f;
  RegistryOptions o = options(f);
  o.max_loaded = 2;
  ModelRegistry r(specs({"a", "b", "c"}), f, o);
  r.start();
  r.acquire(0);  // each lease ends at once
  std::this_thread::sleep_for(5ms);
  r.acquire(1);
  std::this_thread::sleep_for(5ms);
  r.acquire(0);  // a is now more recent than b
  r.acquire(2);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  EXPECT_EQ(state_of(r, "b"), ModelState::kUnloaded);
  EXPECT_EQ(state_of(r, "c"), ModelState::kLoaded);
  EXPECT_EQ(f.resident.load(), 200u);
  r.acquire(1);  // now a is the least recently used
  EXPECT_EQ(state_of(r, "a"), ModelState::kUnloaded);
  EXPECT_EQ(f.loads.load(), 4);
  const auto st = r.status();
  EXPECT_EQ(st[1].loads, 2u);
  EXPECT_EQ(st[1].unloads, 1u);
}

TEST(ModelRegistry, IdleModelsGoBeforeBusyOnes) {
  Factory f;
  RegistryOptions o = options(f);
  o.max_loaded = 2;
  ModelRegistry r(specs({"a", "b", "c"}), f, o);
  r.start();
  ModelLease busy = r.acquire(0);  // a: least recently used, but a request holds it
  std::this_thread::sleep_for(5ms);
  r.acquire(1);
  ModelLease c = r.acquire(2);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  EXPECT_EQ(state_of(r, "b"), ModelState::kUnloaded);
  EXPECT_EQ(busy->id, "a");
  EXPECT_EQ(c->id, "c");
}

TEST(ModelRegistry, UnloadWaitsForRequestsInFlightAndNewRequestsWait) {
  Factory f;
  RegistryOptions o = options(f);
  o.max_loaded = 1;
  ModelRegistry r(specs({"a", "b"}), f, o);
  r.start();
  ModelLease a = r.acquire(0);
  std::atomic<bool> got_b{false};
  std::thread t([&] {
    ModelLease b = r.acquire(1);  // a must go first; it is busy: b waits
    got_b = true;
  });
  ASSERT_TRUE(eventually([&] { return state_of(r, "a") == ModelState::kUnloading; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(got_b.load());
  EXPECT_EQ(state_of(r, "a"), ModelState::kUnloading);  // still serving its request
  EXPECT_EQ(a->id, "a");
  a.reset();  // the request ends: a unloads, b loads
  t.join();
  EXPECT_TRUE(got_b.load());
  EXPECT_EQ(state_of(r, "a"), ModelState::kUnloaded);
  EXPECT_EQ(state_of(r, "b"), ModelState::kLoaded);
}

TEST(ModelRegistry, PinnedModelsNeverUnload) {
  Factory f;
  RegistryOptions o = options(f);
  o.max_loaded = 2;
  o.idle_unload_s = 0.05;
  auto s = specs({"a", "b", "c"});
  s[0].pinned = true;
  ModelRegistry r(s, f, o);
  r.load_now(0);
  r.start();
  r.acquire(1);
  r.acquire(2);  // b goes, never a
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  EXPECT_EQ(state_of(r, "b"), ModelState::kUnloaded);
  // idle: c goes after 50 ms, a stays
  ASSERT_TRUE(eventually([&] { return state_of(r, "c") == ModelState::kUnloaded; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  EXPECT_EQ(api_status([&] { r.unload(0); }), 400);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
}

TEST(ModelRegistry, NoRoomWhenEveryLoadedModelIsPinned) {
  Factory f;
  RegistryOptions o = options(f);
  o.max_loaded = 1;
  auto s = specs({"a", "b"});
  s[0].pinned = true;
  ModelRegistry r(s, f, o);
  r.load_now(0);
  r.start();
  std::string message, code;
  EXPECT_EQ(api_status([&] { r.acquire(1); }, &message, &code), 500);
  EXPECT_EQ(code, "model_load_failed");
  EXPECT_NE(message.find("--max-loaded 1"), std::string::npos) << message;
  EXPECT_NE(message.find("pinned (a)"), std::string::npos) << message;
  EXPECT_EQ(state_of(r, "b"), ModelState::kUnloaded);
}

TEST(ModelRegistry, IdleUnloadPerModelAndDefault) {
  Factory f;
  RegistryOptions o = options(f);
  o.idle_unload_s = 0.05;
  auto s = specs({"a", "b", "c"});
  s[1].idle_unload_s = 0;    // never
  s[2].idle_unload_s = 0.3;  // longer than the default
  ModelRegistry r(s, f, o);
  r.start();
  r.acquire(0);
  r.acquire(1);
  r.acquire(2);
  ASSERT_TRUE(eventually([&] { return state_of(r, "a") == ModelState::kUnloaded; }));
  EXPECT_EQ(state_of(r, "c"), ModelState::kLoaded);
  ASSERT_TRUE(eventually([&] { return state_of(r, "c") == ModelState::kUnloaded; }));
  EXPECT_EQ(state_of(r, "b"), ModelState::kLoaded);
  // A model in use is never idle.
  ModelLease held = r.acquire(0);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  held.reset();
  ASSERT_TRUE(eventually([&] { return state_of(r, "a") == ModelState::kUnloaded; }));
}

TEST(ModelRegistry, MemoryBudgetUsesMeasuredSizes) {
  Factory f;
  f.sizes = {{"a", 100}, {"b", 100}, {"c", 180}};
  f.planned = 100;  // c's plan is wrong until it was measured
  RegistryOptions o = options(f);
  o.max_memory = 250;
  ModelRegistry r(specs({"a", "b", "c"}), f, o);
  r.start();
  r.acquire(0);
  std::this_thread::sleep_for(5ms);
  r.acquire(1);
  EXPECT_EQ(f.resident.load(), 200u);
  r.acquire(2);  // 200 + 100 (planned) > 250: a goes; c then measures 180
  EXPECT_EQ(state_of(r, "a"), ModelState::kUnloaded);
  EXPECT_EQ(state_of(r, "b"), ModelState::kLoaded);
  auto st = r.status();
  EXPECT_TRUE(st[2].measured);
  EXPECT_EQ(st[2].memory_bytes, 180u);
  EXPECT_EQ(st[0].memory_bytes, 100u);  // measured at load and at unload
  // a again: 280 in use + 100 > 250: b (least recently used) goes: 180 + 100 = 280 > 250:
  // c goes too, a loads alone.
  r.acquire(0);
  EXPECT_EQ(state_of(r, "b"), ModelState::kUnloaded);
  EXPECT_EQ(state_of(r, "c"), ModelState::kUnloaded);
  EXPECT_EQ(f.resident.load(), 100u);
}

// --max-device-memory: a model never loaded counts its planned device memory (measured on
// the GPU: with 0 instead, a second 8.8 GB model loaded beside the first under a 12 GB
// budget); once loaded, its back-end's own count.
TEST(ModelRegistry, DeviceBudgetCountsPlannedSizeBeforeTheFirstLoad) {
  Factory f;
  f.device_sizes = {{"a", 90}, {"b", 90}, {"c", 30}};
  f.planned_device = 100;  // the plan (weights + KV + reserve) is a little more than measured
  RegistryOptions o = options(f);
  o.max_device_memory = 120;
  ModelRegistry r(specs({"a", "b", "c"}), f, o);
  r.start();
  r.acquire(0);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  r.acquire(1);  // 90 (a, measured) + 100 (b, planned) > 120: a goes first
  EXPECT_EQ(state_of(r, "a"), ModelState::kUnloaded);
  EXPECT_EQ(state_of(r, "b"), ModelState::kLoaded);
  EXPECT_EQ(r.status()[1].device_bytes, 90u);
  r.acquire(1);
  f.planned_device = 20;
  r.acquire(2);  // 90 + 20 <= 120: c loads beside b
  EXPECT_EQ(state_of(r, "b"), ModelState::kLoaded);
  EXPECT_EQ(state_of(r, "c"), ModelState::kLoaded);
  EXPECT_EQ(f.planned_device_calls.load(), 3);  // once per model, before its first load
}

TEST(ModelRegistry, ALoadingModelMakesRequestsWaitThenTimesOut) {
  Factory f;
  RegistryOptions o = options(f);
  o.load_timeout_s = 0.2;
  ModelRegistry r(specs({"a", "b"}), f, o);
  r.start();
  r.acquire(1);
  f.set_gate(false);
  std::string code;
  EXPECT_EQ(api_status([&] { r.acquire(0); }, nullptr, &code), 503);
  EXPECT_EQ(code, "model_loading");
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoading);
  // The other model answers while a loads.
  EXPECT_EQ(r.acquire(1)->id, "b");
  std::thread opener([&] {
    std::this_thread::sleep_for(100ms);
    f.set_gate(true);
  });
  EXPECT_EQ(r.acquire(0)->id, "a");  // waits for the load under way
  opener.join();
  EXPECT_EQ(f.loads.load(), 2);
}

TEST(ModelRegistry, AFailedLoadIsAnErrorAndIsRetried) {
  Factory f;
  ModelRegistry r(specs({"ok", "bad"}), f, options(f));
  r.start();
  std::string message;
  EXPECT_EQ(api_status([&] { r.acquire(1); }, &message), 500);
  EXPECT_NE(message.find("not a GGUF file"), std::string::npos) << message;
  EXPECT_EQ(state_of(r, "bad"), ModelState::kUnloaded);
  EXPECT_NE(r.status()[1].error.find("not a GGUF file"), std::string::npos);
  EXPECT_EQ(api_status([&] { r.acquire(1); }), 500);  // tried again, fails again
  EXPECT_THROW(r.load_now(1), Error);                 // at start: the loader's own error
  EXPECT_EQ(r.acquire(0)->id, "ok");
}

TEST(ModelRegistry, AdminUnloadAndLoad) {
  Factory f;
  ModelRegistry r(specs({"a", "b"}), f, options(f));
  r.start();
  EXPECT_FALSE(r.unload(0));  // not loaded
  r.load(0);
  EXPECT_EQ(state_of(r, "a"), ModelState::kLoaded);
  ModelLease held = r.acquire(0);
  std::thread t([&] { EXPECT_TRUE(r.unload(0)); });  // waits for the request
  ASSERT_TRUE(eventually([&] { return state_of(r, "a") == ModelState::kUnloading; }));
  held.reset();
  t.join();
  EXPECT_EQ(state_of(r, "a"), ModelState::kUnloaded);
  EXPECT_EQ(f.resident.load(), 0u);
}

TEST(ModelRegistry, ManyClientsManyModelsStayWithinMaxLoaded) {
  Factory f;
  RegistryOptions o = options(f);
  o.max_loaded = 2;
  std::atomic<uint64_t> peak{0};
  o.memory_probe = [&] {
    const uint64_t v = f.resident.load();
    uint64_t p = peak.load();
    while (v > p && !peak.compare_exchange_weak(p, v)) {
    }
    return v;
  };
  ModelRegistry r(specs({"a", "b", "c"}), f, o);
  r.start();
  std::vector<std::thread> ts;
  std::atomic<int> served{0};
  for (int t = 0; t < 6; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        ModelLease m = r.acquire(static_cast<size_t>((t + i) % 3));
        EXPECT_LE(f.resident.load(), 200u);
        std::this_thread::sleep_for(1ms);
        ++served;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(served.load(), 120);
  EXPECT_LE(peak.load(), 200u);
}

TEST(ModelRegistry, NamesAndAliasesAreUnique) {
  Factory f;
  auto s = specs({"a", "b"});
  s[0].aliases = {"x"};
  ModelRegistry r(s, f, options(f));
  EXPECT_EQ(r.find("x"), 0u);
  EXPECT_EQ(r.find("b"), 1u);
  EXPECT_FALSE(r.find("c"));
  EXPECT_EQ(r.names(), "a, b, x");
  s[1].aliases = {"x"};
  EXPECT_THROW(ModelRegistry(s, f, options(f)), Error);
}

// ---------------------------------------------------------------------------
// The YAML model list.

namespace {

std::string config_error(const std::string& text) {
  try {
    parse_model_config(text, "models.yaml", "/cfg");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelConfig, ParsesEverySetting) {
  const auto specs = parse_model_config(R"(
models:
  smol:
    model: smol.gguf
    aliases: [small, tiny]
    ctx: 2048
    max_seqs: 4
    kv_cache_bytes: 64M
    chat_template: t/chat.jinja
    device: cpu
    pinned: true
    idle_unload: 30
  qwen: Qwen/Qwen3-8B-GGUF:Q4_K_M
  abs:
    model: /models/x.gguf
    aliases: one
)",
                                        "models.yaml", "/cfg");
  ASSERT_EQ(specs.size(), 3u);
  const ModelSpec& s = specs[0];
  EXPECT_EQ(s.name, "smol");
  EXPECT_EQ(s.ref, "smol.gguf");  // does not exist next to the file: left to the resolver
  EXPECT_EQ(s.aliases, (std::vector<std::string>{"small", "tiny"}));
  EXPECT_EQ(s.ctx, 2048);
  EXPECT_EQ(s.max_seqs, 4);
  EXPECT_EQ(s.kv_cache_bytes, "64M");
  EXPECT_EQ(s.chat_template, "/cfg/t/chat.jinja");
  EXPECT_EQ(s.device, "cpu");
  EXPECT_TRUE(s.pinned);
  EXPECT_EQ(s.idle_unload_s, 30.0);
  EXPECT_EQ(specs[1].name, "qwen");
  EXPECT_EQ(specs[1].ref, "Qwen/Qwen3-8B-GGUF:Q4_K_M");
  EXPECT_FALSE(specs[1].pinned);
  EXPECT_FALSE(specs[1].ctx);
  EXPECT_EQ(specs[2].ref, "/models/x.gguf");
  EXPECT_EQ(specs[2].aliases, std::vector<std::string>{"one"});
}

TEST(ModelConfig, RelativeModelPathsAreTakenFromTheConfigFolder) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("hearth_cfg_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "m.gguf") << "x";
  std::ofstream(dir / "models.yaml") << "models:\n  m:\n    model: m.gguf\n";
  const auto specs = load_model_config((dir / "models.yaml").string());
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].ref, (dir / "m.gguf").string());
  std::filesystem::remove_all(dir);
}

TEST(ModelConfig, ErrorsNameTheFileLineAndKey) {
  EXPECT_EQ(config_error("models:\n  a:\n    model: a.gguf\n    ctx: many\n"),
            "[serve] models.yaml:4: models.a.ctx: expected an integer (tokens), got 'many'");
  EXPECT_EQ(config_error("models:\n  a:\n    model: a.gguf\n    colour: red\n")
                .rfind("[serve] models.yaml:4: models.a.colour: unknown setting", 0),
            0u);
  EXPECT_EQ(config_error("models:\n  a:\n    ctx: 100\n")
                .rfind("[serve] models.yaml:3: models.a.model: missing", 0),
            0u);
  EXPECT_EQ(config_error("models:\n  a:\n    model: a.gguf\n    pinned: maybe\n"),
            "[serve] models.yaml:4: models.a.pinned: expected true or false, got 'maybe'");
  EXPECT_EQ(config_error("models:\n  a:\n    model: a.gguf\n    max_seqs: 0\n"),
            "[serve] models.yaml:4: models.a.max_seqs: must be in [1, 1024]");
  EXPECT_EQ(config_error("models:\n  a:\n    model: a.gguf\n    aliases: {x: 1}\n"),
            "[serve] models.yaml:4: models.a.aliases: expected a list of names");
  EXPECT_NE(config_error("models: [a, b\n").find("models.yaml:2:"), std::string::npos);
  EXPECT_NE(config_error("models: [a, b\n").find("not valid YAML"), std::string::npos);
  EXPECT_EQ(config_error("model:\n  a: x\n").rfind("[serve] models.yaml:1: model: unknown key", 0),
            0u);
  EXPECT_NE(config_error("other: 1\n").find("unknown key"), std::string::npos);
  EXPECT_NE(config_error("models:\n").find("models: missing"), std::string::npos);
  EXPECT_NE(config_error("- a\n").find("(top level): expected a map"), std::string::npos);
  EXPECT_EQ(config_error("models:\n  a: x\n  a: y\n")
                .rfind("[serve] models.yaml:3: models.a: given twice", 0),
            0u);
}

TEST(ModelConfig, UnreadableFileIsAnError) {
  try {
    load_model_config("/nonexistent/models.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/models.yaml"), std::string::npos);
  }
}

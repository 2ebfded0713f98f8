// Preemption by swapping (EngineConfig::kv_swap_bytes, engine/serve_engine_swap.cpp) on
// real model files: the default (Llama-family) model and the tiny hybrid Qwen3.5
// fixtures of tests/data/qwen35 (Gated DeltaNet state swapped with the KV). A KV pool
// too small for the requests' decodes forces preemptions; each request's greedy tokens
// must equal engine::generate alone (never preempted) whether its preemptions were
// swapped (to host memory or, past its room, to the KV disk tier's folder) or recomputed. A swapped sequence is not recomputed at all: the tokens the
// forward passes ran add up to exactly each prompt plus the tokens fed back, where a
// recomputing engine runs more. Also the decision's cost model (swap_is_cheaper) alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "engine/generator.h"
#include "engine/request.h"
#include "core/tune.h"
#include "engine/serve_engine.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"

using namespace std::chrono_literals;
using hearth::engine::Delta;
using hearth::engine::EngineConfig;
using hearth::engine::EngineStats;
using hearth::engine::Final;
using hearth::engine::GenRequest;
using hearth::engine::RequestChannel;
using hearth::engine::ServeEngine;
namespace ops = hearth::ops;

namespace {

struct Loaded {
  hearth::gguf::File file;
  hearth::cpu::CpuBackend backend{1};
  std::unique_ptr<hearth::model::CausalLm> model;
  hearth::tokenizer::Tokenizer tok;
  Loaded(const std::string& path, std::optional<std::string> tokenizer_json)
      : file(hearth::convert::open_model(path)),
        model(hearth::model::load_causal_lm(file, backend)),
        tok(tokenizer_json ? hearth::tokenizer::Tokenizer::load(*tokenizer_json)
                           : hearth::tokenizer::Tokenizer::from_gguf(file)) {}
};

// Counts the tokens every forward pass ran.
class TokenCounter : public hearth::engine::EngineObserver {
 public:
  void on_step(int32_t, int32_t n_tokens, double) override { tokens += n_tokens; }
  void on_first_token(double) override {}
  void on_token_interval(double) override {}
  void on_finish(const Final&) override {}
  std::atomic<int64_t> tokens{0};
};

struct Outcome {
  std::vector<int32_t> tokens;
  Final fin;
};

struct EngineRun {
  std::vector<Outcome> outs;
  EngineStats stats;
  int64_t forward_tokens = 0;
  int64_t fed_tokens = 0;  // each prompt, and each generated token that was fed back
};

EngineRun run(Loaded& l, const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts, int32_t n,
              const std::function<void()>& before_start = {}) {
  TokenCounter counter;
  ServeEngine engine(*l.model, l.tok, cfg, &counter);
  if (before_start) before_start();
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& p : prompts) {
    GenRequest r;
    r.prompt = p;
    r.max_tokens = n;
    r.sampler.temperature = 0.0f;
    chans.push_back(std::make_shared<RequestChannel>());
    EXPECT_EQ(engine.submit(std::move(r), chans.back()), ServeEngine::Admit::kOk);
  }
  engine.start();
  EngineRun out;
  out.outs.resize(chans.size());
  std::vector<bool> done(chans.size(), false);
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (n_done < chans.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < chans.size(); ++i) {
      if (done[i]) continue;
      std::vector<Delta> ds;
      std::optional<Final> fin;
      chans[i]->wait(ds, fin, 5ms);
      for (const Delta& d : ds) {
        for (const auto& t : d.tokens) out.outs[i].tokens.push_back(t.token);
      }
      if (fin) {
        out.outs[i].fin = *fin;
        done[i] = true;
        ++n_done;
      }
    }
  }
  EXPECT_EQ(n_done, chans.size()) << "requests did not finish in time";
  for (int k = 0; k < 200 && engine.stats().kv_blocks_used != 0; ++k) std::this_thread::sleep_for(5ms);
  out.stats = engine.stats();
  engine.stop();
  out.forward_tokens = counter.tokens.load();
  for (const Outcome& o : out.outs) {
    // A sequence that ran to max_tokens never fed its last token back; one that stopped
    // on end-of-generation fed every token it streamed.
    out.fed_tokens += o.fin.prompt_tokens + o.fin.completion_tokens - (o.fin.finish_reason == "length" ? 1 : 0);
  }
  return out;
}

std::vector<int32_t> alone(Loaded& l, const std::vector<int32_t>& prompt, int32_t n, ops::KvType kv) {
  hearth::model::KvCache cache(l.backend, l.model->hparams(), 256, kv);
  hearth::engine::GenerateOptions o;
  o.max_tokens = n;
  o.sampler.temperature = 0.0f;
  return hearth::engine::generate(*l.model, cache, l.tok, prompt, o, nullptr).tokens;
}

void expect_alone(Loaded& l, const EngineRun& r, const std::vector<std::vector<int32_t>>& prompts, int32_t n,
                  ops::KvType kv, const std::string& what) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(r.outs[i].tokens, alone(l, prompts[i], n, kv)) << what << ": prompt " << i;
    EXPECT_TRUE(r.outs[i].fin.error.empty()) << r.outs[i].fin.error;
  }
}

TEST(SwapDecision, CopyTimeAgainstRecomputeTime) {
  using hearth::engine::swap_is_cheaper;
  // 1 MB at 1 GB/s: 2 ms out and in; 100 tokens at 1,000 tokens/s: 100 ms.
  EXPECT_TRUE(swap_is_cheaper(1'000'000, 100, 1e9, 1e3));
  // A fast prefill (a GPU) of a short sequence against slow copies: recompute.
  EXPECT_FALSE(swap_is_cheaper(10'000'000, 16, 1e9, 50e3));  // 20 ms against 0.32 ms
  // The break-even: equal times recompute (no gain from copying).
  EXPECT_FALSE(swap_is_cheaper(500, 1, 1000, 1));             // 1 s against 1 s
  EXPECT_TRUE(swap_is_cheaper(499, 1, 1000, 1));
  // Nothing measured yet: a copy is taken as free, a recompute as unbounded.
  EXPECT_TRUE(swap_is_cheaper(1'000'000, 1, 0, 0));
  EXPECT_TRUE(swap_is_cheaper(1'000'000, 1, 1e9, 0));
  EXPECT_FALSE(swap_is_cheaper(1'000'000, 0, 1e9, 1e3));      // nothing to recompute
}

TEST(SwapDecision, DiskReadTimeAgainstRecomputeTime) {
  using hearth::engine::disk_swap_is_cheaper;
  // 10 MB: 20 ms of copies at 1 GB/s, plus 100 ms read at 100 MB/s, against 100 tokens at
  // 1,000 tokens/s (100 ms): recompute; at 1 GB/s reads (10 ms): swap.
  EXPECT_FALSE(disk_swap_is_cheaper(10'000'000, 100, 1e9, 1e8, 1e3));
  EXPECT_TRUE(disk_swap_is_cheaper(10'000'000, 100, 1e9, 1e9, 1e3));
  // A slow disk loses where host memory would win.
  EXPECT_TRUE(hearth::engine::swap_is_cheaper(10'000'000, 50, 1e9, 1e3));
  EXPECT_FALSE(disk_swap_is_cheaper(10'000'000, 50, 1e9, 2e8, 1e3));  // 70 ms against 50 ms
  // Nothing read yet: the read counts as free (the first swap measures it).
  EXPECT_TRUE(disk_swap_is_cheaper(10'000'000, 100, 1e9, 0, 1e3));
  EXPECT_FALSE(disk_swap_is_cheaper(1'000'000, 0, 1e9, 1e9, 1e3));  // nothing to recompute
}

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("hearth_swap_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  // Files under the folder whose names end in `suffix`, and this process's swap folders.
  size_t count(const std::string& suffix) const {
    size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(path_)) {
      const std::string name = e.path().filename().string();
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) ++n;
    }
    return n;
  }
  std::vector<fs::path> swap_folders() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(path_)) {
      if (e.path().filename().string().rfind("swap-", 0) == 0) out.push_back(e.path());
    }
    return out;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// The disk level: host swap space of `ram` bytes (1: none fits), the KV disk tier in `dir`.
EngineConfig with_disk(EngineConfig c, const TempDir& dir, uint64_t ram = 1) {
  c.kv_swap_bytes = ram;
  c.kv_disk_dir = dir.str();
  c.kv_disk_bytes = 512u << 20;
  c.kv_swap_disk_bytes = 256u << 20;
  return c;
}

// ---------------------------------------------------------------- Llama family

class SwapLlama : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p == nullptr || *p == '\0') return;
    loaded_ = std::make_unique<Loaded>(p, std::nullopt);
  }
  static void TearDownTestSuite() { loaded_.reset(); }
  void SetUp() override {
    if (!loaded_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }
  static std::vector<std::vector<int32_t>> prompts() {
    auto& t = loaded_->tok;
    return {t.encode("The capital of France is"), t.encode("def fibonacci(n):"),
            t.encode("Once upon a time, in a small village by the sea, there lived"), t.encode("List three colors:")};
  }
  // 12 blocks of 4 positions: the four prompts (about 30 tokens) are admitted together
  // and their decodes outgrow the pool, so the youngest are preempted, again and again.
  static EngineConfig tiny_pool(ops::KvType kv, uint64_t swap_bytes) {
    EngineConfig c;
    c.n_ctx = 256;
    c.n_blocks = 12;
    c.block_size = 4;
    c.kv_type = kv;
    c.max_seqs = 4;
    c.prefill_chunk = 512;
    c.max_queue = 16;
    c.kv_swap_bytes = swap_bytes;
    return c;
  }
  static std::unique_ptr<Loaded> loaded_;
};
std::unique_ptr<Loaded> SwapLlama::loaded_;

constexpr int32_t kTokens = 12;

TEST_F(SwapLlama, SwappedSequencesEqualSoloRunsWithoutRecompute) {
  for (ops::KvType kv : {ops::KvType::F32, ops::KvType::F16, ops::KvType::Q8_0}) {
    const std::string what = std::string("swap, ") + ops::kv_type_name(kv);
    const auto ps = prompts();
    const EngineRun r = run(*loaded_, tiny_pool(kv, 64u << 20), ps, kTokens);
    expect_alone(*loaded_, r, ps, kTokens, kv, what);
    const auto& sw = r.stats.kv_swap;
    EXPECT_GT(r.stats.preemptions, 0u) << what << ": no preemption happened";
    EXPECT_EQ(sw.swapped_out, r.stats.preemptions) << what;
    EXPECT_EQ(sw.swapped_in, sw.swapped_out) << what;
    EXPECT_EQ(sw.recomputed, 0u) << what;
    EXPECT_GT(sw.bytes_out, 0u) << what;
    EXPECT_LE(sw.bytes_in, sw.bytes_out) << what;  // full blocks still cached come back without a copy
    EXPECT_EQ(sw.bytes_held, 0u) << what;
    EXPECT_GT(sw.copy_bytes_per_s, 0.0) << what;
    EXPECT_GT(sw.prefill_tokens_per_s, 0.0) << what;
    // Nothing ran twice.
    EXPECT_EQ(r.forward_tokens, r.fed_tokens) << what;
  }
}

TEST_F(SwapLlama, RecomputedSequencesEqualSoloRuns) {
  const auto ps = prompts();
  const EngineRun r = run(*loaded_, tiny_pool(ops::KvType::F32, 0), ps, kTokens);
  expect_alone(*loaded_, r, ps, kTokens, ops::KvType::F32, "recompute");
  EXPECT_GT(r.stats.preemptions, 0u);
  EXPECT_EQ(r.stats.kv_swap.swapped_out, 0u);
  EXPECT_EQ(r.stats.kv_swap.recomputed, r.stats.preemptions);
  EXPECT_GT(r.forward_tokens, r.fed_tokens) << "a recomputed preemption runs its last tokens again";
}

TEST_F(SwapLlama, FullSwapSpaceFallsBackToRecompute) {
  // Room for about one preempted sequence: the others are recomputed; results stay exact.
  const auto ps = prompts();
  const uint64_t block = hearth::model::KvPool::bytes_per_block(loaded_->model->hparams(), ops::KvType::F32, 4);
  const EngineRun r = run(*loaded_, tiny_pool(ops::KvType::F32, 5 * block), ps, kTokens);
  expect_alone(*loaded_, r, ps, kTokens, ops::KvType::F32, "mixed");
  const auto& sw = r.stats.kv_swap;
  EXPECT_GT(sw.swapped_out, 0u);
  EXPECT_GT(sw.recompute_no_room, 0u);
  EXPECT_EQ(sw.swapped_out + sw.recomputed, r.stats.preemptions);
  EXPECT_EQ(sw.swapped_in, sw.swapped_out);
  EXPECT_EQ(sw.bytes_held, 0u);
}

TEST_F(SwapLlama, CancellingSwappedSequencesFreesTheirCopies) {
  // Long decodes in the tiny pool: sequences sit swapped out while others run. Cancelling
  // everything then must give back every swapped copy, and the engine serves on.
  ServeEngine engine(*loaded_->model, loaded_->tok, tiny_pool(ops::KvType::F32, 64u << 20));
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& p : prompts()) {
    GenRequest r;
    r.prompt = p;
    r.max_tokens = 30;  // the longest prompt (about 15 tokens) and these fit the 48 positions
    r.sampler.temperature = 0.0f;
    chans.push_back(std::make_shared<RequestChannel>());
    ASSERT_EQ(engine.submit(std::move(r), chans.back()), ServeEngine::Admit::kOk);
  }
  engine.start();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (engine.stats().kv_swap.bytes_held == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GT(engine.stats().kv_swap.bytes_held, 0u) << "no sequence was ever held swapped out";
  for (auto& c : chans) c->cancel();
  for (auto& c : chans) {
    std::vector<Delta> ds;
    std::optional<Final> fin;
    while (!fin && std::chrono::steady_clock::now() < deadline) c->wait(ds, fin, 5ms);
    ASSERT_TRUE(fin.has_value());
  }
  // (The counts drop as each request ends; the copies go back in the same engine step.)
  for (int k = 0; k < 200; ++k) {
    const EngineStats now = engine.stats();
    if (now.running + now.waiting == 0 && now.kv_swap.bytes_held == 0) break;
    std::this_thread::sleep_for(5ms);
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.kv_swap.bytes_held, 0u);
  // Still serving, and exactly.
  const auto p = prompts()[0];
  GenRequest r;
  r.prompt = p;
  r.max_tokens = kTokens;
  r.sampler.temperature = 0.0f;
  auto ch = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(std::move(r), ch), ServeEngine::Admit::kOk);
  std::vector<int32_t> got;
  std::optional<Final> fin;
  while (!fin && std::chrono::steady_clock::now() < deadline + 60s) {
    std::vector<Delta> ds;
    ch->wait(ds, fin, 5ms);
    for (const Delta& d : ds) {
      for (const auto& t : d.tokens) got.push_back(t.token);
    }
  }
  ASSERT_TRUE(fin.has_value());
  EXPECT_EQ(got, alone(*loaded_, p, kTokens, ops::KvType::F32));
  engine.stop();
}

TEST_F(SwapLlama, DiskSwappedSequencesEqualSoloRunsWithoutRecompute) {
  const uint64_t block4 = hearth::model::KvPool::bytes_per_block(loaded_->model->hparams(), ops::KvType::F32, 4);
  struct Case {
    ops::KvType kv;
    uint64_t ram;  // host swap space: none, or about one sequence (the rest to disk)
  };
  for (const Case& k : {Case{ops::KvType::F32, 1}, Case{ops::KvType::Q8_0, 1}, Case{ops::KvType::F32, 5 * block4}}) {
    const std::string what = std::string("disk swap, ") + ops::kv_type_name(k.kv) + ", host room " + std::to_string(k.ram);
    TempDir dir;
    const auto ps = prompts();
    const EngineRun r = run(*loaded_, with_disk(tiny_pool(k.kv, 0), dir, k.ram), ps, kTokens);
    expect_alone(*loaded_, r, ps, kTokens, k.kv, what);
    const auto& sw = r.stats.kv_swap;
    EXPECT_GT(r.stats.preemptions, 0u) << what;
    EXPECT_EQ(sw.swapped_out, r.stats.preemptions) << what;
    EXPECT_GT(sw.disk_out, 0u) << what;
    if (k.ram == 1) {
      EXPECT_EQ(sw.disk_out, sw.swapped_out) << what;
    } else {
      EXPECT_LT(sw.disk_out, sw.swapped_out) << what << ": host memory should have held some";
    }
    EXPECT_EQ(sw.disk_in, sw.disk_out) << what;
    EXPECT_EQ(sw.swapped_in, sw.swapped_out) << what;
    EXPECT_EQ(sw.disk_fallbacks, 0u) << what;
    EXPECT_EQ(sw.recomputed, 0u) << what;
    EXPECT_GT(sw.disk_bytes_out, 0u) << what;
    EXPECT_EQ(sw.disk_bytes_in, sw.disk_bytes_out) << what;
    EXPECT_EQ(sw.disk_bytes_held, 0u) << what;
    EXPECT_EQ(sw.bytes_held, 0u) << what;
    EXPECT_GT(sw.disk_read_bytes_per_s, 0.0) << what;
    EXPECT_EQ(r.forward_tokens, r.fed_tokens) << what << ": nothing ran twice";
    // Swap files never became prefix files, and none outlived the engine.
    EXPECT_FALSE(r.stats.kv_disk_stats.disabled) << what;
    EXPECT_EQ(dir.count(".swap"), 0u) << what;
    EXPECT_TRUE(dir.swap_folders().empty()) << what;
  }
}

// Copies that finish after the steps that follow them, as on a GPU's copy streams
// (--tune cpu.copy_lag: each copy is finished only once three steps have begun since it
// started, an upload's bytes land at copy_fence or then, a download's reach the host then):
// the engine must keep the host memory, fence the swapped-in sequence's step and hand the
// copies on only when done; the answers stay those of requests run alone, none recomputed.
TEST_F(SwapLlama, CopiesFinishingAfterLaterStepsGiveTheSameAnswers) {
  const hearth::tune::Override lag(hearth::tune::kCpuCopyLag, 3);
  const uint64_t block4 = hearth::model::KvPool::bytes_per_block(loaded_->model->hparams(), ops::KvType::F32, 4);
  for (uint64_t ram : {uint64_t{64} << 20, uint64_t{1}, 5 * block4}) {
    const std::string what = "lagged copies, host swap room " + std::to_string(ram);
    TempDir dir;
    const auto ps = prompts();
    const EngineConfig c = ram == (uint64_t{64} << 20) ? tiny_pool(ops::KvType::F32, ram)
                                                        : with_disk(tiny_pool(ops::KvType::F32, 0), dir, ram);
    const EngineRun r = run(*loaded_, c, ps, kTokens);
    expect_alone(*loaded_, r, ps, kTokens, ops::KvType::F32, what);
    const auto& sw = r.stats.kv_swap;
    EXPECT_GT(r.stats.preemptions, 0u) << what;
    EXPECT_EQ(sw.swapped_out, r.stats.preemptions) << what;
    EXPECT_EQ(sw.swapped_in, sw.swapped_out) << what;
    EXPECT_EQ(sw.recomputed, 0u) << what;
    EXPECT_EQ(sw.bytes_held, 0u) << what;
    EXPECT_EQ(sw.disk_bytes_held, 0u) << what;
    EXPECT_EQ(r.forward_tokens, r.fed_tokens) << what << ": nothing ran twice";
    if (ram == 1) EXPECT_EQ(sw.disk_out, sw.swapped_out) << what;
  }
}

TEST_F(SwapLlama, AFailingDiskSendsSwappedSequencesBackToRecompute) {
  // The swap folder becomes a file once the engine has made it: every swap write fails,
  // the tier turns off, and each sequence whose write failed is recomputed, exactly.
  TempDir dir;
  const auto ps = prompts();
  const EngineRun r = run(*loaded_, with_disk(tiny_pool(ops::KvType::F32, 0), dir), ps, kTokens, [&] {
    const auto folders = dir.swap_folders();
    ASSERT_EQ(folders.size(), 1u);
    fs::remove_all(folders[0]);
    std::ofstream(folders[0]) << "not a folder";
  });
  expect_alone(*loaded_, r, ps, kTokens, ops::KvType::F32, "failing disk");
  const auto& sw = r.stats.kv_swap;
  EXPECT_GT(r.stats.preemptions, 0u);
  EXPECT_GT(sw.disk_fallbacks, 0u);
  EXPECT_EQ(sw.disk_fallbacks, sw.disk_out);
  EXPECT_EQ(sw.disk_in, 0u);
  EXPECT_EQ(sw.swapped_in, 0u);
  EXPECT_EQ(sw.recomputed, r.stats.preemptions);
  EXPECT_EQ(sw.disk_bytes_held, 0u);
  EXPECT_TRUE(r.stats.kv_disk_stats.disabled);
}

TEST_F(SwapLlama, ACorruptSwapFileSendsItsSequenceBackToRecompute) {
  // A watcher flips a byte in the middle of the first swap files that appear (after their
  // rename: complete). Their sequences wait on disk for blocks for several steps, so the
  // reader finds them damaged: refused, removed, and those sequences recomputed, exactly.
  TempDir dir;
  std::atomic<bool> stop{false};
  std::atomic<int> corrupted{0};
  std::thread watcher([&] {
    std::vector<std::string> seen;
    while (!stop.load() && corrupted.load() < 2) {
      for (const auto& folder : dir.swap_folders()) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(folder, ec)) {
          const std::string p = e.path().string();
          if (p.size() < 5 || p.compare(p.size() - 5, 5, ".swap") != 0) continue;
          if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
          seen.push_back(p);
          std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);  // never creates it
          if (!f) continue;
          f.seekg(0, std::ios::end);
          const auto size = static_cast<std::streamoff>(f.tellg());
          f.seekg(size / 2);
          char c = 0;
          f.read(&c, 1);
          c = static_cast<char>(c ^ 0x5a);
          f.seekp(size / 2);
          f.write(&c, 1);
          if (f) ++corrupted;
        }
      }
      std::this_thread::sleep_for(200us);
    }
  });
  const auto ps = prompts();
  const EngineRun r = run(*loaded_, with_disk(tiny_pool(ops::KvType::F32, 0), dir), ps, kTokens);
  stop = true;
  watcher.join();
  ASSERT_GT(corrupted.load(), 0) << "no swap file was seen";
  expect_alone(*loaded_, r, ps, kTokens, ops::KvType::F32, "corrupt swap files");
  const auto& sw = r.stats.kv_swap;
  EXPECT_GE(sw.disk_fallbacks, 1u);
  EXPECT_EQ(sw.disk_fallbacks, r.stats.kv_disk_stats.files_rejected);
  EXPECT_EQ(sw.disk_in + sw.disk_fallbacks, sw.disk_out);
  EXPECT_EQ(sw.recomputed, sw.disk_fallbacks);
  EXPECT_EQ(sw.disk_bytes_held, 0u);
  EXPECT_FALSE(r.stats.kv_disk_stats.disabled) << "a bad file is that file's loss, not the folder's";
}

TEST_F(SwapLlama, CancellingDiskSwappedSequencesRemovesTheirFiles) {
  TempDir dir;
  ServeEngine engine(*loaded_->model, loaded_->tok, with_disk(tiny_pool(ops::KvType::F32, 0), dir));
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& p : prompts()) {
    GenRequest r;
    r.prompt = p;
    r.max_tokens = 30;
    r.sampler.temperature = 0.0f;
    chans.push_back(std::make_shared<RequestChannel>());
    ASSERT_EQ(engine.submit(std::move(r), chans.back()), ServeEngine::Admit::kOk);
  }
  engine.start();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (engine.stats().kv_swap.disk_bytes_held == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GT(engine.stats().kv_swap.disk_bytes_held, 0u) << "no sequence was ever held on disk";
  for (auto& c : chans) c->cancel();
  for (auto& c : chans) {
    std::vector<Delta> ds;
    std::optional<Final> fin;
    while (!fin && std::chrono::steady_clock::now() < deadline) c->wait(ds, fin, 5ms);
    ASSERT_TRUE(fin.has_value());
  }
  // The files go on the writer thread, after the requests have ended.
  for (int k = 0; k < 400; ++k) {
    if (engine.stats().kv_swap.disk_bytes_held == 0 && dir.count(".swap") == 0) break;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(engine.stats().kv_swap.disk_bytes_held, 0u);
  EXPECT_EQ(dir.count(".swap"), 0u);
  EXPECT_EQ(dir.swap_folders().size(), 1u);  // (this engine's folder, until it ends)
  engine.stop();
}

// ---------------------------------------------------------------- hybrid (Qwen3.5)

const std::string kHybridDir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/";

std::vector<std::vector<int32_t>> hybrid_prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> ids;
    const int n = 20 + 23 * k;  // 20, 43, 66, 89 tokens: several chunks, unaligned ends
    for (int i = 0; i < n; ++i) ids.push_back((i * 37 + k * 11 + 5) % 256);
    p.push_back(ids);
  }
  return p;
}

EngineConfig hybrid_pool(uint64_t swap_bytes) {
  EngineConfig c;
  c.n_ctx = 256;
  c.n_blocks = 16;  // 16 blocks of 16: the four sequences (up to 101 positions each) cannot all fit
  c.block_size = 16;
  c.kv_type = ops::KvType::F32;
  c.max_seqs = 4;
  c.prefill_chunk = 48;
  c.max_queue = 16;
  c.n_snapshots = 16;
  c.kv_swap_bytes = swap_bytes;
  return c;
}

class SwapHybrid : public ::testing::TestWithParam<std::string> {};

TEST_P(SwapHybrid, SwappedSequencesEqualSoloRunsWithoutRecompute) {
  Loaded l(kHybridDir + GetParam(), std::string(HEARTH_SHARED_DIR) + "/data/tokenizers/qwen3/tokenizer.json");
  const auto ps = hybrid_prompts();
  const EngineRun r = run(l, hybrid_pool(64u << 20), ps, kTokens);
  expect_alone(l, r, ps, kTokens, ops::KvType::F32, "swap " + GetParam());
  const auto& sw = r.stats.kv_swap;
  EXPECT_GT(r.stats.preemptions, 0u) << "no preemption happened";
  EXPECT_EQ(sw.swapped_out, r.stats.preemptions);
  EXPECT_EQ(sw.swapped_in, sw.swapped_out);
  EXPECT_EQ(sw.bytes_held, 0u);
  EXPECT_EQ(r.forward_tokens, r.fed_tokens) << "a swapped sequence ran tokens again";

  // The disk level: the KV blocks and the live state go to disk and come back.
  TempDir dir;
  const EngineRun rd = run(l, with_disk(hybrid_pool(0), dir), ps, kTokens);
  expect_alone(l, rd, ps, kTokens, ops::KvType::F32, "disk swap " + GetParam());
  EXPECT_GT(rd.stats.kv_swap.disk_out, 0u);
  EXPECT_EQ(rd.stats.kv_swap.disk_out, rd.stats.preemptions);
  EXPECT_EQ(rd.stats.kv_swap.disk_in, rd.stats.kv_swap.disk_out);
  EXPECT_EQ(rd.stats.kv_swap.recomputed, 0u);
  EXPECT_EQ(rd.forward_tokens, rd.fed_tokens) << "a disk-swapped sequence ran tokens again";

  const EngineRun rc = run(l, hybrid_pool(0), ps, kTokens);
  expect_alone(l, rc, ps, kTokens, ops::KvType::F32, "recompute " + GetParam());
  EXPECT_GT(rc.stats.kv_swap.recomputed, 0u);
  EXPECT_GT(rc.forward_tokens, rc.fed_tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SwapHybrid, ::testing::Values("dense", "moe", "next"),
                         [](const auto& info) { return info.param; });

}  // namespace

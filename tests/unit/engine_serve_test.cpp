// ServeEngine on the real default model: continuous batching (several sequences in
// one forward pass, chunked prefill, preemption by recompute, prefix reuse) must give
// each request exactly the tokens it gets alone through engine::generate; and the
// request lifecycle (cancel, stop strings, max_tokens, admission limits).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

using namespace std::chrono_literals;
using hearth::engine::Delta;
using hearth::engine::EngineConfig;
using hearth::engine::Final;
using hearth::engine::GenRequest;
using hearth::engine::RequestChannel;
using hearth::engine::ServeEngine;
namespace ops = hearth::ops;

namespace {

// Tokens generated per prompt in the batching comparisons (fewer under sanitizers,
// which run the model about 5x slower).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
constexpr int32_t kTokens = 8;
#else
constexpr int32_t kTokens = 16;
#endif

struct Loaded {
  hearth::gguf::File file;
  // One thread: the test machines are small and shared, where a spinning thread pool
  // only slows down (and the results do not depend on the thread count).
  hearth::cpu::CpuBackend backend{1};
  hearth::model::LlamaModel model;
  hearth::tokenizer::Tokenizer tok;
  explicit Loaded(const std::string& path)
      : file(hearth::gguf::File::open(path)), model(file, backend), tok(hearth::tokenizer::Tokenizer::from_gguf(file)) {}
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  size_t n_deltas = 0;
  Final fin;
};

// Waits for every channel's Final (deltas collected on the way); fails the test after
// `limit` without progress.
std::vector<Outcome> collect(const std::vector<std::shared_ptr<RequestChannel>>& chans,
                             std::chrono::seconds limit = 60s) {
  std::vector<Outcome> out(chans.size());
  std::vector<bool> done(chans.size(), false);
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (n_done < chans.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < chans.size(); ++i) {
      if (done[i]) continue;
      std::vector<Delta> ds;
      std::optional<Final> fin;
      chans[i]->wait(ds, fin, 5ms);
      for (Delta& d : ds) {
        ++out[i].n_deltas;
        out[i].text += d.text;
        for (const auto& t : d.tokens) out[i].tokens.push_back(t.token);
      }
      if (fin) {
        out[i].fin = *fin;
        done[i] = true;
        ++n_done;
      }
    }
  }
  EXPECT_EQ(n_done, chans.size()) << "requests did not finish in time";
  return out;
}

GenRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampler.temperature = 0.0f;
  return r;
}

class ServeEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p == nullptr || *p == '\0') return;
    loaded_ = std::make_unique<Loaded>(p);
  }
  static void TearDownTestSuite() {
    loaded_.reset();
    refs_.clear();
  }
  void SetUp() override {
    if (!loaded_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }

  static hearth::model::LlamaModel& model() { return loaded_->model; }
  static const hearth::tokenizer::Tokenizer& tok() { return loaded_->tok; }

  static std::vector<int32_t> encode(const std::string& text) { return tok().encode(text); }

  // engine::generate alone on one prompt, with its own KvCache (memoized).
  static const hearth::engine::GenerateResult& reference(const std::vector<int32_t>& prompt, int32_t max_tokens,
                                                         ops::KvType kv) {
    auto key = std::make_tuple(prompt, max_tokens, static_cast<int>(kv));
    auto it = refs_.find(key);
    if (it != refs_.end()) return it->second;
    hearth::model::KvCache cache(loaded_->backend, model().hparams(), 256, kv);
    hearth::engine::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampler.temperature = 0.0f;
    auto r = hearth::engine::generate(model(), cache, tok(), prompt, o, nullptr);
    return refs_.emplace(key, std::move(r)).first->second;
  }

  static std::vector<std::vector<int32_t>> four_prompts() {
    return {encode("The capital of France is"), encode("def fibonacci(n):"),
            encode("Once upon a time, in a small village by the sea, there lived"),
            encode("List three colors:")};
  }

  // Submits every prompt before starting the engine (so they arrive together), runs
  // them, and checks each against generate() alone with the same KV type.
  static std::vector<Outcome> run_and_compare(const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                                              int32_t max_tokens) {
    ServeEngine engine(model(), tok(), cfg);
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (const auto& p : prompts) {
      chans.push_back(std::make_shared<RequestChannel>());
      EXPECT_EQ(engine.submit(greedy(p, max_tokens), chans.back()), ServeEngine::Admit::kOk);
    }
    engine.start();
    std::vector<Outcome> outs = collect(chans);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto& ref = reference(prompts[i], max_tokens, cfg.kv_type);
      EXPECT_EQ(outs[i].tokens, ref.tokens) << "prompt " << i;
      EXPECT_EQ(outs[i].text, ref.text) << "prompt " << i;
      EXPECT_EQ(outs[i].fin.finish_reason, ref.stop_reason) << "prompt " << i;
      EXPECT_EQ(outs[i].fin.completion_tokens, static_cast<int32_t>(ref.tokens.size()));
      EXPECT_EQ(outs[i].fin.prompt_tokens, static_cast<int32_t>(prompts[i].size()));
      EXPECT_TRUE(outs[i].fin.error.empty()) << outs[i].fin.error;
    }
    // Everything finished: no block is held (cached ones are free for reuse).
    for (int k = 0; k < 200 && (engine.stats().running != 0 || engine.stats().kv_blocks_used != 0); ++k)
      std::this_thread::sleep_for(5ms);
    EXPECT_EQ(engine.stats().running, 0);
    EXPECT_EQ(engine.stats().waiting, 0);
    EXPECT_EQ(engine.stats().kv_blocks_used, 0);
    last_stats_ = engine.stats();
    return outs;
  }

  static std::unique_ptr<Loaded> loaded_;
  static std::map<std::tuple<std::vector<int32_t>, int32_t, int>, hearth::engine::GenerateResult> refs_;
  static hearth::engine::EngineStats last_stats_;
};

std::unique_ptr<Loaded> ServeEngineTest::loaded_;
std::map<std::tuple<std::vector<int32_t>, int32_t, int>, hearth::engine::GenerateResult> ServeEngineTest::refs_;
hearth::engine::EngineStats ServeEngineTest::last_stats_;

EngineConfig base_config(ops::KvType kv) {
  EngineConfig c;
  c.n_ctx = 256;
  c.n_blocks = 64;
  c.block_size = 16;
  c.kv_type = kv;
  c.max_seqs = 4;
  c.prefill_chunk = 512;
  c.max_queue = 16;
  return c;
}

}  // namespace

TEST_F(ServeEngineTest, BatchedGreedyEqualsGenerateAloneF32) {
  run_and_compare(base_config(ops::KvType::F32), four_prompts(), kTokens);
}

// Greedy rows reduced to their argmax by the back-end (Backend::fetch_rows; on the CPU
// turned on for the test, on a GPU the default): the engine and generate() give the same
// tokens as with full logits rows (the references are computed first, without), and the
// reduction was used. A request with log-probabilities in the same batch keeps its row.
TEST_F(ServeEngineTest, GreedyRowsReducedOnTheBackEndGiveTheSameTokens) {
  const auto prompts = four_prompts();
  for (const auto& p : prompts) reference(p, kTokens, ops::KvType::F32);
  loaded_->backend.set_argmax_rows(true);
  const int64_t before = loaded_->backend.argmax_rows_fetched();
  run_and_compare(base_config(ops::KvType::F32), prompts, kTokens);
  hearth::model::KvCache cache(loaded_->backend, model().hparams(), 256, ops::KvType::F32);
  hearth::engine::GenerateOptions o;
  o.max_tokens = kTokens;
  o.sampler.temperature = 0.0f;
  const auto alone = hearth::engine::generate(model(), cache, tok(), prompts[0], o, nullptr);
  EXPECT_EQ(alone.tokens, reference(prompts[0], kTokens, ops::KvType::F32).tokens);
  EXPECT_GT(loaded_->backend.argmax_rows_fetched(), before + 4 * kTokens);
  // Mixed: one request asks for log-probabilities (its row is copied whole).
  {
    ServeEngine engine(model(), tok(), base_config(ops::KvType::F32));
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (size_t i = 0; i < 2; ++i) {
      GenRequest r = greedy(prompts[i], kTokens);
      if (i == 1) r.top_logprobs = 2;
      chans.push_back(std::make_shared<RequestChannel>());
      EXPECT_EQ(engine.submit(r, chans.back()), ServeEngine::Admit::kOk);
    }
    engine.start();
    const auto outs = collect(chans);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(outs[i].tokens, reference(prompts[i], kTokens, ops::KvType::F32).tokens) << "request " << i;
    }
  }
  loaded_->backend.set_argmax_rows(false);
}

// Temperature draws (the server's default: the whole row; and with top-k, top-p, min-p)
// go to the back-end as draw rows with their uniform number taken ahead; the CPU leaves
// them to the host sampler, which must then draw exactly what generate() draws with the
// same seed.
TEST_F(ServeEngineTest, DrawRowsOfferedToTheBackEndGiveTheSameTokens) {
  const auto prompts = four_prompts();
  // modes 4, 5: penalties (a draw with top-k; greedy), offered as rows with their tokens
  for (int mode = 0; mode < 6; ++mode) {
    auto sampled = [mode](const std::vector<int32_t>& p, uint64_t seed) {
      GenRequest r;
      r.prompt = p;
      r.max_tokens = kTokens;
      r.sampler.temperature = mode == 5 ? 0.0f : 0.9f;
      r.sampler.top_k = mode == 1 || mode == 4 ? 40 : 0;
      r.sampler.top_p = mode == 1 ? 0.9f : mode == 2 ? 0.8f : 1.0f;
      r.sampler.min_p = mode == 3 ? 0.05f : 0.0f;
      if (mode >= 4) {
        r.sampler.repeat_penalty = 1.3f;
        r.sampler.frequency_penalty = mode == 4 ? 0.5f : 0.0f;
        r.sampler.presence_penalty = mode == 5 ? 0.8f : 0.0f;
      }
      r.sampler.seed = seed;
      return r;
    };
    const auto offered = [&] {
      return mode == 5 ? loaded_->backend.argmax_rows_fetched() : loaded_->backend.draw_rows_fetched();
    };
    std::vector<std::vector<int32_t>> alone;
    // generate() (hearth run) offers its draws to the back-end too: the same tokens.
    for (bool device_rows : {false, true}) {
      loaded_->backend.set_argmax_rows(device_rows);
      const int64_t before = offered();
      for (size_t i = 0; i < prompts.size(); ++i) {
        hearth::model::KvCache cache(loaded_->backend, model().hparams(), 256, ops::KvType::F32);
        hearth::engine::GenerateOptions o;
        o.max_tokens = kTokens;
        o.sampler = sampled(prompts[i], 11 + i).sampler;
        auto toks = hearth::engine::generate(model(), cache, tok(), prompts[i], o, nullptr).tokens;
        if (!device_rows) {
          alone.push_back(std::move(toks));
        } else {
          EXPECT_EQ(toks, alone[i]) << "generate, mode " << mode << " request " << i << " (draw rows)";
        }
      }
      if (device_rows) EXPECT_GE(offered(), before + 4 * (kTokens - 1)) << "mode " << mode;
    }
    for (bool device_rows : {false, true}) {
      loaded_->backend.set_argmax_rows(device_rows);
      const int64_t before = offered();
      ServeEngine engine(model(), tok(), base_config(ops::KvType::F32));
      std::vector<std::shared_ptr<RequestChannel>> chans;
      for (size_t i = 0; i < prompts.size(); ++i) {
        chans.push_back(std::make_shared<RequestChannel>());
        EXPECT_EQ(engine.submit(sampled(prompts[i], 11 + i), chans.back()), ServeEngine::Admit::kOk);
      }
      engine.start();
      const auto outs = collect(chans);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(outs[i].tokens, alone[i]) << "mode " << mode << " request " << i
                                            << (device_rows ? " (draw rows)" : "");
      }
      if (device_rows) EXPECT_GE(offered(), before + 4 * kTokens) << "mode " << mode;
    }
  }
  loaded_->backend.set_argmax_rows(false);
}

TEST_F(ServeEngineTest, BatchedGreedyEqualsGenerateAloneF16) {
  run_and_compare(base_config(ops::KvType::F16), four_prompts(), kTokens);
}

TEST_F(ServeEngineTest, ChunkedPrefillAndQueueingKeepResults) {
  EngineConfig c = base_config(ops::KvType::F16);
  c.max_seqs = 2;
  c.prefill_chunk = 5;  // every prompt above is longer than one chunk
  run_and_compare(c, four_prompts(), kTokens);
}

TEST_F(ServeEngineTest, PreemptionKeepsResults) {
  // 12 blocks of 4 positions: the four prompts (about 30 tokens together) are all
  // admitted, and their decodes outgrow the pool, so the youngest are preempted and
  // recomputed.
  EngineConfig c = base_config(ops::KvType::F32);
  c.block_size = 4;
  c.n_blocks = 12;
  const auto prompts = four_prompts();
  uint64_t prompt_tokens = 0, first_blocks = 0, positions = 0;
  for (const auto& p : prompts) {
    prompt_tokens += p.size();
    first_blocks += (p.size() + 3) / 4;
    positions += p.size() + 12 - 1;
  }
  ASSERT_LE(first_blocks, 12u) << "all four should be admitted at once";
  ASSERT_GT(positions, 48u) << "the decodes should outgrow the pool";
  run_and_compare(c, prompts, 12);
  // All four were admitted at once; any further prefix query is a readmission.
  EXPECT_GT(last_stats_.prefix_query_tokens, prompt_tokens) << "no preemption happened";
}

TEST_F(ServeEngineTest, PrefixReuseOnASecondIdenticalPrompt) {
  const std::vector<int32_t> prompt =
      encode("You are a helpful assistant. Answer briefly and precisely. Question: what is the largest planet in "
             "the solar system, and how many moons does it have? Answer:");
  ASSERT_GT(prompt.size(), 32u);
  ServeEngine engine(model(), tok(), base_config(ops::KvType::F16));
  engine.start();
  std::vector<Outcome> outs;
  for (int k = 0; k < 2; ++k) {
    auto ch = std::make_shared<RequestChannel>();
    ASSERT_EQ(engine.submit(greedy(prompt, 8), ch), ServeEngine::Admit::kOk);
    outs.push_back(collect({ch})[0]);
  }
  const auto& ref = reference(prompt, 8, ops::KvType::F16);
  EXPECT_EQ(outs[0].tokens, ref.tokens);
  EXPECT_EQ(outs[1].tokens, ref.tokens);
  EXPECT_EQ(outs[1].text, outs[0].text);
  EXPECT_EQ(outs[0].fin.cached_tokens, 0);
  // Whole blocks of the prompt, never all of it.
  EXPECT_EQ(outs[1].fin.cached_tokens, static_cast<int32_t>((prompt.size() - 1) / 16 * 16));
  EXPECT_GT(outs[1].fin.cached_tokens, 0);
  EXPECT_EQ(outs[1].fin.timings.cached_n, outs[1].fin.cached_tokens);
  EXPECT_GT(engine.stats().prefix_hit_tokens, 0u);
}

TEST_F(ServeEngineTest, CancelledRequestEndsAndFreesItsBlocks) {
  ServeEngine engine(model(), tok(), base_config(ops::KvType::F16));
  engine.start();
  auto ch = std::make_shared<RequestChannel>();
  GenRequest r = greedy(encode("Count slowly from one to one hundred: one, two,"), 200);
  r.ignore_eos = true;
  ASSERT_EQ(engine.submit(std::move(r), ch), ServeEngine::Admit::kOk);
  std::vector<Delta> ds;
  std::optional<Final> fin;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (ds.empty() && !fin && std::chrono::steady_clock::now() < deadline) ch->wait(ds, fin, 50ms);
  ASSERT_FALSE(ds.empty()) << "no delta";
  ASSERT_FALSE(fin.has_value());
  ch->cancel();
  Outcome o = collect({ch})[0];
  EXPECT_EQ(o.fin.finish_reason, "cancelled");
  EXPECT_FALSE(o.fin.error.empty());
  EXPECT_LT(o.fin.completion_tokens, 200);
  EXPECT_GE(o.fin.completion_tokens, 1);
  hearth::engine::EngineStats s;
  for (int k = 0; k < 400; ++k) {
    s = engine.stats();
    if (s.running == 0 && s.kv_blocks_used == 0) break;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);  // only cached (unreferenced) blocks remain

  // The engine goes on serving.
  auto ch2 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(encode("The capital of France is"), 4), ch2), ServeEngine::Admit::kOk);
  EXPECT_EQ(collect({ch2})[0].fin.finish_reason, "length");
}

TEST_F(ServeEngineTest, StopStringAndMaxTokens) {
  const std::vector<int32_t> prompt = encode("Once upon a time, in a small village by the sea, there lived");
  const auto& ref = reference(prompt, 12, ops::KvType::F16);
  ASSERT_EQ(ref.tokens.size(), 12u) << "the reference should run to max_tokens";
  hearth::tokenizer::DecodeOptions dopt;
  dopt.strip_space_prefix = false;
  auto text_of = [&](size_t n) {
    return tok().decode(std::span<const int32_t>(ref.tokens.data(), n), dopt);
  };
  const std::string full = text_of(ref.tokens.size());
  ASSERT_EQ(full, ref.text);
  // A stop string spanning the boundary between tokens 6 and 7 (1-based: ends inside
  // token 7's text, starts inside token 6's or earlier).
  const std::string before6 = text_of(5), upto7 = text_of(7);
  ASSERT_GT(upto7.size(), before6.size() + 2);
  const size_t start = before6.size() + (text_of(6).size() - before6.size()) / 2;
  std::string stop = upto7.substr(start, upto7.size() - start - 1);
  ASSERT_FALSE(stop.empty());
  const size_t at = full.find(stop);
  ASSERT_NE(at, std::string::npos);
  size_t want_tokens = 0;  // tokens until the text first contains the stop
  while (text_of(want_tokens).find(stop) == std::string::npos) ++want_tokens;

  ServeEngine engine(model(), tok(), base_config(ops::KvType::F16));
  std::vector<std::shared_ptr<RequestChannel>> chans;
  GenRequest with_stop = greedy(prompt, 12);
  with_stop.stop = {"a string that never appears", stop};
  chans.push_back(std::make_shared<RequestChannel>());
  ASSERT_EQ(engine.submit(std::move(with_stop), chans.back()), ServeEngine::Admit::kOk);
  chans.push_back(std::make_shared<RequestChannel>());
  ASSERT_EQ(engine.submit(greedy(prompt, 5), chans.back()), ServeEngine::Admit::kOk);
  GenRequest held = greedy(prompt, 5);
  const std::string text5 = text_of(5);
  held.stop = {text5.substr(text5.size() - 2) + "\x01"};  // begins like the end of token 5's text: held, then flushed
  chans.push_back(std::make_shared<RequestChannel>());
  ASSERT_EQ(engine.submit(std::move(held), chans.back()), ServeEngine::Admit::kOk);
  engine.start();
  std::vector<Outcome> outs = collect(chans);

  EXPECT_EQ(outs[0].fin.finish_reason, "stop");
  EXPECT_EQ(outs[0].fin.stop_sequence, stop);  // which stop string ended it
  EXPECT_EQ(outs[0].text, full.substr(0, at));
  EXPECT_EQ(outs[0].fin.completion_tokens, static_cast<int32_t>(want_tokens));
  EXPECT_EQ(outs[0].tokens.size(), want_tokens);
  EXPECT_EQ(outs[0].tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + want_tokens));

  EXPECT_EQ(outs[1].fin.finish_reason, "length");
  EXPECT_EQ(outs[1].fin.stop_sequence, "");
  EXPECT_EQ(outs[1].fin.completion_tokens, 5);
  EXPECT_EQ(outs[1].tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + 5));
  EXPECT_EQ(outs[1].text, text_of(5));
  EXPECT_EQ(outs[1].fin.timings.predicted_n, 5);

  EXPECT_EQ(outs[2].fin.finish_reason, "length");
  EXPECT_EQ(outs[2].text, text_of(5));
}

TEST_F(ServeEngineTest, SubmitRejectsTooLongAndFullQueue) {
  EngineConfig c = base_config(ops::KvType::F16);
  c.n_ctx = 64;
  c.n_blocks = 8;  // 128 positions: n_ctx is the limit
  c.max_seqs = 2;
  c.max_queue = 3;
  ServeEngine engine(model(), tok(), c);  // never started: nothing drains the queue
  EXPECT_EQ(engine.max_sequence_tokens(), 64);
  std::vector<int32_t> prompt(10, encode("hi").back());
  auto ch = std::make_shared<RequestChannel>();
  EXPECT_EQ(engine.submit(greedy(prompt, 55), ch), ServeEngine::Admit::kTooLong);
  EXPECT_EQ(engine.submit(greedy({}, 4), ch), ServeEngine::Admit::kTooLong);
  EXPECT_EQ(engine.submit(greedy(std::vector<int32_t>(65, prompt[0]), 1), ch), ServeEngine::Admit::kTooLong);

  // The pool can be the limit too.
  EngineConfig small = c;
  small.n_blocks = 2;  // 32 positions
  ServeEngine tiny(model(), tok(), small);
  EXPECT_EQ(tiny.max_sequence_tokens(), 32);
  EXPECT_EQ(tiny.submit(greedy(prompt, 23), std::make_shared<RequestChannel>()), ServeEngine::Admit::kTooLong);

  // max_seqs free slots plus max_queue waiting: 5 accepted, the 6th refused.
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (int k = 0; k < 5; ++k) {
    chans.push_back(std::make_shared<RequestChannel>());
    EXPECT_EQ(engine.submit(greedy(prompt, 54), chans.back()), ServeEngine::Admit::kOk) << k;  // 64 exactly fits
  }
  EXPECT_EQ(engine.submit(greedy(prompt, 4), std::make_shared<RequestChannel>()), ServeEngine::Admit::kQueueFull);

  // Stopping an engine that never ran still ends every accepted request.
  engine.stop();
  for (auto& chn : chans) {
    std::vector<Delta> ds;
    std::optional<Final> fin;
    chn->wait(ds, fin, 1000ms);
    ASSERT_TRUE(fin.has_value());
    EXPECT_EQ(fin->finish_reason, "cancelled");
    EXPECT_TRUE(ds.empty());
  }
  EXPECT_EQ(engine.submit(greedy(prompt, 4), std::make_shared<RequestChannel>()), ServeEngine::Admit::kStopped);
}

// --reasoning-budget: after `budget` tokens inside the open <think> block the engine
// writes the closing tokens instead of sampling, then samples again.
TEST_F(ServeEngineTest, ReasoningBudgetForcesTheClosingTokens) {
  const std::vector<int32_t> prompt = encode("Let me think about the capital of France.");
  hearth::tokenizer::EncodeOptions enc;
  enc.add_special = false;
  const std::vector<int32_t> close = tok().encode("\n</think>\n\n", enc);
  ASSERT_FALSE(close.empty());
  GenRequest r = greedy(prompt, 12);
  r.reasoning.budget = 4;
  r.reasoning.starts_inside = true;
  r.reasoning.close_tokens = close;
  ServeEngine engine(model(), tok(), base_config(ops::KvType::F32));
  auto ch = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(std::move(r), ch), ServeEngine::Admit::kOk);
  engine.start();
  const Outcome out = collect({ch})[0];
  const auto& ref = reference(prompt, 4, ops::KvType::F32);
  ASSERT_GE(out.tokens.size(), 4 + close.size());
  if (ref.tokens.size() < 4) GTEST_SKIP() << "the model ended before the budget";
  EXPECT_EQ(std::vector<int32_t>(out.tokens.begin(), out.tokens.begin() + 4), ref.tokens);
  EXPECT_EQ(std::vector<int32_t>(out.tokens.begin() + 4, out.tokens.begin() + 4 + close.size()), close);
  EXPECT_NE(out.text.find("</think>"), std::string::npos) << out.text;
}

// ServeEngine with a hybrid (Gated DeltaNet) model: the tiny random Qwen3.5 fixtures
// of tests/data/qwen35 loaded from their Hugging Face folders, with the Qwen3 tokenizer
// for detokenizing (the fixtures' ids are below 256, plain byte tokens there).
//   - concurrent greedy requests (decode tokens and prompt chunks in the same steps,
//     each with its own recurrent state slot) give the tokens engine::generate gives
//     alone; also under a tiny KV pool that forces preemption (recompute);
//   - a follow-up request (the previous prompt + its answer + a new turn) resumes from
//     a recurrent-state snapshot: cached_tokens covers the previous prompt and most of
//     the answer, and the output equals a cold run of the same prompt;
//   - the same prompt twice: the second resumes at the last block boundary before its
//     final token;
//   - a prompt prefilled in one chunk keeps the states at its snapshot points inside it
//     (taken by the model mid-step): a request sharing the prefix resumes there and
//     equals a cold run.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "engine/generator.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

using namespace std::chrono_literals;
using hearth::engine::Delta;
using hearth::engine::EngineConfig;
using hearth::engine::Final;
using hearth::engine::GenRequest;
using hearth::engine::RequestChannel;
using hearth::engine::ServeEngine;

namespace {

const std::string kDir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/";

struct Loaded {
  hearth::gguf::File file;
  hearth::cpu::CpuBackend backend{1};
  std::unique_ptr<hearth::model::CausalLm> model;
  hearth::tokenizer::Tokenizer tok;
  explicit Loaded(const std::string& name)
      : file(hearth::convert::open_model(kDir + name)),
        model(hearth::model::load_causal_lm(file, backend)),
        tok(hearth::tokenizer::Tokenizer::load(std::string(HEARTH_SHARED_DIR) +
                                               "/data/tokenizers/qwen3/tokenizer.json")) {}
};

struct Outcome {
  std::vector<int32_t> tokens;
  Final fin;
};

std::vector<Outcome> collect(const std::vector<std::shared_ptr<RequestChannel>>& chans) {
  std::vector<Outcome> out(chans.size());
  std::vector<bool> done(chans.size(), false);
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (n_done < chans.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < chans.size(); ++i) {
      if (done[i]) continue;
      std::vector<Delta> ds;
      std::optional<Final> fin;
      chans[i]->wait(ds, fin, 5ms);
      for (const Delta& d : ds) {
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
  r.ignore_eos = true;
  return r;
}

EngineConfig config(int64_t n_blocks = 64) {
  EngineConfig c;
  c.n_ctx = 256;
  c.n_blocks = n_blocks;
  c.block_size = 16;
  c.kv_type = hearth::ops::KvType::F32;
  c.max_seqs = 4;
  c.prefill_chunk = 48;
  c.max_queue = 16;
  c.n_snapshots = 16;
  return c;
}

std::vector<int32_t> alone(Loaded& l, const std::vector<int32_t>& prompt, int32_t n,
                           hearth::ops::KvType kv = hearth::ops::KvType::F32) {
  hearth::model::KvCache cache(l.backend, l.model->hparams(), 256, kv);
  hearth::engine::GenerateOptions o;
  o.max_tokens = n;
  o.sampler.temperature = 0.0f;
  return hearth::engine::generate(*l.model, cache, l.tok, prompt, o, nullptr).tokens;
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> ids;
    const int n = 20 + 23 * k;  // 20, 43, 66, 89 tokens: several chunks, unaligned ends
    for (int i = 0; i < n; ++i) ids.push_back((i * 37 + k * 11 + 5) % 256);
    p.push_back(ids);
  }
  return p;
}

std::vector<Outcome> run(Loaded& l, const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& ps, int32_t n) {
  ServeEngine engine(*l.model, l.tok, cfg);
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& p : ps) {
    chans.push_back(std::make_shared<RequestChannel>());
    EXPECT_EQ(engine.submit(greedy(p, n), chans.back()), ServeEngine::Admit::kOk);
  }
  engine.start();
  return collect(chans);
}

class HybridEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridEngine, ConcurrentRequestsEqualSoloRuns) {
  Loaded l(GetParam());
  const auto ps = prompts();
  const auto outs = run(l, config(), ps, 12);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(outs[i].tokens, alone(l, ps[i], 12)) << GetParam() << " prompt " << i;
    EXPECT_TRUE(outs[i].fin.error.empty()) << outs[i].fin.error;
  }
}

TEST_P(HybridEngine, PreemptionKeepsResults) {
  Loaded l(GetParam());
  const auto ps = prompts();
  // 16 blocks of 16: the four sequences (up to 101 positions each) cannot all fit.
  const auto outs = run(l, config(16), ps, 12);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(outs[i].tokens, alone(l, ps[i], 12)) << "prompt " << i;
}

TEST_P(HybridEngine, SnapshotTakenInsideAChunkResumesExactly) {
  Loaded l(GetParam());
  EngineConfig cfg = config();
  cfg.prefill_chunk = 256;  // the whole prompt in one step
  cfg.snapshot_every = 64;  // points 64, 128 and 144 (the last boundary) inside it
  ServeEngine engine(*l.model, l.tok, cfg);
  engine.start();
  std::vector<int32_t> p1;
  for (int i = 0; i < 150; ++i) p1.push_back((i * 61 + 11) % 256);
  auto c1 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p1, 4), c1), ServeEngine::Admit::kOk);
  const Outcome o1 = collect({c1})[0];
  EXPECT_EQ(o1.tokens, alone(l, p1, 4));
  // Shares 140 tokens: resumes from the state kept at 128, inside the first chunk.
  std::vector<int32_t> p2(p1.begin(), p1.begin() + 140);
  for (int i = 0; i < 12; ++i) p2.push_back((i * 17 + 200) % 256);
  auto c2 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p2, 8), c2), ServeEngine::Admit::kOk);
  const Outcome o2 = collect({c2})[0];
  EXPECT_EQ(o2.fin.cached_tokens, 128);
  EXPECT_EQ(o2.tokens, alone(l, p2, 8)) << GetParam();
  // Shares 100: resumes from 64.
  std::vector<int32_t> p3(p1.begin(), p1.begin() + 100);
  for (int i = 0; i < 5; ++i) p3.push_back((i * 13 + 100) % 256);
  auto c3 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p3, 8), c3), ServeEngine::Admit::kOk);
  const Outcome o3 = collect({c3})[0];
  EXPECT_EQ(o3.fin.cached_tokens, 64);
  EXPECT_EQ(o3.tokens, alone(l, p3, 8)) << GetParam();
}

// `hearth run` feeds a long prompt in chunks (GenerateOptions::prefill_chunk): the KV rows
// and the recurrent state carried from chunk to chunk give the same continuation as the
// whole prompt in one step, and its log-probabilities to float rounding (the chunked
// Gated DeltaNet form sums in another order across a chunk boundary; measured <= 1e-5).
TEST_P(HybridEngine, ChunkedPromptEqualsOneStep) {
  Loaded l(GetParam());
  const auto ps = prompts();
  for (int64_t chunk : {int64_t{7}, int64_t{16}, int64_t{40}}) {
    std::vector<hearth::engine::GenerateResult> r;
    for (int64_t c : {int64_t{0}, chunk}) {
      hearth::model::KvCache cache(l.backend, l.model->hparams(), 256, hearth::ops::KvType::F32);
      hearth::engine::GenerateOptions o;
      o.max_tokens = 6;
      o.n_logprobs = 3;
      o.sampler.temperature = 0.0f;
      o.prefill_chunk = c;
      r.push_back(hearth::engine::generate(*l.model, cache, l.tok, ps[3], o, nullptr));
    }
    EXPECT_EQ(r[0].tokens, r[1].tokens) << GetParam() << " chunk " << chunk;
    ASSERT_EQ(r[0].logprobs.size(), r[1].logprobs.size());
    for (size_t i = 0; i < r[0].logprobs.size(); ++i) {
      EXPECT_NEAR(r[0].logprobs[i].logprob, r[1].logprobs[i].logprob, 1e-4) << GetParam() << " chunk " << chunk << " step " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridEngine, ::testing::Values("dense", "moe", "next"),
                         [](const auto& info) { return info.param; });

TEST(HybridEngineCache, FollowUpTurnResumesFromSnapshot) {
  Loaded l("dense");
  ServeEngine engine(*l.model, l.tok, config());
  engine.start();
  std::vector<int32_t> p1;
  for (int i = 0; i < 70; ++i) p1.push_back((i * 53 + 7) % 256);
  auto c1 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p1, 20), c1), ServeEngine::Admit::kOk);
  const Outcome o1 = collect({c1})[0];
  ASSERT_EQ(o1.tokens.size(), 20u);
  EXPECT_EQ(o1.fin.cached_tokens, 0);
  // The next turn: everything so far plus new tokens.
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), o1.tokens.begin(), o1.tokens.end());
  for (int i = 0; i < 9; ++i) p2.push_back((i * 29 + 3) % 256);
  auto c2 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p2, 10), c2), ServeEngine::Admit::kOk);
  const Outcome o2 = collect({c2})[0];
  // 70 + 20 computed positions (the last sampled token was never run): the rolling
  // decode snapshot sits at 80, the last block boundary reached.
  EXPECT_EQ(o2.fin.cached_tokens, 80);
  EXPECT_EQ(o2.tokens, alone(l, p2, 10));
  // The same prompt again resumes from the snapshot at its last boundary before the end.
  auto c3 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p2, 10), c3), ServeEngine::Admit::kOk);
  const Outcome o3 = collect({c3})[0];
  EXPECT_EQ(o3.fin.cached_tokens, static_cast<int32_t>((p2.size() - 1) / 16 * 16));
  EXPECT_EQ(o3.tokens, o2.tokens);
}

// A q8_0 KV cache (the attention layers' K and V; the recurrent state and its snapshots
// stay f32): concurrent requests equal solo runs on a q8_0 cache, and a follow-up turn
// resumes from a snapshot plus q8_0 prefix blocks with the solo run's tokens.
TEST(HybridEngineCache, Q8KvCacheSnapshotsAndPrefixBlocks) {
  Loaded l("dense");
  EngineConfig cfg = config();
  cfg.kv_type = hearth::ops::KvType::Q8_0;
  const auto ps = prompts();
  const auto outs = run(l, cfg, ps, 12);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(outs[i].tokens, alone(l, ps[i], 12, hearth::ops::KvType::Q8_0)) << "prompt " << i;
  }
  ServeEngine engine(*l.model, l.tok, cfg);
  engine.start();
  std::vector<int32_t> p1;
  for (int i = 0; i < 70; ++i) p1.push_back((i * 53 + 7) % 256);
  auto c1 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p1, 20), c1), ServeEngine::Admit::kOk);
  const Outcome o1 = collect({c1})[0];
  ASSERT_EQ(o1.tokens.size(), 20u);
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), o1.tokens.begin(), o1.tokens.end());
  for (int i = 0; i < 9; ++i) p2.push_back((i * 29 + 3) % 256);
  auto c2 = std::make_shared<RequestChannel>();
  ASSERT_EQ(engine.submit(greedy(p2, 10), c2), ServeEngine::Admit::kOk);
  const Outcome o2 = collect({c2})[0];
  EXPECT_EQ(o2.fin.cached_tokens, 80);
  EXPECT_EQ(o2.tokens, alone(l, p2, 10, hearth::ops::KvType::Q8_0));
}

}  // namespace

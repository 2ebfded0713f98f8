// Speculative decoding on hybrid (Gated DeltaNet + attention) models, with the tiny random
// Qwen3.5 fixtures of tests/data/qwen35 (dense, moe, next; their ids below 256 are plain
// byte tokens of the Qwen3 tokenizer):
//   - a verification step's rows (decode_rows, a state checkpoint after every row) give bit
//     for bit the logits of one-token steps, and each checkpoint holds bit for bit the
//     recurrent state those steps leave (so a rollback to any accepted token is exact);
//   - greedy output through ServeEngine with --spec ngram is the output without it, alone,
//     in a batch, under preemption, sampled with seeds, and across a follow-up request that resumes from the
//     prefix cache's state snapshots (which must only hold states at accepted tokens);
//   - engine::generate (hearth run) likewise, with the cache's spare state slots.
// Each comparison also checks that drafts were accepted and rejected, so the rollback ran.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"

using namespace std::chrono_literals;
namespace engine = hearth::engine;
namespace model = hearth::model;

namespace {

const std::string kDir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/";

struct Loaded {
  hearth::gguf::File file;
  hearth::cpu::CpuBackend backend{1};
  std::unique_ptr<model::CausalLm> model;
  hearth::tokenizer::Tokenizer tok;
  explicit Loaded(const std::string& name)
      : file(hearth::convert::open_model(kDir + name)),
        model(model::load_causal_lm(file, backend)),
        tok(hearth::tokenizer::Tokenizer::load(std::string(HEARTH_SHARED_DIR) +
                                               "/data/tokenizers/qwen3/tokenizer.json")) {}
};

struct Outcome {
  std::vector<int32_t> tokens;
  engine::Final fin;
};

std::vector<Outcome> collect(const std::vector<std::shared_ptr<engine::RequestChannel>>& chans) {
  std::vector<Outcome> out(chans.size());
  std::vector<bool> done(chans.size(), false);
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (n_done < chans.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < chans.size(); ++i) {
      if (done[i]) continue;
      std::vector<engine::Delta> ds;
      std::optional<engine::Final> fin;
      chans[i]->wait(ds, fin, 5ms);
      for (const engine::Delta& d : ds) {
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

// A span of every prompt below (once in each) whose first five tokens are the requests'
// forced reasoning close: the random fixtures hardly ever continue a prompt-lookup draft
// themselves, but once the budget forces the first close token the drafter proposes the
// rest of the span, of which the four forced tokens are accepted and the sixth token (the
// model's own choice) is most likely not: a partial acceptance, every time.
const std::vector<int32_t> kSpan = {201, 202, 203, 204, 205, 206, 207};

engine::GenRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  engine::GenRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampler.temperature = 0.0f;
  r.ignore_eos = true;
  r.reasoning.budget = 9;
  r.reasoning.starts_inside = true;
  r.reasoning.close_tokens.assign(kSpan.begin(), kSpan.begin() + 5);
  return r;
}

engine::EngineConfig config(bool spec, int64_t n_blocks = 64) {
  engine::EngineConfig c;
  c.n_ctx = 256;
  c.n_blocks = n_blocks;
  c.block_size = 16;
  c.kv_type = hearth::ops::KvType::F32;
  c.max_seqs = 4;
  c.prefill_chunk = 48;
  c.max_queue = 16;
  c.n_snapshots = 16;
  c.spec.mode = spec ? engine::SpecMode::kNgram : engine::SpecMode::kOff;
  c.spec.max_draft = 5;
  c.spec.adaptive = false;  // every draft the drafter has: acceptance independent of timings
  return c;
}

// Prompts with repeats (so the drafter has something to propose) of several lengths.
std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> ids;
    const int period = 5 + 2 * k, n = 24 + 19 * k;
    for (int i = 0; i < n; ++i) ids.push_back(((i % period) * 37 + k * 11 + 5) % 200);
    ids.insert(ids.begin() + 9 + k, kSpan.begin(), kSpan.end());
    p.push_back(ids);
  }
  return p;
}

struct Served {
  std::vector<Outcome> out;
  engine::EngineStats stats;
};

// temperature > 0: sampled, seeded per request (rejection sampling; the same tokens with
// speculation as without).
Served serve(Loaded& l, const engine::EngineConfig& cfg, const std::vector<std::vector<int32_t>>& ps, int32_t n,
             float temperature = 0.0f) {
  engine::ServeEngine eng(*l.model, l.tok, cfg);
  std::vector<std::shared_ptr<engine::RequestChannel>> chans;
  for (size_t i = 0; i < ps.size(); ++i) {
    chans.push_back(std::make_shared<engine::RequestChannel>());
    engine::GenRequest r = greedy(ps[i], n);
    r.sampler.temperature = temperature;
    r.sampler.seed = 100 + i;
    EXPECT_EQ(eng.submit(r, chans.back()), engine::ServeEngine::Admit::kOk);
  }
  eng.start();
  Served s;
  s.out = collect(chans);
  for (int k = 0; k < 200 && eng.stats().kv_blocks_used != 0; ++k) std::this_thread::sleep_for(5ms);
  s.stats = eng.stats();
  return s;
}

void expect_same(const Served& on, const Served& off, const std::string& what) {
  ASSERT_EQ(on.out.size(), off.out.size());
  for (size_t i = 0; i < on.out.size(); ++i) {
    EXPECT_EQ(on.out[i].tokens, off.out[i].tokens) << what << " request " << i;
    EXPECT_EQ(on.out[i].fin.finish_reason, off.out[i].fin.finish_reason) << what << " request " << i;
    EXPECT_TRUE(on.out[i].fin.error.empty()) << on.out[i].fin.error;
  }
  EXPECT_EQ(off.stats.spec_drafted, 0u);
  EXPECT_GT(on.stats.spec_accepted, 0u) << what << ": no draft was accepted";
  EXPECT_GT(on.stats.spec_drafted, on.stats.spec_accepted) << what << ": no draft was rejected (no rollback ran)";
  EXPECT_EQ(on.stats.kv_blocks_used, 0) << what;
}

class SpecHybrid : public ::testing::TestWithParam<std::string> {};

// The state slot s of `pool` equals slot t of `other`, bit for bit (CPU: host memory).
bool same_state(const model::KvPool& a, int64_t s, const model::KvPool& b, int64_t t) {
  return std::memcmp(a.conv_state(s, 0), b.conv_state(t, 0), static_cast<size_t>(a.state_floats()) * sizeof(float)) ==
         0;
}

}  // namespace

TEST_P(SpecHybrid, VerifiedRowsAndCheckpointsEqualOneTokenSteps) {
  Loaded l(GetParam());
  model::CausalLm& m = *l.model;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((i * 29 + 3) % 256);
  const std::vector<int32_t> next = {17, 200, 45, 45, 3, 99, 128};
  const auto n = static_cast<int64_t>(next.size());
  model::KvCache one(l.backend, m.hparams(), 128), many(l.backend, m.hparams(), 128, hearth::ops::KvType::F32, n - 1);
  ASSERT_EQ(many.pool().n_state_slots(), n);
  m.forward(one, prompt, false);
  m.forward(many, prompt, false);
  model::BatchSeq b{&many.seq(), next.data(), n, true};
  b.n_logits = n;
  b.decode_rows = true;
  for (int32_t j = 1; j < n; ++j) b.snaps.push_back({j, j});
  std::vector<float> all;
  m.forward_batch(many.pool(), {b}, all);
  const auto n_vocab = static_cast<size_t>(m.hparams().n_vocab);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> row = m.forward(one, {next[static_cast<size_t>(i)]}, false);
    ASSERT_EQ(row.size(), n_vocab);
    EXPECT_EQ(std::memcmp(row.data(), all.data() + static_cast<size_t>(i) * n_vocab, n_vocab * sizeof(float)), 0)
        << GetParam() << " row " << i;
    // After i + 1 tokens: checkpoint i + 1, or the live slot after the last row.
    EXPECT_TRUE(same_state(one.pool(), 0, many.pool(), i + 1 < n ? i + 1 : 0))
        << GetParam() << " state after row " << i;
  }
  // A checkpoint that does not cover every row is refused (the recurrence must run a row
  // per pass to give the one-token arithmetic).
  b.snaps.pop_back();
  many.seq().n_past -= n;
  EXPECT_THROW(m.forward_batch(many.pool(), {b}, all), hearth::Error);
}

TEST_P(SpecHybrid, GreedyAloneAndInBatchesIsTheOutputWithoutSpeculation) {
  Loaded l(GetParam());
  const auto ps = prompts();
  // Alone, one request at a time.
  for (size_t i = 0; i < ps.size(); i += 3) {
    const Served off = serve(l, config(false), {ps[i]}, 40);
    const Served on = serve(l, config(true), {ps[i]}, 40);
    expect_same(on, off, GetParam() + " alone " + std::to_string(i));
  }
  // Four together: drafts verified in the same steps as other sequences' prompt chunks
  // and tokens.
  const Served off = serve(l, config(false), ps, 40);
  const Served on = serve(l, config(true), ps, 40);
  expect_same(on, off, GetParam() + " batch");
  // A pool too small for all four (preemption and recompute, drafts dropped for want of
  // blocks).
  const Served off_small = serve(l, config(false, 18), ps, 40);
  const Served on_small = serve(l, config(true, 18), ps, 40);
  expect_same(on_small, off_small, GetParam() + " small pool");
  EXPECT_GT(on_small.stats.preemptions, 0u);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(on_small.out[i].tokens, off.out[i].tokens) << "request " << i;
  // Sampled with seeds: the same tokens too.
  const Served off_sampled = serve(l, config(false), ps, 40, 0.9f);
  const Served on_sampled = serve(l, config(true), ps, 40, 0.9f);
  expect_same(on_sampled, off_sampled, GetParam() + " sampled");
  EXPECT_NE(on_sampled.out[0].tokens, off.out[0].tokens);  // (sampled indeed)
}

TEST_P(SpecHybrid, AFollowUpResumesFromSnapshotsAtAcceptedTokens) {
  Loaded l(GetParam());
  // A first turn that decodes past block boundaries with drafts, then a follow-up (its
  // prompt, its answer, new tokens) that resumes from the prefix cache's state snapshots:
  // equal to a cold run of the follow-up's prompt, and resuming where it does without
  // speculation. With a 16-token answer the only boundary after the 69-token prompt, 80,
  // is crossed by accepted drafted tokens (the forced close at generated token 9, position
  // 78, and the four accepted after it): the rolling decode snapshot must be taken there
  // from the checkpoint of its row (else the follow-up resumes at 64).
  const std::vector<int32_t> p1 = prompts()[2];
  ASSERT_EQ(p1.size(), 69u);
  for (int32_t answer : {16, 55}) {
    std::vector<std::vector<int32_t>> firsts;
    std::vector<Outcome> follow;
    engine::EngineStats stats;
    for (bool spec : {false, true}) {
      engine::ServeEngine eng(*l.model, l.tok, config(spec));
      eng.start();
      auto c1 = std::make_shared<engine::RequestChannel>();
      ASSERT_EQ(eng.submit(greedy(p1, answer), c1), engine::ServeEngine::Admit::kOk);
      const Outcome o1 = collect({c1})[0];
      firsts.push_back(o1.tokens);
      std::vector<int32_t> p2 = p1;
      p2.insert(p2.end(), o1.tokens.begin(), o1.tokens.end());
      for (int i = 0; i < 9; ++i) p2.push_back((i * 41 + 7) % 256);
      auto c2 = std::make_shared<engine::RequestChannel>();
      ASSERT_EQ(eng.submit(greedy(p2, 24), c2), engine::ServeEngine::Admit::kOk);
      follow.push_back(collect({c2})[0]);
      stats = eng.stats();
    }
    const std::string what = GetParam() + " answer " + std::to_string(answer);
    EXPECT_EQ(firsts[1], firsts[0]) << what;
    EXPECT_EQ(follow[1].tokens, follow[0].tokens) << what;
    EXPECT_EQ(follow[1].fin.cached_tokens, follow[0].fin.cached_tokens) << what;
    EXPECT_GT(follow[0].fin.cached_tokens, static_cast<int32_t>(p1.size())) << what;  // inside the first answer
    EXPECT_GT(stats.spec_accepted, 0u) << what;
    EXPECT_GT(stats.spec_drafted, stats.spec_accepted) << what;
  }
}

TEST_P(SpecHybrid, GenerateWithSpareStateSlotsKeepsTheOutput) {
  Loaded l(GetParam());
  const auto ps = prompts();
  for (size_t i = 0; i < ps.size(); i += 2) {
    std::vector<engine::GenerateResult> r;
    for (int64_t spare : {int64_t{0}, int64_t{6}}) {
      model::KvCache cache(l.backend, l.model->hparams(), 256, hearth::ops::KvType::F32, spare);
      engine::GenerateOptions o;
      o.max_tokens = 48;
      o.sampler.temperature = 0.0f;
      o.spec.mode = engine::SpecMode::kNgram;
      o.spec.max_draft = 6;
      o.spec.adaptive = false;
      r.push_back(engine::generate(*l.model, cache, l.tok, ps[i], o, nullptr));
    }
    EXPECT_EQ(r[0].drafted, 0);  // no spare slots: no drafts on a hybrid model
    EXPECT_EQ(r[1].tokens, r[0].tokens) << GetParam() << " prompt " << i;
    EXPECT_GT(r[1].drafted, r[1].accepted);  // (the random fixtures accept a draft rarely)
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpecHybrid, ::testing::Values("dense", "moe", "next"),
                         [](const auto& info) { return info.param; });

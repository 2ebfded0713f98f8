// Speculative decoding with a draft model (--spec draft, engine/model_drafter.h), on the
// real default model drafting for itself (the exactness test: it drafts what it decodes,
// so nearly every drafted token is accepted, and the output must be the output without
// speculation):
//   - ModelDrafter: its drafts are the model's greedy continuation; a region follows its
//     sequence's tokens when a draft was rejected (it keeps only the common prefix), and
//     sequences that outnumber its slots take one another's (the drafts do not change);
//     a draft model with recurrent layers or another vocabulary is refused, naming why;
//   - ServeEngine, greedy alone and batched (and under preemption) and seeded sampled
//     requests: the tokens without speculation, with drafts accepted;
//   - engine::generate (hearth run): likewise.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/model_drafter.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"
#include "spec_test_util.h"

namespace engine = hearth::engine;
namespace model = hearth::model;
using spec_test::Loaded;
using spec_test::loaded;
using spec_test::Outcome;
using spec_test::serve;
using namespace std::chrono_literals;

namespace {


const char* kRepeat =
    "def area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\n";
const char* kCount = "one two three four, one two three four, one two three four, one two";
const char* kPlain = "The capital of France is";
const char* kStory = "Once upon a time, in a small village by the sea, there lived";

// The model's greedy continuation of `prompt`, n tokens (generate without speculation).
std::vector<int32_t> greedy_tokens(const std::vector<int32_t>& prompt, int32_t n) {
  Loaded& m = *loaded();
  model::KvCache cache(m.backend, m.model.hparams(), 512, hearth::ops::KvType::F16);
  engine::GenerateOptions o;
  o.max_tokens = n;
  o.sampler.temperature = 0.0f;
  return engine::generate(m.model, cache, m.tok, prompt, o, nullptr).tokens;
}

}  // namespace

TEST(ModelDrafter, DraftsTheGreedyContinuationAndFollowsRollbacks) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  const std::vector<int32_t> a = m.tok.encode(kStory), b = m.tok.encode(kPlain);
  const std::vector<int32_t> a_next = greedy_tokens(a, 6), b_next = greedy_tokens(b, 6);
  ASSERT_EQ(a_next.size(), 6u);
  ASSERT_EQ(b_next.size(), 6u);
  // One slot for two sequences: each call takes it from the other.
  engine::ModelDrafter d(m.model, m.model.hparams().n_vocab, 256, 1, hearth::ops::KvType::F16, 7);
  for (int round = 0; round < 2; ++round) {
    std::vector<engine::ModelDrafter::Job> ja{{1, a, 6, {}}};
    d.draft(ja);
    EXPECT_EQ(ja[0].out, a_next) << "round " << round;
    std::vector<engine::ModelDrafter::Job> jb{{2, b, 4, {}}};
    d.draft(jb);
    EXPECT_EQ(jb[0].out, std::vector<int32_t>(b_next.begin(), b_next.begin() + 4)) << "round " << round;
  }
  // Two slots, both sequences in one call; then sequence 1 "accepts" two drafted tokens
  // and diverges (a rejected draft): its region keeps the common prefix only.
  engine::ModelDrafter two(m.model, m.model.hparams().n_vocab, 256, 2, hearth::ops::KvType::F16, 512);
  std::vector<engine::ModelDrafter::Job> both{{1, a, 3, {}}, {2, b, 2, {}}};
  two.draft(both);
  EXPECT_EQ(both[0].out, std::vector<int32_t>(a_next.begin(), a_next.begin() + 3));
  EXPECT_EQ(both[1].out, std::vector<int32_t>(b_next.begin(), b_next.begin() + 2));
  std::vector<int32_t> a2 = a;
  a2.insert(a2.end(), {a_next[0], a_next[1], m.tok.encode(" dragon", {})[0]});
  std::vector<engine::ModelDrafter::Job> again{{1, a2, 5, {}}};
  two.draft(again);
  EXPECT_EQ(again[0].out, greedy_tokens(a2, 5));
  // A draft model that cannot draft for this one.
  EXPECT_NE(engine::ModelDrafter::unsuitable(m.model, m.model.hparams().n_vocab + 1).find("vocabulary"),
            std::string::npos);
  EXPECT_THROW(engine::ModelDrafter(m.model, 1000, 256, 1, hearth::ops::KvType::F16, 64), hearth::Error);
  hearth::gguf::File hybrid_file =
      hearth::convert::open_model(std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/dense");
  hearth::cpu::CpuBackend be(1);
  const std::unique_ptr<model::CausalLm> hybrid = model::load_causal_lm(hybrid_file, be);
  EXPECT_NE(engine::ModelDrafter::unsuitable(*hybrid, hybrid->hparams().n_vocab).find("recurrent"), std::string::npos);
}

namespace {



engine::GenRequest request(const std::string& text, int32_t max_tokens, float temperature = 0.0f, uint64_t seed = 0) {
  engine::GenRequest r;
  r.prompt = loaded()->tok.encode(text);
  r.max_tokens = max_tokens;
  r.sampler.temperature = temperature;
  r.sampler.seed = seed;
  return r;
}

engine::EngineConfig config(engine::SpecMode mode, int64_t n_blocks = 160) {
  engine::EngineConfig c;
  c.n_ctx = 512;
  c.n_blocks = n_blocks;
  c.block_size = 16;
  c.kv_type = hearth::ops::KvType::F16;
  c.max_seqs = 4;
  c.max_queue = 16;
  c.spec.mode = mode;
  c.spec.max_draft = 5;
  c.spec.adaptive = false;
  c.spec.draft = &loaded()->model;  // the model drafting for itself
  return c;
}

void expect_same(const std::vector<Outcome>& on, const std::vector<Outcome>& off, const std::string& what) {
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_EQ(on[i].tokens, off[i].tokens) << what << " request " << i;
    EXPECT_EQ(on[i].fin.finish_reason, off[i].fin.finish_reason) << what << " request " << i;
    EXPECT_TRUE(on[i].fin.error.empty()) << on[i].fin.error;
  }
}

}  // namespace

TEST(SpecDraftEngine, SelfDraftingGivesTheOutputWithoutSpeculation) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  std::vector<engine::GenRequest> reqs = {request(kRepeat, 40), request(kCount, 30), request(kPlain, 24),
                                          request(kStory, 36), request(kRepeat, 7)};
  reqs[1].stop = {"four, one two three"};
  engine::EngineStats off_stats, on_stats;
  const auto off = serve(config(engine::SpecMode::kOff), reqs, off_stats);
  const auto on = serve(config(engine::SpecMode::kDraft), reqs, on_stats);
  expect_same(on, off, "batch");
  EXPECT_EQ(off_stats.spec_drafted, 0u);
  EXPECT_GT(on_stats.spec_drafted, 40u);
  // Drafting for itself: nearly every drafted token is accepted (the draft's catch-up
  // passes may round a last bit differently from one-token steps).
  EXPECT_GE(static_cast<double>(on_stats.spec_accepted), 0.9 * static_cast<double>(on_stats.spec_drafted));
  EXPECT_EQ(on_stats.kv_blocks_used, 0);
  // Under preemption (a pool too small for the four).
  const std::vector<engine::GenRequest> growing = {request(kRepeat, 40), request(kCount, 40), request(kRepeat, 36),
                                                   request(kCount, 36)};
  engine::EngineStats small_stats;
  const auto small_off = serve(config(engine::SpecMode::kOff, 14), growing, small_stats);
  const auto small = serve(config(engine::SpecMode::kDraft, 14), growing, small_stats);
  expect_same(small, small_off, "small pool");
  EXPECT_GT(small_stats.preemptions, 0u);
  EXPECT_GT(small_stats.spec_accepted, 0u);
  // Seeded sampled requests: the tokens without speculation too.
  std::vector<engine::GenRequest> sampled = {request(kRepeat, 40, 0.8f, 3), request(kStory, 40, 1.0f, 4)};
  sampled[1].sampler.top_p = 0.9f;
  const auto s_off = serve(config(engine::SpecMode::kOff), sampled, off_stats);
  const auto s_on = serve(config(engine::SpecMode::kDraft), sampled, on_stats);
  expect_same(s_on, s_off, "sampled");
  EXPECT_GT(on_stats.spec_accepted, 0u);
}

TEST(SpecDraftGenerate, SelfDraftingGivesTheOutputWithoutSpeculation) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  for (float temp : {0.0f, 0.7f}) {
    std::vector<engine::GenerateResult> r;
    for (bool spec : {false, true}) {
      model::KvCache cache(m.backend, m.model.hparams(), 512, hearth::ops::KvType::F16);
      engine::GenerateOptions o;
      o.max_tokens = 48;
      o.sampler.temperature = temp;
      o.sampler.seed = 21;
      o.prefill_chunk = 16;  // the draft's catch-up in chunks too
      if (spec) o.spec.mode = engine::SpecMode::kDraft;
      o.spec.draft = &m.model;
      o.spec.adaptive = false;
      r.push_back(engine::generate(m.model, cache, m.tok, m.tok.encode(kStory), o, nullptr));
    }
    EXPECT_EQ(r[1].tokens, r[0].tokens) << "temperature " << temp;
    EXPECT_GT(r[1].accepted, 0);
    if (temp == 0.0f) {
      EXPECT_GE(r[1].accepted * 10, r[1].drafted * 9);
    }
  }
  // --spec draft without a draft model is refused.
  model::KvCache cache(m.backend, m.model.hparams(), 128, hearth::ops::KvType::F16);
  engine::GenerateOptions o;
  o.max_tokens = 4;
  o.spec.mode = engine::SpecMode::kDraft;
  EXPECT_THROW(engine::generate(m.model, cache, m.tok, m.tok.encode(kPlain), o, nullptr), hearth::Error);
}

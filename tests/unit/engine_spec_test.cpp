// Speculative decoding: the prompt-lookup drafter, the drafting policy, and exactness on
// the real default model: verifying drafted tokens in one step gives, row for row, the
// logits of decoding them one at a time, and greedy output with --spec ngram is the
// output without it (engine::generate alone, and ServeEngine with several sequences).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/ngram_drafter.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "engine/spec_policy.h"
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

namespace {


}  // namespace

TEST(SpecModel, VerifiedRowsEqualOneTokenSteps) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  const std::vector<int32_t> prompt = m.tok.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n");
  const std::vector<int32_t> next = m.tok.encode("    return a - b\n\ndef mul(a, b):\n    return a * b\n");
  for (auto kv : {hearth::ops::KvType::F32, hearth::ops::KvType::F16}) {
    model::KvCache one(m.backend, m.model.hparams(), 256, kv), many(m.backend, m.model.hparams(), 256, kv);
    m.model.forward(one, prompt, false);
    m.model.forward(many, prompt, false);
    // The verification step as the engine lays it out: every row's logits, each row
    // attending as a one-token step.
    model::BatchSeq b{&many.seq(), next.data(), static_cast<int64_t>(next.size()), true};
    b.n_logits = b.n_tokens;
    b.decode_rows = true;
    std::vector<float> all;
    m.model.forward_batch(many.pool(), {b}, all);
    const size_t n_vocab = static_cast<size_t>(m.model.hparams().n_vocab);
    for (size_t i = 0; i < next.size(); ++i) {
      const std::vector<float> row = m.model.forward(one, {next[i]}, false);
      ASSERT_EQ(row.size(), n_vocab);
      EXPECT_EQ(std::memcmp(row.data(), all.data() + i * n_vocab, n_vocab * sizeof(float)), 0)
          << "row " << i << " of " << next.size() << " kv " << static_cast<int>(kv);
    }
  }
}

// ---- The drafter -------------------------------------------------------------------

TEST(NgramDrafter, CopiesWhatFollowedTheLatestLongestMatch) {
  const engine::NgramDrafter d(3, 1);
  // "1 2 3 9 | 1 2 3 7 8 | 5 2 3": the suffix "2 3" (no earlier "5 2 3") last occurred
  // before 7 8.
  const std::vector<int32_t> t = {1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3};
  EXPECT_EQ(d.draft(t, 2), (std::vector<int32_t>{7, 8}));
  // The copy runs into the suffix itself: 7 8 5 2 3, then the repeat goes on (7 8 ...).
  EXPECT_EQ(d.draft(t, 7), (std::vector<int32_t>{7, 8, 5, 2, 3, 7, 8}));
  // The longest n wins over a later shorter match: "1 2 3" -> after its latest earlier
  // occurrence (position 4..6) comes 7, though "3" alone occurred later.
  const std::vector<int32_t> u = {1, 2, 3, 7, 4, 3, 6, 1, 2, 3};
  EXPECT_EQ(d.draft(u, 1), (std::vector<int32_t>{7}));
  const engine::NgramDrafter only1(1, 1);
  EXPECT_EQ(only1.draft(u, 1), (std::vector<int32_t>{6}));
}

TEST(NgramDrafter, FindsTheMatchAndItsLength) {
  const engine::NgramDrafter d(6, 1);
  // "5 6 7 8" occurred at 1 .. 4 (then 9); "8" alone later, at 6: the longest match wins.
  const std::vector<int32_t> t = {4, 5, 6, 7, 8, 9, 8, 3, 5, 6, 7, 8};
  const engine::NgramMatch m = d.find(t);
  EXPECT_EQ(m.n, 4);
  EXPECT_EQ(m.start, 1);
  EXPECT_EQ(engine::NgramDrafter::copy(t, m, 3), (std::vector<int32_t>{9, 8, 3}));
  EXPECT_EQ(engine::NgramDrafter::copy(t, m, 0), std::vector<int32_t>{});
  EXPECT_EQ(engine::NgramDrafter::copy(t, engine::NgramMatch{}, 3), std::vector<int32_t>{});
  // Capped at max_n: a long repeat matches max_n tokens.
  const std::vector<int32_t> rep = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(d.find(rep).n, 6);
  EXPECT_EQ(d.find(rep).start, 3);
  EXPECT_EQ(d.find(std::vector<int32_t>{1, 2, 3}).n, 0);
}

TEST(NgramDrafter, NothingWithoutAnEarlierMatch) {
  const engine::NgramDrafter d(3, 2);
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(d.draft(std::vector<int32_t>{}, 4).empty());
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1}, 4).empty());
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1, 2, 1, 2}, 0).empty());
  // A period-one run: the repeat fills the whole draft.
  EXPECT_EQ(d.draft(std::vector<int32_t>{4, 4, 4}, 3), (std::vector<int32_t>{4, 4, 4}));
  EXPECT_THROW(engine::NgramDrafter(1, 2), hearth::Error);
  EXPECT_THROW(engine::NgramDrafter(2, 0), hearth::Error);
}

// ---- The drafting policy -----------------------------------------------------------

TEST(SpecPolicy, StepCostFitsFixedAndPerRowCosts) {
  engine::StepCost c(64);
  EXPECT_FALSE(c.known());
  for (int i = 0; i < 30; ++i) {
    const int64_t rows = 1 + i % 9;
    c.note(rows, 0.010 + 0.002 * static_cast<double>(rows));
  }
  c.note(512, 5.0);  // a prefill chunk: not of decode size, not counted
  ASSERT_TRUE(c.known());
  EXPECT_NEAR(c.fixed(), 0.010, 1e-6);
  EXPECT_NEAR(c.per_row(), 0.002, 1e-6);
  // Steps that never vary in rows cannot tell the costs apart.
  engine::StepCost same(64);
  for (int i = 0; i < 30; ++i) same.note(4, 0.02);
  EXPECT_FALSE(same.known());
}

TEST(SpecPolicy, DraftsLongWhileRowsAreCheapAndStopsForLargeBatches) {
  engine::StepCost memory_bound(512), compute_bound(512);
  for (int i = 0; i < 40; ++i) {
    const int64_t rows = 1 + i % 16;
    memory_bound.note(rows, 0.020 + 0.0002 * static_cast<double>(rows));  // rows nearly free
    compute_bound.note(rows, 0.001 + 0.004 * static_cast<double>(rows));  // time follows rows
  }
  // A lone stream where rows are nearly free: a good acceptance drafts the maximum.
  EXPECT_EQ(engine::draft_length(memory_bound, 1, 1, 0.8, 8), 8);
  // The same acceptance with 64 sequences on a compute-bound device: nothing.
  EXPECT_EQ(engine::draft_length(compute_bound, 64, 64, 0.8, 8), 0);
  // Drafts shorten as the acceptance falls.
  const int32_t hi = engine::draft_length(memory_bound, 16, 16, 0.9, 8);
  const int32_t lo = engine::draft_length(memory_bound, 16, 16, 0.3, 8);
  EXPECT_GT(hi, lo);
  EXPECT_EQ(engine::draft_length(memory_bound, 1, 1, 0.0, 8), 0);
  // A draft model's cost per drafted token counts like a row's: as dear as 30 % of the
  // step (the step is about 20 ms), fewer tokens; as dear as the whole step, none.
  EXPECT_LT(engine::draft_length(memory_bound, 1, 1, 0.8, 8, 0.006), 8);
  EXPECT_GT(engine::draft_length(memory_bound, 1, 1, 0.8, 8, 0.006), 0);
  EXPECT_EQ(engine::draft_length(memory_bound, 1, 1, 0.8, 8, 0.03), 0);
  EXPECT_EQ(engine::draft_length(memory_bound, 1, 0, 0.9, 8), 0);
}

TEST(SpecPolicy, AcceptanceFollowsVerificationsAndDriftsBack) {
  engine::Acceptance a;
  EXPECT_DOUBLE_EQ(a.p(), 0.5);
  for (int i = 0; i < 50; ++i) a.note(4, 4);  // every drafted token accepted
  EXPECT_GT(a.p(), 0.95);
  engine::Acceptance b;
  for (int i = 0; i < 50; ++i) b.note(4, 0);  // every draft rejected at once
  EXPECT_LT(b.p(), 0.1);
  for (int i = 0; i < 300; ++i) b.idle();
  EXPECT_GT(b.p(), 0.3);  // tried again after a while
  EXPECT_THROW(engine::parse_spec_mode("medusa"), hearth::Error);
  EXPECT_EQ(engine::parse_spec_mode("ngram"), engine::SpecMode::kNgram);
  EXPECT_EQ(engine::parse_spec_mode("off"), engine::SpecMode::kOff);
}

TEST(SpecPolicy, AcceptanceIsKeptPerClass) {
  engine::Acceptance a;
  for (int i = 0; i < 50; ++i) {
    a.note(4, 0, 1);  // drafts from one-token matches: rejected at once
    a.note(4, 4, 5);  // from five-token matches: all accepted
  }
  EXPECT_LT(a.p(1), 0.1);
  EXPECT_GT(a.p(5), 0.95);
  EXPECT_DOUBLE_EQ(a.p(3), 0.5);  // untouched
  EXPECT_DOUBLE_EQ(a.p(0), 0.5);
  // Classes past the last share it; below 0 is class 0.
  a.note(4, 4, 100);
  EXPECT_GT(a.p(engine::Acceptance::kClasses - 1), 0.5);
  EXPECT_DOUBLE_EQ(a.p(-3), a.p(0));
  for (int i = 0; i < 300; ++i) a.idle(1);
  EXPECT_GT(a.p(1), 0.3);
  EXPECT_GT(a.p(5), 0.95);  // idling class 1 leaves class 5 alone
}

// ---- Exactness through the engine --------------------------------------------------

namespace {



engine::GenRequest greedy(const std::string& text, int32_t max_tokens) {
  engine::GenRequest r;
  r.prompt = loaded()->tok.encode(text);
  r.max_tokens = max_tokens;
  r.sampler.temperature = 0.0f;
  return r;
}

engine::EngineConfig config(bool spec, int32_t max_seqs) {
  engine::EngineConfig c;
  c.n_ctx = 512;
  c.n_blocks = 160;
  c.block_size = 16;
  c.kv_type = hearth::ops::KvType::F16;
  c.max_seqs = max_seqs;
  c.max_queue = 16;
  c.spec.mode = spec ? engine::SpecMode::kNgram : engine::SpecMode::kOff;
  c.spec.max_draft = 6;
  c.spec.adaptive = false;  // every draft the drafter has: acceptance independent of timings
  return c;
}

// Text the model goes on repeating (so drafts are accepted), and text it does not.
const char* kRepeat =
    "def area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\n";
const char* kCount = "one two three four, one two three four, one two three four, one two";
const char* kPlain = "The capital of France is";

void expect_same(const std::vector<Outcome>& a, const std::vector<Outcome>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].text, b[i].text) << "request " << i;
    EXPECT_EQ(a[i].fin.finish_reason, b[i].fin.finish_reason) << "request " << i;
    EXPECT_EQ(a[i].fin.stop_sequence, b[i].fin.stop_sequence) << "request " << i;
    EXPECT_EQ(a[i].fin.completion_tokens, b[i].fin.completion_tokens) << "request " << i;
    EXPECT_TRUE(a[i].fin.error.empty()) << a[i].fin.error;
  }
}

}  // namespace

TEST(SpecEngine, GreedyAloneIsTheOutputWithoutSpeculation) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  const std::vector<engine::GenRequest> reqs = {greedy(kRepeat, 48)};
  engine::EngineStats off_stats, on_stats;
  const auto off = serve(config(false, 4), reqs, off_stats);
  const auto on = serve(config(true, 4), reqs, on_stats);
  expect_same(on, off);
  EXPECT_EQ(off_stats.spec_drafted, 0u);
  EXPECT_GT(on_stats.spec_accepted, 0u);  // not vacuous: drafts were accepted
  EXPECT_GE(on_stats.spec_drafted, on_stats.spec_accepted);
  EXPECT_EQ(on[0].fin.timings.accepted_n, static_cast<int32_t>(on_stats.spec_accepted));
  EXPECT_EQ(on_stats.kv_blocks_used, 0);  // rolled-back blocks went back too
  // And the same tokens as generate() alone with its own cache (and with --spec there).
  Loaded& m = *loaded();
  for (bool spec : {false, true}) {
    model::KvCache cache(m.backend, m.model.hparams(), 512, hearth::ops::KvType::F16);
    engine::GenerateOptions o;
    o.max_tokens = 48;
    o.sampler.temperature = 0.0f;
    if (spec) o.spec.mode = engine::SpecMode::kNgram;
    o.spec.adaptive = false;
    const auto g = engine::generate(m.model, cache, m.tok, reqs[0].prompt, o, nullptr);
    EXPECT_EQ(g.tokens, off[0].tokens) << "generate, spec " << spec;
    if (spec) {
      EXPECT_GT(g.accepted, 0);
    }
  }
}

TEST(SpecEngine, GreedyBatchIsTheOutputWithoutSpeculation) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  // Repetitive and plain prompts decoding together; a stop string that ends one inside
  // an accepted draft; max_tokens that ends one mid-draft; a request that opts out.
  std::vector<engine::GenRequest> reqs = {greedy(kRepeat, 40), greedy(kCount, 30), greedy(kPlain, 24),
                                          greedy(kRepeat, 7), greedy(kCount, 40)};
  reqs[1].stop = {"four, one two three"};
  reqs[4].speculative = false;
  engine::EngineStats off_stats, on_stats;
  const auto off = serve(config(false, 4), reqs, off_stats);
  const auto on = serve(config(true, 4), reqs, on_stats);
  expect_same(on, off);
  EXPECT_EQ(off[1].fin.finish_reason, "stop");
  EXPECT_EQ(off[3].fin.finish_reason, "length");
  EXPECT_GT(on_stats.spec_accepted, 0u);
  EXPECT_EQ(on[4].fin.timings.drafted_n, 0);  // "speculative": false
  EXPECT_EQ(on_stats.kv_blocks_used, 0);
}

// (Sampled requests draft, with rejection sampling: engine_spec_sampling_test.)
TEST(SpecEngine, LogprobRequestsDoNotDraft) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  std::vector<engine::GenRequest> reqs = {greedy(kRepeat, 24), greedy(kRepeat, 24)};
  reqs[0].top_logprobs = 0;
  reqs[1].top_logprobs = 2;
  engine::EngineStats off_stats, on_stats;
  const auto off = serve(config(false, 2), reqs, off_stats);
  const auto on = serve(config(true, 2), reqs, on_stats);
  expect_same(on, off);
  EXPECT_EQ(on_stats.spec_drafted, 0u);
}

TEST(SpecEngine, PreemptionAndAReasoningBudgetKeepTheOutput) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  // A pool too small for four growing sequences (drafts are dropped when their blocks are
  // not free, and sequences are preempted and recomputed), and a request whose reasoning
  // budget forces a closing text in the middle of a repetition the drafts predict.
  std::vector<engine::GenRequest> reqs = {greedy(kRepeat, 40), greedy(kCount, 40), greedy(kRepeat, 36),
                                          greedy(kCount, 36)};
  hearth::tokenizer::EncodeOptions enc;
  enc.add_special = false;
  reqs[3].reasoning.budget = 6;
  reqs[3].reasoning.starts_inside = true;
  reqs[3].reasoning.close_tokens = m.tok.encode("\n</think>\n\n", enc);
  auto small = [](bool spec) {
    engine::EngineConfig c = config(spec, 4);
    c.n_blocks = 14;  // 224 positions for four sequences of about 90
    return c;
  };
  engine::EngineStats off_stats, on_stats;
  const auto off = serve(small(false), reqs, off_stats);
  const auto on = serve(small(true), reqs, on_stats);
  expect_same(on, off);
  EXPECT_GT(off_stats.preemptions, 0u);  // the pool was too small, as meant
  EXPECT_GT(on_stats.spec_accepted, 0u);
  EXPECT_NE(on[3].text.find("</think>"), std::string::npos);
  EXPECT_EQ(on_stats.kv_blocks_used, 0);
}

TEST(SpecGenerate, TheContextLimitEndsAtTheSameToken) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  const std::vector<int32_t> prompt = m.tok.encode(kRepeat);
  std::vector<engine::GenerateResult> out;
  for (bool spec : {false, true}) {
    model::KvCache cache(m.backend, m.model.hparams(), static_cast<int64_t>(prompt.size()) + 21,
                         hearth::ops::KvType::F32);
    engine::GenerateOptions o;
    o.max_tokens = 100;
    o.sampler.temperature = 0.0f;
    if (spec) o.spec.mode = engine::SpecMode::kNgram;
    o.spec.adaptive = false;
    out.push_back(engine::generate(m.model, cache, m.tok, prompt, o, nullptr));
  }
  EXPECT_EQ(out[0].stop_reason, "context");
  EXPECT_EQ(out[1].stop_reason, out[0].stop_reason);
  EXPECT_EQ(out[1].tokens, out[0].tokens);
  EXPECT_EQ(out[1].text, out[0].text);
  EXPECT_GT(out[1].accepted, 0);
}

TEST(SpecEngine, TheMeasuredPolicyKeepsTheOutput) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  // Draft lengths chosen from this machine's step times: which steps draft varies from run
  // to run, the output must not.
  const std::vector<engine::GenRequest> reqs = {greedy(kRepeat, 40), greedy(kCount, 32), greedy(kPlain, 24)};
  engine::EngineConfig on = config(true, 4);
  on.spec.adaptive = true;
  engine::EngineStats off_stats, on_stats;
  const auto a = serve(config(false, 4), reqs, off_stats);
  const auto b = serve(on, reqs, on_stats);
  expect_same(b, a);
  EXPECT_GE(on_stats.spec_drafted, on_stats.spec_accepted);
  EXPECT_EQ(on_stats.kv_blocks_used, 0);
}

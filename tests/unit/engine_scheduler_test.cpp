// The continuous-batching scheduler's decisions, without a model: the forward pass
// is simulated by advancing each planned item's kv.n_past (and, in the randomized
// test, by writing the tokens into a simulated pool so that what a sequence would
// attend to can be checked), then commit(plan), then a "sampled" token is appended
// to every sequence whose item asked for logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "engine/block_manager.h"
#include "engine/scheduler.h"

using hearth::engine::BlockId;
using hearth::engine::BlockManager;
using hearth::engine::Scheduler;
using hearth::engine::SchedulerConfig;
using hearth::engine::SeqSlot;
using hearth::engine::StepItem;
using hearth::engine::StepPlan;

namespace {

std::vector<int32_t> iota_tokens(int n, int32_t base = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = base + i;
  return t;
}

std::unique_ptr<SeqSlot> make_seq(uint64_t id, std::vector<int32_t> prompt) {
  auto s = std::make_unique<SeqSlot>();
  s->id = id;
  s->n_prompt = static_cast<int32_t>(prompt.size());
  s->tokens = std::move(prompt);
  return s;
}

// The simulated forward pass and sampling of one step.
void simulate(Scheduler& sched, const StepPlan& plan, int32_t sampled = 7) {
  for (const StepItem& item : plan.items) item.seq->kv.n_past += item.n_tokens;
  sched.commit(plan);
  for (const StepItem& item : plan.items) {
    if (item.logits) item.seq->tokens.push_back(sampled);
  }
}

const StepItem* item_of(const StepPlan& plan, uint64_t id) {
  for (const StepItem& i : plan.items) {
    if (i.seq->id == id) return &i;
  }
  return nullptr;
}

std::vector<uint64_t> ids(const std::deque<std::unique_ptr<SeqSlot>>& q) {
  std::vector<uint64_t> out;
  for (const auto& s : q) out.push_back(s->id);
  return out;
}
std::vector<uint64_t> ids(const std::vector<std::unique_ptr<SeqSlot>>& v) {
  std::vector<uint64_t> out;
  for (const auto& s : v) out.push_back(s->id);
  return out;
}

// Prompt tokens (not yet computed) in the plan: items of sequences still reading
// their prompt, i.e. whose next token to compute is a prompt token.
int32_t prefill_tokens(const StepPlan& plan) {
  int32_t n = 0;
  for (const StepItem& i : plan.items) {
    if (i.seq->kv.n_past < i.seq->n_prompt) n += i.n_tokens;
  }
  return n;
}

}  // namespace

TEST(Scheduler, RejectsBadConfig) {
  BlockManager bm(8, 4);
  EXPECT_ANY_THROW(Scheduler(SchedulerConfig{0, 8}, bm));
  EXPECT_ANY_THROW(Scheduler(SchedulerConfig{1, 0}, bm));
  Scheduler s(SchedulerConfig{1, 8}, bm);
  EXPECT_ANY_THROW(s.add(make_seq(1, {})));
}

TEST(Scheduler, LonePromptIsPrefilledInChunksWithLogitsOnlyOnTheLast) {
  BlockManager bm(64, 4);
  Scheduler s(SchedulerConfig{4, 8}, bm);
  s.add(make_seq(1, iota_tokens(21)));
  const std::vector<int32_t> want = {8, 8, 5};
  for (size_t k = 0; k < want.size(); ++k) {
    StepPlan p = s.plan();
    ASSERT_EQ(p.items.size(), 1u) << "step " << k;
    EXPECT_EQ(p.items[0].seq->id, 1u);
    EXPECT_EQ(p.items[0].n_tokens, want[k]) << "step " << k;
    EXPECT_EQ(p.items[0].logits, k + 1 == want.size()) << "step " << k;
    EXPECT_GE(p.items[0].seq->kv.capacity(4), p.items[0].seq->kv.n_past + p.items[0].n_tokens);
    EXPECT_TRUE(p.preempted.empty());
    simulate(s, p);
  }
  // Decoding: one token with logits per step.
  for (int k = 0; k < 5; ++k) {
    StepPlan p = s.plan();
    ASSERT_EQ(p.items.size(), 1u);
    EXPECT_EQ(p.items[0].n_tokens, 1);
    EXPECT_TRUE(p.items[0].logits);
    simulate(s, p);
  }
  const SeqSlot* seq = s.find(1);
  ASSERT_NE(seq, nullptr);
  EXPECT_EQ(seq->kv.n_past, 26);
  EXPECT_EQ(seq->tokens.size(), 27u);
  EXPECT_EQ(seq->n_cached, 0);
  // 26 positions computed -> 6 full blocks registered, capacity covers 26.
  EXPECT_EQ(seq->hashes.size(), 6u);
  EXPECT_GE(seq->kv.capacity(4), 26);
  bm.check_invariants();
}

TEST(Scheduler, DecodesKeepFlowingWhileAnotherPromptIsPrefilled) {
  BlockManager bm(64, 4);
  Scheduler s(SchedulerConfig{4, 8}, bm);
  s.add(make_seq(1, iota_tokens(3)));
  s.add(make_seq(2, iota_tokens(4, 500)));
  {
    StepPlan p = s.plan();  // both prompts fit the budget of 8: 3 + 4
    ASSERT_EQ(p.items.size(), 2u);
    EXPECT_EQ(p.items[0].n_tokens, 3);
    EXPECT_EQ(p.items[1].n_tokens, 4);
    EXPECT_TRUE(p.items[0].logits && p.items[1].logits);
    simulate(s, p);
  }
  s.add(make_seq(3, iota_tokens(30, 900)));
  s.add(make_seq(4, iota_tokens(5, 1300)));
  int steps = 0;
  while (s.find(4)->kv.n_past < 5) {
    ASSERT_LT(++steps, 20);
    StepPlan p = s.plan();
    // The two decoding sequences always get exactly one token with logits.
    for (uint64_t id : {1u, 2u}) {
      const StepItem* it = item_of(p, id);
      ASSERT_NE(it, nullptr) << "step " << steps << " seq " << id;
      EXPECT_EQ(it->n_tokens, 1);
      EXPECT_TRUE(it->logits);
    }
    EXPECT_LE(prefill_tokens(p), 8) << "step " << steps;
    if (steps < 5) {
      EXPECT_EQ(prefill_tokens(p), 8) << "step " << steps;  // the budget is used up
    }
    simulate(s, p);
  }
  // 30 + 5 prompt tokens at 8 per step: 5 steps (the short one admitted behind the
  // long one's last chunk).
  EXPECT_EQ(steps, 5);
  EXPECT_EQ(s.find(3)->kv.n_past, 31);  // one decode after its last chunk
  bm.check_invariants();
}

// A prompt with one token left to compute is still a prompt: that token counts
// against the prefill budget, so a prompt admitted in the same step gets one fewer.
TEST(Scheduler, LastPromptTokenCountsAgainstThePrefillBudget) {
  BlockManager bm(64, 4);
  Scheduler s(SchedulerConfig{4, 8}, bm);
  s.add(make_seq(1, iota_tokens(9)));
  {
    StepPlan p = s.plan();
    ASSERT_EQ(p.items.size(), 1u);
    EXPECT_EQ(p.items[0].n_tokens, 8);
    simulate(s, p);
  }
  s.add(make_seq(2, iota_tokens(20, 500)));
  StepPlan p = s.plan();
  ASSERT_EQ(p.items.size(), 2u);
  EXPECT_EQ(p.items[0].n_tokens, 1);
  EXPECT_TRUE(p.items[0].logits);
  EXPECT_EQ(p.items[1].n_tokens, 7);
  EXPECT_EQ(prefill_tokens(p), 8);
}

TEST(Scheduler, MaxSeqsCapsRunningAndTheRestWaitInOrder) {
  BlockManager bm(64, 4);
  Scheduler s(SchedulerConfig{2, 64}, bm);
  for (uint64_t id = 1; id <= 5; ++id) s.add(make_seq(id, iota_tokens(3, static_cast<int32_t>(100 * id))));
  StepPlan p = s.plan();
  EXPECT_EQ(p.items.size(), 2u);
  EXPECT_EQ(ids(s.running()), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(ids(s.waiting()), (std::vector<uint64_t>{3, 4, 5}));
  simulate(s, p);
  p = s.plan();
  EXPECT_EQ(p.items.size(), 2u);  // still capped
  simulate(s, p);
  ASSERT_NE(s.finish(2), nullptr);
  p = s.plan();
  EXPECT_EQ(ids(s.running()), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(ids(s.waiting()), (std::vector<uint64_t>{4, 5}));
  ASSERT_NE(item_of(p, 3), nullptr);
  EXPECT_EQ(item_of(p, 3)->n_tokens, 3);
  EXPECT_EQ(item_of(p, 1)->n_tokens, 1);
  simulate(s, p);
}

TEST(Scheduler, AdmissionStopsInOrderWhenBlocksRunOutAndResumes) {
  BlockManager bm(7, 4);
  Scheduler s(SchedulerConfig{8, 64}, bm);
  s.add(make_seq(1, iota_tokens(10, 100)));  // 3 blocks
  s.add(make_seq(2, iota_tokens(10, 200)));  // 3 blocks
  s.add(make_seq(3, iota_tokens(8, 300)));   // 2 blocks: only 1 left
  s.add(make_seq(4, iota_tokens(2, 400)));   // 1 block would fit, but 3 is first
  StepPlan p = s.plan();
  EXPECT_EQ(ids(s.running()), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(ids(s.waiting()), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(bm.n_used(), 6);
  EXPECT_EQ(bm.n_free(), 1);  // the failed admission gave its block back
  EXPECT_TRUE(s.find(3)->kv.blocks.empty());
  simulate(s, p);
  p = s.plan();  // decodes of 1 and 2 fit their blocks; nothing new is admitted
  EXPECT_EQ(p.items.size(), 2u);
  EXPECT_EQ(ids(s.waiting()), (std::vector<uint64_t>{3, 4}));
  simulate(s, p);
  ASSERT_NE(s.finish(1), nullptr);
  p = s.plan();
  EXPECT_EQ(ids(s.running()), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_TRUE(s.waiting().empty());
  simulate(s, p);
  bm.check_invariants();
}

TEST(Scheduler, PrefixReuseSharesFullBlocksAndComputesTheRest) {
  BlockManager bm(32, 4);
  Scheduler s(SchedulerConfig{4, 64}, bm);
  const std::vector<int32_t> prompt = iota_tokens(10);  // 2 full blocks + 2 tokens
  s.add(make_seq(1, prompt));
  simulate(s, s.plan());
  ASSERT_EQ(s.find(1)->hashes.size(), 2u);

  s.add(make_seq(2, prompt));
  StepPlan p = s.plan();
  const StepItem* it = item_of(p, 2);
  ASSERT_NE(it, nullptr);
  const SeqSlot& a = *s.find(1);
  const SeqSlot& b = *s.find(2);
  EXPECT_EQ(b.n_cached, 8);
  EXPECT_EQ(b.kv.n_past, 8);
  EXPECT_EQ(it->n_tokens, 2);
  EXPECT_TRUE(it->logits);
  ASSERT_GE(b.kv.blocks.size(), 3u);
  EXPECT_EQ(b.kv.blocks[0], a.kv.blocks[0]);
  EXPECT_EQ(b.kv.blocks[1], a.kv.blocks[1]);
  EXPECT_NE(b.kv.blocks[2], a.kv.blocks[2]);  // the partial block is never shared
  EXPECT_EQ(bm.meta(a.kv.blocks[0]).ref, 2);
  EXPECT_EQ(bm.meta(a.kv.blocks[1]).ref, 2);
  EXPECT_EQ(bm.meta(a.kv.blocks[2]).ref, 1);
  EXPECT_EQ(b.hashes, std::vector<uint64_t>(a.hashes.begin(), a.hashes.begin() + 2));
  simulate(s, p);

  // After both finish the full blocks stay cached; a third copy still hits.
  s.finish(1);
  s.finish(2);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.n_free(), 32);
  EXPECT_GE(bm.n_cached(), 2);
  s.add(make_seq(3, prompt));
  p = s.plan();
  EXPECT_EQ(s.find(3)->n_cached, 8);
  EXPECT_EQ(item_of(p, 3)->n_tokens, 2);
  bm.check_invariants();
}

TEST(Scheduler, PrefixReuseOfAPromptThatIsAWholeNumberOfBlocks) {
  BlockManager bm(32, 4);
  Scheduler s(SchedulerConfig{4, 64}, bm);
  const std::vector<int32_t> prompt = iota_tokens(12);  // exactly 3 blocks
  s.add(make_seq(1, prompt));
  simulate(s, s.plan());
  ASSERT_EQ(s.find(1)->hashes.size(), 3u);
  s.add(make_seq(2, prompt));
  StepPlan p = s.plan();
  // The last token's logits are needed and the last block cannot be written while
  // shared: 2 blocks reused, the third block's 4 tokens computed again.
  EXPECT_EQ(s.find(2)->n_cached, 8);
  ASSERT_NE(item_of(p, 2), nullptr);
  EXPECT_EQ(item_of(p, 2)->n_tokens, 4);
  EXPECT_TRUE(item_of(p, 2)->logits);
  EXPECT_NE(s.find(2)->kv.blocks[2], s.find(1)->kv.blocks[2]);
  simulate(s, p);
  bm.check_invariants();  // the duplicate third block stays unregistered

  // A one-block prompt reuses nothing.
  s.add(make_seq(3, iota_tokens(4)));
  p = s.plan();
  EXPECT_EQ(s.find(3)->n_cached, 0);
  EXPECT_EQ(item_of(p, 3)->n_tokens, 4);
}

TEST(Scheduler, PreemptsTheYoungestWhenDecodeRunsOutOfBlocks) {
  BlockManager bm(4, 4);
  Scheduler s(SchedulerConfig{2, 64}, bm);
  s.add(make_seq(1, iota_tokens(6, 100)));
  s.add(make_seq(2, iota_tokens(6, 200)));
  s.add(make_seq(3, iota_tokens(2, 300)));  // waits: max_seqs
  simulate(s, s.plan(), 11);                // both prefilled, one token sampled each
  simulate(s, s.plan(), 12);                // n_past 7
  simulate(s, s.plan(), 13);                // n_past 8: both sequences' 2 blocks are full
  ASSERT_EQ(bm.n_free(), 0);
  const BlockId seq2_block0 = s.find(2)->kv.blocks[0];

  StepPlan p = s.plan();  // seq 1 needs a third block: seq 2 goes
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{2});
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].seq->id, 1u);
  EXPECT_EQ(p.items[0].n_tokens, 1);
  EXPECT_EQ(ids(s.running()), std::vector<uint64_t>{1});
  EXPECT_EQ(ids(s.waiting()), (std::vector<uint64_t>{2, 3}));  // back at the front
  const SeqSlot& two = *s.find(2);
  EXPECT_EQ(two.n_preempted, 1);
  EXPECT_EQ(two.kv.n_past, 0);
  EXPECT_TRUE(two.kv.blocks.empty());
  EXPECT_EQ(two.tokens.size(), 9u);  // prompt and the three samples are kept
  EXPECT_EQ(two.tokens.back(), 13);
  simulate(s, p, 14);
  bm.check_invariants();

  s.finish(1);
  p = s.plan();
  ASSERT_NE(item_of(p, 2), nullptr);
  EXPECT_EQ(s.running().front()->id, 2u);
  // Its first block was still cached and is reused; the rest is recomputed, up to
  // and including the last sample (whose logits give the next token).
  EXPECT_EQ(s.find(2)->kv.blocks[0], seq2_block0);
  EXPECT_EQ(s.find(2)->kv.n_past, 4);
  EXPECT_EQ(item_of(p, 2)->n_tokens, 5);
  EXPECT_TRUE(item_of(p, 2)->logits);
  EXPECT_EQ(s.find(2)->n_cached, 0);  // first admission's figure, unchanged
  simulate(s, p);
  bm.check_invariants();
}

// The youngest sequence needing a block when only older ones hold them preempts
// itself; the older keep decoding and later take its cached block.
TEST(Scheduler, TheYoungestPreemptsItselfWhenOnlyOlderOnesHoldBlocks) {
  BlockManager bm(4, 4);
  Scheduler s(SchedulerConfig{4, 64}, bm);
  s.add(make_seq(1, iota_tokens(10, 100)));  // 3 blocks, room up to 12 positions
  s.add(make_seq(2, iota_tokens(3, 200)));   // 1 block
  simulate(s, s.plan());                     // A: 10 computed, B: 3
  simulate(s, s.plan());                     // A: 11, B: 4 (B's block is full)
  StepPlan p = s.plan();                     // B needs a second block: none
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{2});
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(p.items[0].seq->id, 1u);
  EXPECT_EQ(ids(s.waiting()), std::vector<uint64_t>{2});
  EXPECT_TRUE(s.find(2)->kv.blocks.empty());  // the readmission this step failed and let go
  simulate(s, p);
  bm.check_invariants();
  p = s.plan();  // A needs a fourth block: B's cached one is evicted for it
  EXPECT_TRUE(p.preempted.empty());
  ASSERT_EQ(p.items.size(), 1u);
  EXPECT_EQ(s.find(1)->kv.blocks.size(), 4u);
  EXPECT_EQ(bm.n_cached(), 0);
  simulate(s, p);
  s.finish(1);
  p = s.plan();  // B recomputes everything: its cached block is gone
  ASSERT_NE(item_of(p, 2), nullptr);
  EXPECT_EQ(item_of(p, 2)->n_tokens, 5);
  EXPECT_TRUE(item_of(p, 2)->logits);
  bm.check_invariants();
}

TEST(Scheduler, FinishOfWaitingAndRunningSequencesReleasesEveryBlock) {
  BlockManager bm(16, 4);
  Scheduler s(SchedulerConfig{2, 64}, bm);
  s.add(make_seq(1, iota_tokens(9, 100)));
  s.add(make_seq(2, iota_tokens(9, 100)));  // shares blocks with 1 once registered
  s.add(make_seq(3, iota_tokens(5, 300)));
  simulate(s, s.plan());
  simulate(s, s.plan());
  EXPECT_GT(bm.n_used(), 0);
  EXPECT_EQ(s.finish(42), nullptr);
  auto three = s.finish(3);  // waiting
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(three->id, 3u);
  EXPECT_TRUE(s.waiting().empty());
  ASSERT_NE(s.finish(1), nullptr);
  ASSERT_NE(s.finish(2), nullptr);
  EXPECT_TRUE(s.running().empty());
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.n_free(), bm.n_blocks());
  EXPECT_TRUE(s.plan().empty());
  bm.check_invariants();
}

// Many sequences with shared prefixes, a small pool (so admissions fail and
// decodes preempt), random finishes. The forward pass writes each computed token
// into a simulated pool; every step checks that each planned sequence's blocks hold
// exactly its own tokens at every position it has computed (what attention would
// read), that no written block is shared, and the bookkeeping invariants.
// swap: a swap policy picks swap or recompute at random for each preemption; the
// simulated engine copies StepPlan::swap_out's blocks to a host map and swap_in's back,
// and the same content check proves a swapped-in sequence finds its own tokens.
void randomized_run(bool swap) {
  constexpr int32_t kBs = 4, kBlocks = 14, kChunk = 10;
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    BlockManager bm(kBlocks, kBs);
    Scheduler s(SchedulerConfig{4, kChunk}, bm);
    std::vector<std::vector<int32_t>> pool(kBlocks, std::vector<int32_t>(kBs, -1));
    std::map<uint64_t, std::vector<std::vector<int32_t>>> host;  // swapped sequences' blocks, by id
    int swaps_in = 0;
    if (swap) s.set_swap_policy([&](const SeqSlot&) { return std::uniform_int_distribution<int>(0, 1)(rng) == 0; });
    std::vector<std::vector<int32_t>> bases;
    for (int b = 0; b < 3; ++b) bases.push_back(iota_tokens(12, 1000 * (b + 1)));
    std::vector<std::pair<uint64_t, int>> budget;  // id -> tokens to generate
    uint64_t next_id = 1;
    int preemptions = 0, finished = 0;
    auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int step = 0; step < 600; ++step) {
      if (step < 450 && s.waiting().size() < 6 && rnd(0, 2) == 0) {
        std::vector<int32_t> prompt = bases[static_cast<size_t>(rnd(0, 2))];
        prompt.resize(static_cast<size_t>(rnd(1, 12)));
        for (int k = rnd(0, 8); k > 0; --k) prompt.push_back(rnd(0, 50));
        budget.emplace_back(next_id, rnd(1, 14));  // prompt + generated <= 34 <= 56 positions
        s.add(make_seq(next_id++, std::move(prompt)));
      }
      StepPlan p = s.plan();
      preemptions += static_cast<int>(p.preempted.size());
      for (const hearth::engine::SwapCopy& c : p.swap_out) {
        ASSERT_TRUE(swap);
        ASSERT_EQ(c.first, 0);
        ASSERT_EQ(static_cast<int64_t>(c.blocks.size()), (c.n_past + kBs - 1) / kBs);
        auto& h = host[c.seq];
        h.clear();
        for (BlockId b : c.blocks) h.push_back(pool[static_cast<size_t>(b)]);
      }
      for (const hearth::engine::SwapCopy& c : p.swap_in) {
        auto h = host.find(c.seq);
        ASSERT_NE(h, host.end()) << "swap-in of a sequence never swapped out";
        ASSERT_EQ(c.first + c.blocks.size(), h->second.size());
        ASSERT_EQ(s.find(c.seq)->kv.n_past, c.n_past);  // goes on where it was
        for (size_t i = 0; i < c.blocks.size(); ++i) pool[static_cast<size_t>(c.blocks[i])] = h->second[c.first + i];
        host.erase(h);
        ++swaps_in;
      }
      int32_t prefill = 0;
      std::set<uint64_t> planned;
      for (const StepItem& it : p.items) {
        SeqSlot& q = *it.seq;
        ASSERT_TRUE(planned.insert(q.id).second) << "a sequence twice in one step";
        ASSERT_GT(it.n_tokens, 0);
        ASSERT_LE(q.kv.n_past + it.n_tokens, static_cast<int64_t>(q.tokens.size()));
        ASSERT_EQ(it.logits, q.kv.n_past + it.n_tokens == static_cast<int64_t>(q.tokens.size()));
        ASSERT_GE(q.kv.capacity(kBs), q.kv.n_past + it.n_tokens);
        const bool decode = q.pending() == 1 && static_cast<int32_t>(q.tokens.size()) > q.n_prompt;
        if (!decode) prefill += it.n_tokens;
        // Simulated forward: write, then check everything the sequence attends to.
        for (int64_t pos = q.kv.n_past; pos < q.kv.n_past + it.n_tokens; ++pos) {
          const BlockId b = q.kv.blocks[static_cast<size_t>(pos / kBs)];
          ASSERT_EQ(bm.meta(b).ref, 1) << "writing into a shared block " << b;
          pool[static_cast<size_t>(b)][static_cast<size_t>(pos % kBs)] = q.tokens[static_cast<size_t>(pos)];
        }
        for (int64_t pos = 0; pos < q.kv.n_past + it.n_tokens; ++pos) {
          const BlockId b = q.kv.blocks[static_cast<size_t>(pos / kBs)];
          ASSERT_EQ(pool[static_cast<size_t>(b)][static_cast<size_t>(pos % kBs)], q.tokens[static_cast<size_t>(pos)])
              << "seq " << q.id << " position " << pos;
        }
      }
      ASSERT_LE(prefill, kChunk);
      // Every running sequence whose next token is a sampled one decodes this step.
      for (const auto& r : s.running()) {
        if (r->pending() == 1 && static_cast<int32_t>(r->tokens.size()) > r->n_prompt) {
          ASSERT_TRUE(planned.count(r->id)) << "decode of " << r->id << " skipped";
        }
      }
      for (const StepItem& it : p.items) it.seq->kv.n_past += it.n_tokens;
      s.commit(p);
      std::vector<uint64_t> done;
      for (const StepItem& it : p.items) {
        if (!it.logits) continue;
        SeqSlot& q = *it.seq;
        q.tokens.push_back(static_cast<int32_t>((q.tokens.back() * 31 + 7) % 50));
        auto b = std::find_if(budget.begin(), budget.end(), [&](const auto& e) { return e.first == q.id; });
        ASSERT_NE(b, budget.end());
        if (static_cast<int32_t>(q.tokens.size()) - q.n_prompt >= b->second) done.push_back(q.id);
      }
      if (!s.running().empty() && rnd(0, 20) == 0) done.push_back(s.running()[static_cast<size_t>(rnd(0, static_cast<int>(s.running().size()) - 1))]->id);
      if (!s.waiting().empty() && rnd(0, 30) == 0) done.push_back(s.waiting().back()->id);
      for (uint64_t id : done) {
        if (s.finish(id)) ++finished;
      }
      bm.check_invariants();
      for (const auto& r : s.running()) {
        ASSERT_GE(r->kv.capacity(kBs), r->kv.n_past);
        std::set<BlockId> mine(r->kv.blocks.begin(), r->kv.blocks.end());
        ASSERT_EQ(mine.size(), r->kv.blocks.size()) << "seq " << r->id << " holds a block twice";
        for (BlockId b : r->kv.blocks) ASSERT_GT(bm.meta(b).ref, 0);
        ASSERT_EQ(r->hashes.size(), static_cast<size_t>(r->kv.n_past / kBs));
      }
      for (const auto& w : s.waiting()) {
        ASSERT_TRUE(w->kv.blocks.empty());
        ASSERT_EQ(w->kv.n_past, 0);
      }
      if (step >= 450 && s.running().empty() && s.waiting().empty()) break;
    }
    EXPECT_TRUE(s.running().empty());
    EXPECT_TRUE(s.waiting().empty());
    EXPECT_EQ(bm.n_used(), 0);
    EXPECT_EQ(bm.n_free(), kBlocks);
    EXPECT_GT(preemptions, 0) << "the pool should be small enough to preempt";
    EXPECT_GT(bm.prefix_hit_tokens(), 0u);
    EXPECT_GT(finished, 20);
    if (swap) EXPECT_GT(swaps_in, 0);
  }
}

TEST(Scheduler, RandomizedRunKeepsInvariantsAndKvContents) { randomized_run(false); }

TEST(Scheduler, RandomizedRunWithSwappingKeepsInvariantsAndKvContents) { randomized_run(true); }

// A head of queue that waits for blocks step after step is counted in the prefix-cache
// statistics once, when it is admitted, not at every attempt.
TEST(Scheduler, WaitingForBlocksDoesNotRecountPrefixQueries) {
  BlockManager blocks(6, 4);
  Scheduler sched(SchedulerConfig{4, 64}, blocks);
  sched.add(make_seq(1, iota_tokens(20)));  // 5 blocks
  simulate(sched, sched.plan());
  EXPECT_EQ(blocks.prefix_query_tokens(), 20u);
  sched.add(make_seq(2, iota_tokens(12, 500)));  // 3 blocks: only 1 left
  for (int step = 0; step < 5; ++step) {
    const StepPlan plan = sched.plan();
    EXPECT_EQ(item_of(plan, 2), nullptr);
    simulate(sched, plan);
  }
  EXPECT_EQ(blocks.prefix_query_tokens(), 20u);
  sched.finish(1);
  const StepPlan plan = sched.plan();
  ASSERT_NE(item_of(plan, 2), nullptr);
  EXPECT_EQ(blocks.prefix_query_tokens(), 32u);
}

// ---- Hybrid (recurrent) models: state slots and snapshots ----

namespace {

SchedulerConfig recurrent_config(int32_t max_seqs, int32_t n_snapshots, int32_t chunk = 512, int32_t step_snaps = 4) {
  SchedulerConfig c;
  c.max_step_snapshots = step_snaps;
  c.max_seqs = max_seqs;
  c.prefill_chunk = chunk;
  c.recurrent = true;
  c.n_snapshots = n_snapshots;
  c.snapshot_every = 64;
  c.snapshot_gap = 32;
  return c;
}

using hearth::engine::StateOp;

// Runs steps until the sequence has produced `n_gen` tokens; returns the snapshot copies.
std::vector<StateOp> run_until(Scheduler& sched, SeqSlot* seq, int32_t n_gen, std::vector<int64_t>* chunk_ends = nullptr) {
  std::vector<StateOp> ops;
  while (static_cast<int32_t>(seq->tokens.size()) < seq->n_prompt + n_gen) {
    StepPlan plan = sched.plan();
    for (const StepItem& item : plan.items) {
      item.seq->kv.n_past += item.n_tokens;
      if (chunk_ends != nullptr && item.seq == seq) chunk_ends->push_back(item.seq->kv.n_past);
    }
    const auto c = sched.commit(plan);
    ops.insert(ops.end(), c.begin(), c.end());
    for (const StepItem& item : plan.items) {
      if (item.logits) item.seq->tokens.push_back(7);
    }
  }
  return ops;
}

}  // namespace

TEST(SchedulerRecurrent, ChunksEndAtSnapshotPointsAndSnapshotsAttachToTheirBlocks) {
  BlockManager bm(64, 16);
  Scheduler sched(recurrent_config(2, 8, 512, 0), bm);  // no snapshots inside a step
  auto s = make_seq(1, iota_tokens(150));
  s->boundaries = {5, 20, 40, 100};  // aligned: 0 (skipped), 16 (gap < 32: skipped), 32, 96
  SeqSlot* seq = s.get();
  sched.add(std::move(s));
  // Points: 32 and 96 (boundaries), 64 and 128 (every 64), 144 (the last boundary before token 149).
  EXPECT_EQ(seq->snapshot_points, (std::vector<int32_t>{32, 64, 96, 128, 144}));
  StepPlan first = sched.plan();
  ASSERT_EQ(first.state_before.size(), 1u);
  EXPECT_EQ(first.state_before[0].src, -1);  // a fresh sequence starts from a cleared state
  EXPECT_EQ(first.state_before[0].dst, seq->kv.state_slot);
  EXPECT_GE(seq->kv.state_slot, 0);
  EXPECT_LT(seq->kv.state_slot, 2);
  first.items[0].seq->kv.n_past += first.items[0].n_tokens;
  std::vector<int64_t> ends = {seq->kv.n_past};
  auto ops = sched.commit(first);
  for (const StepItem& item : first.items) {
    if (item.logits) item.seq->tokens.push_back(7);
  }
  const auto more = run_until(sched, seq, 20, &ends);
  ops.insert(ops.end(), more.begin(), more.end());
  // The prompt in chunks cut at every point, then decode.
  EXPECT_EQ(std::vector<int64_t>(ends.begin(), ends.begin() + 6), (std::vector<int64_t>{32, 64, 96, 128, 144, 150}));
  // Snapshots at the five prompt points and at the decode boundary 160 (rolling).
  ASSERT_EQ(ops.size(), 6u);
  for (const StateOp& op : ops) EXPECT_EQ(op.src, seq->kv.state_slot);
  for (int64_t p : {32, 64, 96, 128, 144, 160}) {
    EXPECT_GE(bm.meta(seq->kv.blocks[static_cast<size_t>(p / 16 - 1)]).snapshot, 2) << p;
  }
  EXPECT_EQ(sched.n_snapshots_held(), 6);
}

// Points inside a chunk become snapshots the model takes within the step (up to
// max_step_snapshots; the chunk ends at the next point), attached at commit().
TEST(SchedulerRecurrent, SnapshotPointsInsideAChunkCostNoStep) {
  BlockManager bm(64, 16);
  Scheduler sched(recurrent_config(2, 8, 512, 3), bm);
  auto s = make_seq(1, iota_tokens(150));
  s->boundaries = {5, 20, 40, 100};
  SeqSlot* seq = s.get();
  sched.add(std::move(s));
  ASSERT_EQ(seq->snapshot_points, (std::vector<int32_t>{32, 64, 96, 128, 144}));
  StepPlan first = sched.plan();
  ASSERT_EQ(first.items.size(), 1u);
  // 32, 64, 96 inside; the chunk ends at the fourth point, 128.
  EXPECT_EQ(first.items[0].n_tokens, 128);
  ASSERT_EQ(first.items[0].snaps.size(), 3u);
  std::set<int32_t> slots;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(first.items[0].snaps[i].after, 32 * static_cast<int32_t>(i + 1));
    EXPECT_GE(first.items[0].snaps[i].slot, 2);  // snapshot slots come after the live ones
    EXPECT_TRUE(slots.insert(first.items[0].snaps[i].slot).second);
  }
  first.items[0].seq->kv.n_past += first.items[0].n_tokens;
  auto ops = sched.commit(first);
  ASSERT_EQ(ops.size(), 1u);  // only the chunk's end is the engine's copy
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(bm.meta(seq->kv.blocks[static_cast<size_t>(2 * i + 1)]).snapshot, first.items[0].snaps[i].slot);
  }
  EXPECT_EQ(bm.meta(seq->kv.blocks[7]).snapshot, ops[0].dst);
  EXPECT_EQ(sched.n_snapshots_held(), 4);
  StepPlan second = sched.plan();
  ASSERT_EQ(second.items.size(), 1u);
  EXPECT_EQ(second.items[0].n_tokens, 150 - 128);  // 144 inside, to the prompt's end
  ASSERT_EQ(second.items[0].snaps.size(), 1u);
  EXPECT_EQ(second.items[0].snaps[0].after, 16);
  EXPECT_TRUE(second.items[0].logits);
  second.items[0].seq->kv.n_past += second.items[0].n_tokens;
  EXPECT_TRUE(sched.commit(second).empty());
  EXPECT_EQ(bm.meta(seq->kv.blocks[8]).snapshot, second.items[0].snaps[0].slot);
  EXPECT_EQ(sched.n_snapshots_held(), 5);
  bm.check_invariants();
}

// A plan whose forward pass failed never reaches commit(): its inside snapshots' slots
// return at the next plan.
TEST(SchedulerRecurrent, InsideSnapshotSlotsComeBackWhenUnused) {
  BlockManager bm(64, 16);
  Scheduler sched(recurrent_config(1, 2), bm);
  auto s = make_seq(1, iota_tokens(100));
  SeqSlot* seq = s.get();
  sched.add(std::move(s));
  StepPlan lost = sched.plan();  // points 64 and 96 inside: both slots taken
  ASSERT_EQ(lost.items.size(), 1u);
  ASSERT_EQ(lost.items[0].snaps.size(), 2u);
  sched.finish(1);
  auto again = make_seq(2, iota_tokens(100));
  seq = again.get();
  sched.add(std::move(again));
  StepPlan plan = sched.plan();
  ASSERT_EQ(plan.items.size(), 1u);
  ASSERT_EQ(plan.items[0].snaps.size(), 2u);  // the slots came back
  seq->kv.n_past += plan.items[0].n_tokens;
  sched.commit(plan);
  EXPECT_EQ(sched.n_snapshots_held(), 2);
  bm.check_invariants();
}

TEST(SchedulerRecurrent, ASecondRequestResumesFromTheDeepestMatchedSnapshot) {
  BlockManager bm(64, 16);
  Scheduler sched(recurrent_config(2, 8), bm);
  auto a = make_seq(1, iota_tokens(100));
  SeqSlot* sa = a.get();
  sched.add(std::move(a));
  run_until(sched, sa, 1);
  sched.finish(1);
  // Shares the first 90 tokens: matched full blocks cover 0..80; the deepest snapshot
  // inside is at 64 (every 64), so the blocks after it are let go and 64 are cached.
  std::vector<int32_t> t = iota_tokens(90);
  for (int i = 0; i < 30; ++i) t.push_back(900 + i);
  auto b = make_seq(2, t);
  SeqSlot* sb = b.get();
  sched.add(std::move(b));
  StepPlan plan = sched.plan();
  ASSERT_EQ(plan.items.size(), 1u);
  EXPECT_EQ(sb->kv.n_past, 64);
  EXPECT_EQ(sb->n_cached, 64);
  ASSERT_EQ(plan.state_before.size(), 1u);
  EXPECT_EQ(plan.state_before[0].src, bm.meta(sb->kv.blocks[3]).snapshot);
  EXPECT_EQ(plan.state_before[0].dst, sb->kv.state_slot);
  EXPECT_EQ(plan.items[0].n_tokens, 120 - 64);  // to its end, with its own point 112 inside
  ASSERT_EQ(plan.items[0].snaps.size(), 1u);
  EXPECT_EQ(plan.items[0].snaps[0].after, 112 - 64);
}

TEST(SchedulerRecurrent, SnapshotSlotsAreRecycledLeastRecentlyUsedAndWithEvictedBlocks) {
  BlockManager bm(12, 16);
  Scheduler sched(recurrent_config(1, 2), bm);
  // Three prompts of 100 tokens: points 64 and 96 each; only two snapshot slots.
  for (uint64_t id = 1; id <= 3; ++id) {
    auto s = make_seq(id, iota_tokens(100, static_cast<int32_t>(1000 * id)));
    SeqSlot* p = s.get();
    sched.add(std::move(s));
    run_until(sched, p, 1);
    sched.finish(id);
    EXPECT_LE(sched.n_snapshots_held(), 2);
  }
  // Every held snapshot is attached to exactly one block, and no two share a slot.
  std::set<int32_t> seen;
  for (BlockId b = 0; b < 12; ++b) {
    const int32_t s = bm.meta(b).snapshot;
    if (s < 0) continue;
    EXPECT_TRUE(bm.meta(b).hashed);
    EXPECT_TRUE(seen.insert(s).second) << "slot " << s << " attached twice";
  }
  EXPECT_EQ(static_cast<int32_t>(seen.size()), sched.n_snapshots_held());
  bm.check_invariants();
}

TEST(SchedulerRecurrent, PreemptedSequenceGivesBackItsLiveSlot) {
  BlockManager bm(8, 16);
  Scheduler sched(recurrent_config(2, 2, 64), bm);
  auto a = make_seq(1, iota_tokens(60));
  auto b = make_seq(2, iota_tokens(60, 5000));
  SeqSlot* sa = a.get();
  sched.add(std::move(a));
  sched.add(std::move(b));
  std::set<int32_t> live;
  for (int step = 0; step < 40; ++step) {
    StepPlan plan = sched.plan();
    for (const StateOp& op : plan.state_before) EXPECT_LT(op.dst, 2);
    live.clear();
    for (const auto& r : sched.running()) EXPECT_TRUE(live.insert(r->kv.state_slot).second);
    simulate(sched, plan);
    if (sa->tokens.size() > 120) break;
  }
  for (const auto& r : sched.running()) EXPECT_GE(r->kv.state_slot, 0);
}

// The prefix-cache hit of an admission is the matched prefix only, never the blocks
// allocated for the chunk computed next (hits can never exceed queries).
TEST(Scheduler, PrefixHitsCountOnlyMatchedBlocks) {
  BlockManager blocks(16, 4);
  Scheduler s(SchedulerConfig{4, 64}, blocks);
  s.add(make_seq(1, iota_tokens(10)));  // cold: nothing cached
  simulate(s, s.plan());
  EXPECT_EQ(blocks.prefix_query_tokens(), 10u);
  EXPECT_EQ(blocks.prefix_hit_tokens(), 0u);
  s.add(make_seq(2, iota_tokens(10)));  // its first two blocks are cached now
  simulate(s, s.plan());
  EXPECT_EQ(blocks.prefix_query_tokens(), 20u);
  EXPECT_EQ(blocks.prefix_hit_tokens(), 8u);
}

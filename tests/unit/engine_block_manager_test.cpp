#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "core/error.h"
#include "engine/block_manager.h"

using hearth::Error;
using hearth::ErrorKind;
using hearth::engine::BlockId;
using hearth::engine::BlockManager;
using hearth::engine::kNoBlock;

namespace {

constexpr int32_t kBs = 4;

// n_blocks * kBs tokens: block i holds base + 4i .. base + 4i + 3.
std::vector<int32_t> seq(int n_blocks, int32_t base = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n_blocks * kBs));
  for (size_t i = 0; i < t.size(); ++i) t[i] = base + static_cast<int32_t>(i);
  return t;
}

std::span<const int32_t> block_of(const std::vector<int32_t>& t, int i) {
  return std::span<const int32_t>(t).subspan(static_cast<size_t>(i * kBs), kBs);
}

// A sequence's blocks for `tokens`: allocated, committed in order, still held.
std::vector<BlockId> fill(BlockManager& bm, const std::vector<int32_t>& tokens) {
  std::vector<BlockId> ids;
  uint64_t parent = 0;
  for (int i = 0; i < static_cast<int>(tokens.size()) / kBs; ++i) {
    const BlockId id = bm.allocate();
    EXPECT_NE(id, kNoBlock);
    parent = bm.commit_full(id, parent, block_of(tokens, i));
    ids.push_back(id);
  }
  return ids;
}

void release_all(BlockManager& bm, const std::vector<BlockId>& ids) {
  for (BlockId id : ids) bm.release(id);
}

}  // namespace

TEST(BlockManager, AllocatesLowIdsFirstUntilExhausted) {
  BlockManager bm(3, kBs);
  EXPECT_EQ(bm.n_blocks(), 3);
  EXPECT_EQ(bm.block_size(), kBs);
  EXPECT_EQ(bm.n_free(), 3);
  EXPECT_EQ(bm.allocate(), 0);
  EXPECT_EQ(bm.allocate(), 1);
  EXPECT_EQ(bm.allocate(), 2);
  EXPECT_EQ(bm.allocate(), kNoBlock);
  EXPECT_EQ(bm.n_free(), 0);
  EXPECT_EQ(bm.n_used(), 3);
  EXPECT_EQ(bm.meta(1).ref, 1);
  bm.check_invariants();
}

TEST(BlockManager, ReleaseReturnsUnhashedBlocksToTheFreeList) {
  BlockManager bm(2, kBs);
  const BlockId a = bm.allocate(), b = bm.allocate();
  EXPECT_EQ(bm.allocate(), kNoBlock);
  bm.release(a);
  EXPECT_EQ(bm.n_free(), 1);
  EXPECT_EQ(bm.n_cached(), 0);
  EXPECT_EQ(bm.n_used(), 1);
  EXPECT_EQ(bm.allocate(), a);
  bm.release(a);
  bm.release(b);
  EXPECT_EQ(bm.n_free(), 2);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.evictions(), 0u);
  bm.check_invariants();
}

TEST(BlockManager, EmptyPoolNeverAllocates) {
  BlockManager bm(0, kBs);
  EXPECT_EQ(bm.allocate(), kNoBlock);
  EXPECT_TRUE(bm.match_prefix(seq(2), 8).blocks.empty());
  EXPECT_THROW(BlockManager(4, 0), Error);
  EXPECT_THROW(BlockManager(-1, kBs), Error);
}

TEST(BlockManager, ReleasedHashedBlocksStayCached) {
  BlockManager bm(4, kBs);
  const auto ids = fill(bm, seq(2));
  release_all(bm, ids);
  EXPECT_EQ(bm.n_cached(), 2);
  EXPECT_EQ(bm.n_free(), 4);  // cached blocks count as allocatable
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_TRUE(bm.meta(ids[0]).hashed);
  bm.check_invariants();
}

TEST(BlockManager, ForgottenBlocksAreFreedNotCached) {
  BlockManager bm(4, kBs);
  const auto tokens = seq(2);
  const auto ids = fill(bm, tokens);
  bm.retain(ids[0]);  // another sequence shares the first block
  bm.attach_snapshot(ids[1], 7);
  for (BlockId id : ids) bm.release(id, /*forget=*/true);
  // The shared block is still held; the other is free, unhashed, its snapshot handed back.
  EXPECT_EQ(bm.n_used(), 1);
  EXPECT_EQ(bm.n_cached(), 0);
  EXPECT_FALSE(bm.meta(ids[1]).hashed);
  EXPECT_EQ(bm.take_dropped_snapshots(), std::vector<int32_t>{7});
  bm.check_invariants();
  // Released normally, the shared block stays cached; the forgotten one is never matched.
  bm.release(ids[0]);
  EXPECT_EQ(bm.n_cached(), 1);
  const auto m = bm.match_prefix(tokens, 2);
  EXPECT_EQ(m.blocks, std::vector<BlockId>{ids[0]});
  bm.check_invariants();
}

TEST(BlockManager, PrefixMatchOfNoneOnePartialAndAllBlocks) {
  BlockManager bm(8, kBs);
  const auto t = seq(3);
  const auto ids = fill(bm, t);
  release_all(bm, ids);

  // No block: a different first block, and a prompt shorter than one block.
  auto other = t;
  other[1] = 7;
  EXPECT_TRUE(bm.match_prefix(other, 8).blocks.empty());
  EXPECT_TRUE(
      bm.match_prefix(std::vector<int32_t>(t.begin(), t.begin() + kBs - 1), 8).blocks.empty());

  // One block: the second block differs in its last token.
  auto one = t;
  one[2 * kBs - 1] = -5;
  auto m1 = bm.match_prefix(one, 8);
  ASSERT_EQ(m1.blocks.size(), 1u);
  EXPECT_EQ(m1.blocks[0], ids[0]);
  release_all(bm, m1.blocks);

  // Partial: all three match but max_blocks caps it; then only complete blocks count.
  auto m2 = bm.match_prefix(t, 2);
  EXPECT_EQ(m2.blocks, (std::vector<BlockId>{ids[0], ids[1]}));
  release_all(bm, m2.blocks);
  std::vector<int32_t> two_and_a_half(t.begin(), t.begin() + 2 * kBs + 2);
  auto m3 = bm.match_prefix(two_and_a_half, 8);
  EXPECT_EQ(m3.blocks.size(), 2u);
  release_all(bm, m3.blocks);

  // All: the whole prompt plus a tail that is not a full block.
  auto longer = t;
  longer.push_back(1);
  auto m4 = bm.match_prefix(longer, 8);
  EXPECT_EQ(m4.blocks, ids);
  ASSERT_EQ(m4.hashes.size(), 3u);
  EXPECT_EQ(m4.hashes[0], BlockManager::chain_hash(0, block_of(t, 0)));
  EXPECT_EQ(m4.hashes[2], BlockManager::chain_hash(m4.hashes[1], block_of(t, 2)));
  for (BlockId id : m4.blocks) EXPECT_EQ(bm.meta(id).ref, 1);
  EXPECT_EQ(bm.n_cached(), 0);
  EXPECT_EQ(bm.n_used(), 3);
  bm.check_invariants();
  EXPECT_TRUE(bm.match_prefix(t, 0).blocks.empty());
}

TEST(BlockManager, TwoSequencesShareBlocks) {
  BlockManager bm(4, kBs);
  const auto t = seq(2);
  const auto a = fill(bm, t);  // sequence A still running
  auto b = bm.match_prefix(t, 8);
  EXPECT_EQ(b.blocks, a);
  EXPECT_EQ(bm.meta(a[0]).ref, 2);
  EXPECT_EQ(bm.n_used(), 2);
  EXPECT_EQ(bm.n_free(), 2);
  release_all(bm, a);  // A finishes; B keeps the blocks
  EXPECT_EQ(bm.meta(a[0]).ref, 1);
  EXPECT_EQ(bm.n_cached(), 0);
  EXPECT_EQ(bm.n_used(), 2);
  release_all(bm, b.blocks);
  EXPECT_EQ(bm.n_cached(), 2);
  // retain shares a held block (a forked sequence) and needs a matching release.
  auto c = bm.match_prefix(t, 1);
  bm.retain(c.blocks[0]);
  EXPECT_EQ(bm.meta(c.blocks[0]).ref, 2);
  bm.release(c.blocks[0]);
  bm.release(c.blocks[0]);
  EXPECT_EQ(bm.n_cached(), 2);
  bm.check_invariants();
}

TEST(BlockManager, EvictsTheLeastRecentlyCachedFirst) {
  BlockManager bm(3, kBs);
  const auto x = seq(1, 0), y = seq(1, 1000), z = seq(1, 2000);
  const BlockId bx = fill(bm, x)[0], by = fill(bm, y)[0], bz = fill(bm, z)[0];
  bm.release(bx);  // cached order: x, y, z (x least recent)
  bm.release(by);
  bm.release(bz);
  EXPECT_EQ(bm.n_cached(), 3);

  // Re-matching x takes it out of the LRU list; released again it is the most recent.
  auto mx = bm.match_prefix(x, 1);
  ASSERT_EQ(mx.blocks, std::vector<BlockId>{bx});
  EXPECT_EQ(bm.n_cached(), 2);
  EXPECT_EQ(bm.n_used(), 1);
  bm.release(bx);  // order: y, z, x

  EXPECT_EQ(bm.allocate(), by);
  EXPECT_EQ(bm.evictions(), 1u);
  EXPECT_EQ(bm.allocate(), bz);
  EXPECT_EQ(bm.allocate(), bx);
  EXPECT_EQ(bm.evictions(), 3u);
  EXPECT_EQ(bm.allocate(), kNoBlock);
  EXPECT_FALSE(bm.meta(by).hashed);
  EXPECT_TRUE(bm.meta(by).tokens.empty());
  bm.check_invariants();
}

TEST(BlockManager, FreeBlocksGoBeforeCachedOnes) {
  BlockManager bm(3, kBs);
  const BlockId cached = fill(bm, seq(1))[0];
  bm.release(cached);
  EXPECT_NE(bm.allocate(), cached);
  EXPECT_NE(bm.allocate(), cached);
  EXPECT_EQ(bm.evictions(), 0u);
  EXPECT_EQ(bm.allocate(), cached);
  EXPECT_EQ(bm.evictions(), 1u);
}

TEST(BlockManager, EvictionForgetsThePrefix) {
  BlockManager bm(2, kBs);
  const auto t = seq(2);
  release_all(bm, fill(bm, t));
  const BlockId evicted = bm.allocate();  // first block of t, the least recent
  EXPECT_EQ(evicted, 0);
  // The first block is gone, so nothing matches (the second is unreachable).
  EXPECT_TRUE(bm.match_prefix(t, 8).blocks.empty());
  bm.release(evicted);  // never committed again: back to the free list, not cached
  EXPECT_EQ(bm.n_cached(), 1);
  bm.check_invariants();
}

TEST(BlockManager, DuplicatePrefixCommitLeavesTheSecondBlockUnregistered) {
  BlockManager bm(4, kBs);
  const auto t = seq(1);
  const BlockId first = bm.allocate(), second = bm.allocate();
  const uint64_t h1 = bm.commit_full(first, 0, t);
  const uint64_t h2 = bm.commit_full(second, 0, t);
  EXPECT_EQ(h1, h2);
  EXPECT_TRUE(bm.meta(first).hashed);
  EXPECT_FALSE(bm.meta(second).hashed);
  EXPECT_EQ(bm.commit_full(first, 0, t), h1);  // a re-commit of the same content is a no-op
  bm.release(second);
  bm.release(first);
  EXPECT_EQ(bm.n_cached(), 1);
  EXPECT_EQ(bm.n_free(), 4);
  auto m = bm.match_prefix(t, 1);
  EXPECT_EQ(m.blocks, std::vector<BlockId>{first});
  bm.check_invariants();
}

TEST(BlockManager, ChainHashIsDeterministicAndNeverZero) {
  const std::vector<int32_t> a{1, 2, 3, 4}, b{1, 2, 3, 5};
  EXPECT_EQ(BlockManager::chain_hash(0, a), BlockManager::chain_hash(0, a));
  const uint64_t ha = BlockManager::chain_hash(0, a);
  EXPECT_NE(ha, 0u);
  EXPECT_NE(ha, BlockManager::chain_hash(0, b));
  EXPECT_NE(ha, BlockManager::chain_hash(1, a));
  EXPECT_NE(BlockManager::chain_hash(ha, a), BlockManager::chain_hash(ha + 1, a));
  EXPECT_NE(BlockManager::chain_hash(0, std::vector<int32_t>{1}),
            BlockManager::chain_hash(0, std::vector<int32_t>{1, 0}));
  EXPECT_NE(BlockManager::chain_hash(0, {}), 0u);
  // No collisions and no zero among many small neighbouring inputs.
  std::set<uint64_t> seen;
  for (int32_t p = 0; p < 64; ++p) {
    for (int32_t t = -64; t < 64; ++t) {
      const std::vector<int32_t> tok{t, t + 1, 0, p};
      const uint64_t h = BlockManager::chain_hash(static_cast<uint64_t>(p), tok);
      EXPECT_NE(h, 0u);
      seen.insert(h);
    }
  }
  EXPECT_EQ(seen.size(), 64u * 128u);
}

TEST(BlockManager, ChainHashValueIsStable) {
  // Pinned (and checked against an independent Python version of FNV-1a + splitmix64)
  // so that a change of the function, which invalidates any cache that ever outlives
  // the process, is a deliberate one.
  const std::vector<int32_t> t{1, 2, 3, 4};
  const uint64_t pinned = BlockManager::chain_hash(0, t);
  EXPECT_EQ(pinned, 0xb05b274b44a0a52full) << std::hex << pinned;
}

// Every block hashes to the same value: lookups must still tell blocks apart by
// their tokens and their parent.
uint64_t constant_hash(uint64_t, std::span<const int32_t>) { return 42; }
// Ignores the parent: the same tokens after different prefixes collide.
uint64_t tokens_only_hash(uint64_t, std::span<const int32_t> t) {
  return BlockManager::chain_hash(0, t);
}

TEST(BlockManager, CollidingHashesNeverReturnAnotherBlocksTokens) {
  BlockManager bm(4, kBs);
  bm.set_hash_for_testing(&constant_hash);
  const auto x = seq(1, 0), y = seq(1, 500);
  const BlockId bx = bm.allocate(), by = bm.allocate();
  EXPECT_EQ(bm.commit_full(bx, 0, x), 42u);
  EXPECT_EQ(bm.commit_full(by, 0, y), 42u);
  EXPECT_TRUE(bm.meta(by).hashed);  // a collision is not a duplicate
  bm.release(bx);
  bm.release(by);
  EXPECT_EQ(bm.match_prefix(x, 1).blocks, std::vector<BlockId>{bx});
  EXPECT_EQ(bm.match_prefix(y, 1).blocks, std::vector<BlockId>{by});
  EXPECT_TRUE(bm.match_prefix(seq(1, 900), 1).blocks.empty());
  bm.release(bx);
  bm.release(by);
  // Eviction removes exactly the evicted block's entry among the colliding ones.
  EXPECT_EQ(bm.allocate(), 2);
  EXPECT_EQ(bm.allocate(), 3);
  const BlockId evicted = bm.allocate();
  EXPECT_EQ(evicted, bx);
  EXPECT_TRUE(bm.match_prefix(x, 1).blocks.empty());
  EXPECT_EQ(bm.match_prefix(y, 1).blocks, std::vector<BlockId>{by});
  bm.check_invariants();
}

TEST(BlockManager, SameTokensAfterADifferentParentDoNotMatch) {
  BlockManager bm(4, kBs);
  bm.set_hash_for_testing(&tokens_only_hash);
  const auto t = seq(2);  // blocks P, Q
  const auto ids = fill(bm, t);
  release_all(bm, ids);
  // A prompt that starts with Q's tokens: same hash as Q, but Q's parent is P, not 0.
  const std::vector<int32_t> q_first(t.begin() + kBs, t.end());
  EXPECT_TRUE(bm.match_prefix(q_first, 8).blocks.empty());
  EXPECT_EQ(bm.match_prefix(t, 8).blocks, ids);
}

TEST(BlockManager, CountsQueryAndHitTokens) {
  BlockManager bm(8, kBs);
  const auto t = seq(3);
  release_all(bm, fill(bm, t));
  EXPECT_EQ(bm.prefix_query_tokens(), 0u);
  auto prompt = seq(2);
  prompt.push_back(9);
  prompt.push_back(9);  // 10 tokens, 2 full blocks cached
  release_all(bm, bm.match_prefix(prompt, 8).blocks);
  EXPECT_EQ(bm.prefix_query_tokens(), 10u);
  EXPECT_EQ(bm.prefix_hit_tokens(), 8u);
  release_all(bm, bm.match_prefix(seq(2, 7), 8).blocks);  // miss
  EXPECT_EQ(bm.prefix_query_tokens(), 18u);
  EXPECT_EQ(bm.prefix_hit_tokens(), 8u);
  release_all(bm, bm.match_prefix(t, 1).blocks);  // capped: one block
  EXPECT_EQ(bm.prefix_query_tokens(), 30u);
  EXPECT_EQ(bm.prefix_hit_tokens(), 12u);
}

TEST(BlockManager, MisuseThrowsInsteadOfCorruptingState) {
  BlockManager bm(2, kBs);
  const BlockId a = bm.allocate();
  bm.release(a);
  try {
    bm.release(a);
    FAIL() << "double release did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
  EXPECT_THROW(bm.release(-1), Error);
  EXPECT_THROW(bm.release(2), Error);
  EXPECT_THROW(bm.retain(a), Error);  // ref 0: not held by anyone
  EXPECT_THROW(bm.meta(7), Error);
  EXPECT_THROW(bm.commit_full(a, 0, seq(1)), Error);  // not held
  const BlockId b = bm.allocate();
  EXPECT_THROW(bm.commit_full(b, 0, std::vector<int32_t>{1, 2}), Error);  // not a full block
  bm.commit_full(b, 0, seq(1));
  EXPECT_THROW(bm.commit_full(b, 0, seq(1, 50)), Error);  // different content
  EXPECT_EQ(bm.n_used(), 1);
  EXPECT_EQ(bm.n_free(), 1);
  bm.check_invariants();
}

// Random sequences start (matching a cached prefix, then allocating), grow, commit
// full blocks, fork and finish, against a model of who holds which block.
TEST(BlockManager, RandomOperationsKeepTheInvariants) {
  constexpr int32_t kBlocks = 24;
  BlockManager bm(kBlocks, kBs);
  std::mt19937 rng(12345);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };

  struct Seq {
    std::vector<int32_t> tokens;  // full blocks only
    std::vector<BlockId> blocks;
    std::vector<uint64_t> hashes;
  };
  std::vector<Seq> live;
  std::vector<int32_t> model_ref(kBlocks, 0);
  uint64_t queried = 0, hit = 0;

  // Prompts come from a few shared stems so that prefixes repeat.
  auto random_prompt = [&]() {
    std::vector<int32_t> t;
    const int stem = pick(4);
    const int n = 1 + pick(5);
    for (int i = 0; i < n * kBs; ++i) {
      t.push_back(i < 2 * kBs ? stem * 1000 + i : pick(3));
    }
    return t;
  };

  for (int step = 0; step < 10000; ++step) {
    const int op = pick(10);
    if (op < 3) {  // a new sequence
      Seq s;
      const auto prompt = random_prompt();
      auto m = bm.match_prefix(prompt, 1 + pick(6));
      queried += prompt.size();
      hit += m.blocks.size() * kBs;
      for (size_t i = 0; i < m.blocks.size(); ++i) {
        const BlockId id = m.blocks[i];
        ASSERT_TRUE(bm.meta(id).hashed);
        ASSERT_TRUE(std::equal(bm.meta(id).tokens.begin(), bm.meta(id).tokens.end(),
                               prompt.begin() + static_cast<long>(i * kBs)));
        ++model_ref[static_cast<size_t>(id)];
      }
      s.tokens.assign(prompt.begin(), prompt.begin() + static_cast<long>(m.blocks.size() * kBs));
      s.blocks = m.blocks;
      s.hashes = m.hashes;
      // The rest of the prompt, block by block, while blocks last.
      for (size_t i = m.blocks.size(); i < prompt.size() / kBs; ++i) {
        const BlockId id = bm.allocate();
        if (id == kNoBlock) {
          ASSERT_EQ(bm.n_free(), 0);
          break;
        }
        ASSERT_EQ(model_ref[static_cast<size_t>(id)], 0);
        ++model_ref[static_cast<size_t>(id)];
        const auto blk = std::span<const int32_t>(prompt).subspan(i * kBs, kBs);
        const uint64_t parent = s.hashes.empty() ? 0 : s.hashes.back();
        const uint64_t h = bm.commit_full(id, parent, blk);
        ASSERT_EQ(h, BlockManager::chain_hash(parent, blk));
        s.tokens.insert(s.tokens.end(), blk.begin(), blk.end());
        s.blocks.push_back(id);
        s.hashes.push_back(h);
      }
      live.push_back(std::move(s));
    } else if (op < 5 && !live.empty()) {  // a sequence finishes
      const size_t i = static_cast<size_t>(pick(static_cast<int>(live.size())));
      for (BlockId id : live[i].blocks) {
        bm.release(id);
        --model_ref[static_cast<size_t>(id)];
      }
      live.erase(live.begin() + static_cast<long>(i));
    } else if (op < 6 && !live.empty()) {  // a fork shares every block
      Seq s = live[static_cast<size_t>(pick(static_cast<int>(live.size())))];
      for (BlockId id : s.blocks) {
        bm.retain(id);
        ++model_ref[static_cast<size_t>(id)];
      }
      live.push_back(std::move(s));
    } else if (!live.empty()) {  // a sequence generates one more block
      Seq& s = live[static_cast<size_t>(pick(static_cast<int>(live.size())))];
      const BlockId id = bm.allocate();
      if (id == kNoBlock) {
        ASSERT_EQ(bm.n_free(), 0);
        continue;
      }
      ++model_ref[static_cast<size_t>(id)];
      std::vector<int32_t> blk;
      for (int k = 0; k < kBs; ++k) blk.push_back(pick(3));
      const uint64_t parent = s.hashes.empty() ? 0 : s.hashes.back();
      s.hashes.push_back(bm.commit_full(id, parent, blk));
      s.blocks.push_back(id);
      s.tokens.insert(s.tokens.end(), blk.begin(), blk.end());
    }

    int32_t used = 0;
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_GE(model_ref[static_cast<size_t>(b)], 0);
      ASSERT_EQ(bm.meta(b).ref, model_ref[static_cast<size_t>(b)]) << "block " << b;
      used += model_ref[static_cast<size_t>(b)] > 0;
    }
    ASSERT_EQ(bm.n_used(), used);
    ASSERT_EQ(bm.n_free() + bm.n_used(), kBlocks);
    ASSERT_LE(bm.n_cached(), bm.n_free());
    if (step % 16 == 0) {
      ASSERT_NO_THROW(bm.check_invariants());
    }
  }
  EXPECT_EQ(bm.prefix_query_tokens(), queried);
  EXPECT_EQ(bm.prefix_hit_tokens(), hit);
  EXPECT_GT(hit, 0u);
  EXPECT_GT(bm.evictions(), 0u);
  for (auto& s : live) release_all(bm, s.blocks);
  EXPECT_EQ(bm.n_used(), 0);
  EXPECT_EQ(bm.n_free(), kBlocks);
  bm.check_invariants();
}

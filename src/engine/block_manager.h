// The paged KV cache's bookkeeping, with no model and no memory of its own: which of
// the pool's fixed-size blocks are free, who references them, and which full blocks
// hold which token prefix (so a new prompt that starts the same way reuses them).
//
// A block's identity for prefix reuse is a 64-bit chain hash of its tokens and of
// every token before it (the parent block's hash); the tokens and the parent hash
// are kept too and compared on lookup, so two blocks whose hashes collide are told
// apart. (What remains is two different whole prefixes before a block hashing to the
// same 64-bit parent hash: about 2^-64 per pair, as in vLLM.) Blocks referenced by
// no live sequence but holding a hash stay cached and are evicted least recently
// used first, only when a fresh block is needed.
//
// BlockMeta also holds a snapshot slot for the recurrent/conv state of hybrid models
// taken at this block's end. With spilling on (the KV disk tier, engine/kv_disk.h),
// evicted blocks and spilled snapshots are recorded for the engine to write out.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace hearth::engine {

using BlockId = int32_t;
constexpr BlockId kNoBlock = -1;

enum class BlockTier : uint8_t { kPool = 0 };  // a block on disk has no BlockMeta (engine/kv_disk.h)

struct BlockMeta {
  int32_t ref = 0;               // live sequences using the block
  bool hashed = false;           // full and registered for prefix reuse
  uint64_t hash = 0;             // chain hash (valid when hashed)
  uint64_t parent_hash = 0;      // the parent's chain hash (when hashed), checked on lookup
  std::vector<int32_t> tokens;   // the block's tokens (when hashed), checked on lookup
  BlockTier tier = BlockTier::kPool;
  int32_t snapshot = -1;         // hybrid models: state slot holding the recurrent state at its end
};

// A block's content leaving the memory tier (the KV disk tier writes it out): its KV
// (kv, an evicted block: the pool block still holds it until the next forward pass or
// the next write into that block) and/or its recurrent-state snapshot (snapshot >= 0:
// the slot still holds it until the scheduler's next state copies).
struct Spill {
  BlockId block = kNoBlock;
  uint64_t hash = 0, parent_hash = 0;
  std::vector<int32_t> tokens;
  bool kv = false;
  int32_t snapshot = -1;
};

// What probe_prefix finds without taking anything: the chain hash of each full block of
// the tokens (up to max_blocks), how many lead blocks are cached, and each of those
// blocks' snapshot slot (-1: none).
struct PrefixProbe {
  std::vector<uint64_t> hashes;
  int32_t n_matched = 0;
  std::vector<int32_t> snapshots;
};

struct PrefixMatch {
  std::vector<BlockId> blocks;   // retained (ref + 1 each) for the caller
  std::vector<uint64_t> hashes;  // chain hash of each matched block
};

class BlockManager {
 public:
  BlockManager(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const;
  int32_t block_size() const;
  int32_t n_free() const;      // allocatable now: never-used/freed blocks + evictable cached ones
  int32_t n_used() const;      // blocks with ref > 0
  int32_t n_cached() const;    // blocks with ref == 0 that still hold a hashed prefix

  // A block for a sequence (ref 1): a free one, else the least recently used cached
  // one (its hash is forgotten). kNoBlock when every block is in use.
  BlockId allocate();
  // ref + 1 on a block some sequence already holds (ref > 0), e.g. a forked sequence
  // sharing it; a cached block comes back through match_prefix instead.
  void retain(BlockId id);
  // ref - 1; at 0 the block becomes cached (most recently used) if hashed, else free.
  // Throws Error (kInternal) for an id out of range or a block with ref 0. Release a
  // finished sequence's blocks last first: the LRU then evicts a prefix's tail before
  // its head (an evicted head leaves every block after it unreachable).
  // forget: a block reaching ref 0 is not cached but freed with its hash (and snapshot)
  // forgotten, e.g. the blocks of a sequence that failed (their contents are suspect).
  void release(BlockId id, bool forget = false);

  // The longest run of cached full blocks that matches tokens from the start, at
  // most max_blocks of them; each returned block is retained. Counts one query of
  // tokens.size() tokens and the hit tokens in the statistics.
  // count_stats = false leaves the statistics alone (a caller that may give the blocks
  // back at once, e.g. an admission that then finds no room, records the query itself
  // with record_prefix_query when it succeeds).
  PrefixMatch match_prefix(std::span<const int32_t> tokens, int32_t max_blocks, bool count_stats = true);
  void record_prefix_query(uint64_t query_tokens, uint64_t hit_tokens) {
    query_tokens_ += query_tokens;
    hit_tokens_ += hit_tokens;
  }

  // Registers block `id` (held by the caller) as full with `tokens` (block_size of
  // them) following the prefix whose hash is `parent_hash` (0 for the first block).
  // Returns the block's chain hash. If another block already holds this exact
  // prefix, `id` stays unregistered (freed normally at release) and the hash is
  // still returned.
  uint64_t commit_full(BlockId id, uint64_t parent_hash, std::span<const int32_t> tokens);

  static uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens);

  // Hybrid models: the recurrent state after this block's last token is kept in state
  // slot `slot` (the block must be hashed: a snapshot belongs to a prefix). When the
  // block is evicted its slot is handed back through take_dropped_snapshots.
  void attach_snapshot(BlockId id, int32_t slot);
  // Forgets the block's snapshot (its slot is the caller's again); no-op without one.
  // spill: the snapshot leaves the memory tier (recorded for take_spills when spilling is on).
  void detach_snapshot(BlockId id, bool spill = false);
  // Slots of snapshots whose blocks were evicted since the last call.
  std::vector<int32_t> take_dropped_snapshots();

  const BlockMeta& meta(BlockId id) const;

  // The KV disk tier: when on, evictions (allocate) and spilled snapshots are recorded
  // until take_spills(); the caller must copy their contents out before the pool block
  // or slot is written again.
  void set_spill(bool on) { spill_ = on; }
  std::vector<Spill> take_spills() {
    std::vector<Spill> out;
    out.swap(spills_);
    return out;
  }
  // Looks up the tokens like match_prefix, changing nothing (no retain, no statistics).
  PrefixProbe probe_prefix(std::span<const int32_t> tokens, int32_t max_blocks) const;
  // The cached blocks (ref 0), least recently used first.
  std::vector<BlockId> cached_lru() const { return {lru_.begin(), lru_.end()}; }

  // Walks every structure (O(n_blocks)) and throws Error (kInternal) on the first
  // inconsistency; for tests and debug checks, not for the engine's step loop.
  void check_invariants() const;

  // Tests only: the hash this manager uses in place of chain_hash, so that a test
  // can force collisions (the static chain_hash itself is unaffected).
  using HashFn = uint64_t (*)(uint64_t parent_hash, std::span<const int32_t> tokens);
  void set_hash_for_testing(HashFn fn) { hash_ = fn; }

  // Statistics for /metrics (tokens, cumulative).
  uint64_t prefix_query_tokens() const { return query_tokens_; }
  uint64_t prefix_hit_tokens() const { return hit_tokens_; }
  uint64_t evictions() const { return evictions_; }

 private:
  int32_t block_size_;
  std::vector<BlockMeta> meta_;
  std::vector<BlockId> free_;                       // ref 0, not hashed
  std::list<BlockId> lru_;                          // ref 0, hashed; front = least recent
  std::vector<std::list<BlockId>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  std::unordered_multimap<uint64_t, BlockId> by_hash_;  // hashed blocks, cached or in use
  int32_t n_used_ = 0;
  HashFn hash_ = &BlockManager::chain_hash;
  uint64_t query_tokens_ = 0, hit_tokens_ = 0, evictions_ = 0;
  std::vector<int32_t> dropped_snapshots_;
  bool spill_ = false;
  std::vector<Spill> spills_;
  // The block holding exactly these tokens after `parent`, or kNoBlock.
  BlockId find_block(uint64_t h, uint64_t parent, std::span<const int32_t> tokens) const;
};

}  // namespace hearth::engine

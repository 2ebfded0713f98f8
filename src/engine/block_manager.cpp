#include "engine/block_manager.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hearth::engine {
namespace {

[[noreturn]] void broken(const std::string& why) { fail(ErrorKind::kInternal, "blocks", why); }

// FNV-1a over one little-endian value's bytes; written byte by byte so that the
// hash is the same on every platform and every run (it keys a cache that may one
// day be written to disk).
uint64_t fnv_bytes(uint64_t h, uint64_t value, int n_bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  for (int i = 0; i < n_bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xffu;
    h *= kPrime;
  }
  return h;
}

// splitmix64's finalizer: FNV-1a alone mixes its last bytes poorly into the high
// bits, and the hash table takes its bucket from the low ones.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

BlockManager::BlockManager(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
  if (n_blocks < 0) fail(ErrorKind::kInvalidInput, "blocks", "n_blocks must be >= 0");
  if (block_size < 1) fail(ErrorKind::kInvalidInput, "blocks", "block_size must be >= 1");
  meta_.resize(static_cast<size_t>(n_blocks));
  lru_pos_.resize(static_cast<size_t>(n_blocks));
  in_lru_.assign(static_cast<size_t>(n_blocks), false);
  // free_ is a stack popped from the back: pushed in reverse so that a fresh pool
  // hands out 0, 1, 2, ... (neighbouring blocks for the first sequences).
  free_.reserve(static_cast<size_t>(n_blocks));
  for (BlockId id = n_blocks - 1; id >= 0; --id) free_.push_back(id);
}

int32_t BlockManager::n_blocks() const { return static_cast<int32_t>(meta_.size()); }
int32_t BlockManager::block_size() const { return block_size_; }
int32_t BlockManager::n_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
int32_t BlockManager::n_used() const { return n_used_; }
int32_t BlockManager::n_cached() const { return static_cast<int32_t>(lru_.size()); }

uint64_t BlockManager::chain_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV offset basis
  h = fnv_bytes(h, parent_hash, 8);
  h = fnv_bytes(h, tokens.size(), 8);  // so [a] and [a, 0] differ by construction
  for (int32_t t : tokens) h = fnv_bytes(h, static_cast<uint32_t>(t), 4);
  h = mix64(h);
  // 0 means "no parent" to commit_full and match_prefix; a real block never gets it.
  return h != 0 ? h : 0x9e3779b97f4a7c15ull;
}

void BlockManager::attach_snapshot(BlockId id, int32_t slot) {
  if (id < 0 || id >= static_cast<BlockId>(meta_.size())) broken("snapshot for block " + std::to_string(id));
  BlockMeta& m = meta_[static_cast<size_t>(id)];
  if (!m.hashed || m.snapshot >= 0) broken("snapshot for block " + std::to_string(id) + " (not hashed or taken)");
  m.snapshot = slot;
}

void BlockManager::detach_snapshot(BlockId id, bool spill) {
  if (id < 0 || id >= static_cast<BlockId>(meta_.size())) broken("snapshot of block " + std::to_string(id));
  BlockMeta& m = meta_[static_cast<size_t>(id)];
  if (spill && spill_ && m.snapshot >= 0 && m.hashed) {
    spills_.push_back(Spill{id, m.hash, m.parent_hash, m.tokens, false, m.snapshot});
  }
  m.snapshot = -1;
}

BlockId BlockManager::find_block(uint64_t h, uint64_t parent, std::span<const int32_t> tokens) const {
  auto [first, last] = by_hash_.equal_range(h);
  // The hash only narrows the search: the block must hold these very tokens after
  // the very same parent, so that a collision is a miss and not someone else's cache.
  auto it = std::find_if(first, last, [&](const auto& kv) {
    const BlockMeta& m = meta_[static_cast<size_t>(kv.second)];
    return m.parent_hash == parent && std::equal(m.tokens.begin(), m.tokens.end(), tokens.begin(), tokens.end());
  });
  return it == last ? kNoBlock : it->second;
}

PrefixProbe BlockManager::probe_prefix(std::span<const int32_t> tokens, int32_t max_blocks) const {
  PrefixProbe out;
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t n = std::min(tokens.size() / bs, static_cast<size_t>(std::max(max_blocks, 0)));
  uint64_t parent = 0;
  bool matching = true;
  for (size_t i = 0; i < n; ++i) {
    const auto chunk = tokens.subspan(i * bs, bs);
    const uint64_t h = hash_(parent, chunk);
    if (matching) {
      const BlockId id = find_block(h, parent, chunk);
      if (id == kNoBlock) {
        matching = false;
      } else {
        ++out.n_matched;
        out.snapshots.push_back(meta_[static_cast<size_t>(id)].snapshot);
      }
    }
    out.hashes.push_back(h);
    parent = h;
  }
  return out;
}

std::vector<int32_t> BlockManager::take_dropped_snapshots() {
  std::vector<int32_t> out;
  out.swap(dropped_snapshots_);
  return out;
}

BlockId BlockManager::allocate() {
  BlockId id = kNoBlock;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    // Evict the least recently used cached block: its prefix is forgotten, so a
    // later match stops before it (and recomputes it).
    id = lru_.front();
    lru_.pop_front();
    in_lru_[static_cast<size_t>(id)] = false;
    BlockMeta& m = meta_[static_cast<size_t>(id)];
    auto [first, last] = by_hash_.equal_range(m.hash);
    auto it = std::find_if(first, last, [id](const auto& kv) { return kv.second == id; });
    if (it == last) broken("cached block " + std::to_string(id) + " missing from the hash map");
    by_hash_.erase(it);
    ++evictions_;
    if (m.snapshot >= 0) dropped_snapshots_.push_back(m.snapshot);
    if (spill_) spills_.push_back(Spill{id, m.hash, m.parent_hash, m.tokens, true, m.snapshot});
  } else {
    return kNoBlock;
  }
  BlockMeta& m = meta_[static_cast<size_t>(id)];
  m.ref = 1;
  m.hashed = false;
  m.hash = 0;
  m.parent_hash = 0;
  m.tokens.clear();  // keeps the capacity: the next commit of this block allocates nothing
  m.tier = BlockTier::kPool;
  m.snapshot = -1;
  ++n_used_;
  return id;
}

void BlockManager::retain(BlockId id) {
  meta(id);  // range check
  BlockMeta& m = meta_[static_cast<size_t>(id)];
  // A ref-0 block sits in the free list or the LRU list; taking it from there is
  // allocate's or match_prefix's job, and doing it here would leave it in both.
  if (m.ref <= 0) broken("retain of block " + std::to_string(id) + " that no sequence holds");
  ++m.ref;
}

void BlockManager::release(BlockId id, bool forget) {
  meta(id);  // range check
  BlockMeta& m = meta_[static_cast<size_t>(id)];
  if (m.ref <= 0)
    broken("release of block " + std::to_string(id) + " with ref 0 (double release?)");
  if (--m.ref > 0) return;
  --n_used_;
  if (m.hashed && forget) {
    auto [first, last] = by_hash_.equal_range(m.hash);
    auto it = std::find_if(first, last, [id](const auto& kv) { return kv.second == id; });
    if (it == last) broken("hashed block " + std::to_string(id) + " missing from the hash map");
    by_hash_.erase(it);
    if (m.snapshot >= 0) dropped_snapshots_.push_back(m.snapshot);
    m.snapshot = -1;
    m.hashed = false;
    m.hash = 0;
    m.parent_hash = 0;
    m.tokens.clear();
  }
  if (m.hashed) {
    lru_pos_[static_cast<size_t>(id)] = lru_.insert(lru_.end(), id);
    in_lru_[static_cast<size_t>(id)] = true;
  } else {
    free_.push_back(id);
  }
}

PrefixMatch BlockManager::match_prefix(std::span<const int32_t> tokens, int32_t max_blocks, bool count_stats) {
  PrefixMatch out;
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t n = std::min(tokens.size() / bs, static_cast<size_t>(std::max(max_blocks, 0)));
  uint64_t parent = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto chunk = tokens.subspan(i * bs, bs);
    const uint64_t h = hash_(parent, chunk);
    const BlockId id = find_block(h, parent, chunk);
    if (id == kNoBlock) break;
    BlockMeta& m = meta_[static_cast<size_t>(id)];
    if (m.ref == 0) {  // cached: leaves the LRU list for the caller's sequence
      lru_.erase(lru_pos_[static_cast<size_t>(id)]);
      in_lru_[static_cast<size_t>(id)] = false;
      ++n_used_;
    }
    ++m.ref;  // a block another live sequence holds is shared (ref >= 2)
    out.blocks.push_back(id);
    out.hashes.push_back(h);
    parent = h;
  }
  if (count_stats) record_prefix_query(tokens.size(), out.blocks.size() * bs);
  return out;
}

uint64_t BlockManager::commit_full(BlockId id, uint64_t parent_hash,
                                   std::span<const int32_t> tokens) {
  meta(id);  // range check
  BlockMeta& m = meta_[static_cast<size_t>(id)];
  if (m.ref <= 0) broken("commit of block " + std::to_string(id) + " that no sequence holds");
  if (tokens.size() != static_cast<size_t>(block_size_)) {
    broken("commit of block " + std::to_string(id) + " with " + std::to_string(tokens.size()) +
           " tokens, block size " + std::to_string(block_size_));
  }
  const uint64_t h = hash_(parent_hash, tokens);
  auto same_prefix = [&](const BlockMeta& o) {
    return o.hash == h && o.parent_hash == parent_hash &&
           std::equal(o.tokens.begin(), o.tokens.end(), tokens.begin(), tokens.end());
  };
  if (m.hashed) {
    // A block that came from match_prefix (or was committed before) is registered
    // already; committing it again with the same content is harmless.
    if (!same_prefix(m))
      broken("block " + std::to_string(id) + " committed twice with different tokens");
    return h;
  }
  auto [first, last] = by_hash_.equal_range(h);
  const bool taken = std::any_of(first, last, [&](const auto& kv) {
    return same_prefix(meta_[static_cast<size_t>(kv.second)]);
  });
  if (taken) return h;  // the first copy stays the one reused; this one frees at release
  m.hashed = true;
  m.hash = h;
  m.parent_hash = parent_hash;
  m.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(h, id);
  return h;
}

const BlockMeta& BlockManager::meta(BlockId id) const {
  if (id < 0 || id >= n_blocks()) {
    broken("block id " + std::to_string(id) + " out of range [0, " + std::to_string(n_blocks()) +
           ")");
  }
  return meta_[static_cast<size_t>(id)];
}

void BlockManager::check_invariants() const {
  const size_t n = meta_.size();
  std::vector<int> seen(n, 0);  // 1: free list, 2: LRU list
  for (BlockId id : free_) {
    if (id < 0 || static_cast<size_t>(id) >= n)
      broken("free list holds bad id " + std::to_string(id));
    if (seen[static_cast<size_t>(id)]++)
      broken("block " + std::to_string(id) + " twice in free list");
  }
  for (BlockId id : lru_) {
    if (id < 0 || static_cast<size_t>(id) >= n)
      broken("LRU list holds bad id " + std::to_string(id));
    if (seen[static_cast<size_t>(id)]) broken("block " + std::to_string(id) + " in two lists");
    seen[static_cast<size_t>(id)] = 2;
  }
  int32_t used = 0;
  size_t hashed = 0;
  for (size_t i = 0; i < n; ++i) {
    const BlockMeta& m = meta_[i];
    const std::string who = "block " + std::to_string(i);
    if (m.ref < 0) broken(who + " has ref " + std::to_string(m.ref));
    if (m.ref > 0) ++used;
    if (m.ref > 0 && seen[i]) broken(who + " is referenced but listed as free/cached");
    if (m.ref == 0 && seen[i] != (m.hashed ? 2 : 1))
      broken(who + " with ref 0 is in the wrong list");
    if (in_lru_[i] != (seen[i] == 2)) broken(who + ": in_lru flag disagrees with the LRU list");
    if (in_lru_[i] && *lru_pos_[i] != static_cast<BlockId>(i)) broken(who + ": stale LRU position");
    if (m.hashed) {
      ++hashed;
      if (m.tokens.size() != static_cast<size_t>(block_size_))
        broken(who + " hashed without tokens");
      auto [first, last] = by_hash_.equal_range(m.hash);
      if (std::count_if(first, last, [&](const auto& kv) { return kv.second == BlockId(i); }) !=
          1) {
        broken(who + " is not in the hash map exactly once");
      }
    } else if (!m.tokens.empty()) {
      broken(who + " holds tokens but is not hashed");
    }
  }
  if (used != n_used_)
    broken("n_used " + std::to_string(n_used_) + ", counted " + std::to_string(used));
  if (hashed != by_hash_.size()) broken("hash map size differs from the hashed blocks");
  if (free_.size() + lru_.size() + static_cast<size_t>(used) != n) broken("blocks lost or doubled");
}

}  // namespace hearth::engine

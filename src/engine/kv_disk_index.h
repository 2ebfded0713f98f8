// Which files the KV disk tier holds, in least-recently-used order, with their sizes:
// the in-memory index of one fingerprint folder. It is rebuilt from the folder at start
// (file modification times give the order: a file's time is set when it is written and
// again when it is read, so the order survives a restart; access times are not used,
// most mounts do not keep them) and kept by the tier's threads after that. The disk
// budget is enforced here: insert() says which files must go.
// Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_disk_format.h"

namespace hearth::engine::kvdisk {

struct Key {
  uint64_t hash = 0;
  Kind kind = Kind::kKv;
  bool operator==(const Key& o) const { return hash == o.hash && kind == o.kind; }
};
struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(k.hash ^ static_cast<uint64_t>(k.kind)); }
};

struct IndexCounts {
  uint64_t kv_files = 0, state_files = 0, bytes = 0;
};

class DiskIndex {
 public:
  explicit DiskIndex(uint64_t budget_bytes) : budget_(budget_bytes) {}
  uint64_t budget() const { return budget_; }

  // A file of `bytes` is on disk now (most recently used). Returns the keys to remove
  // (least recently used first, never `key` itself) so that the total fits the budget;
  // they are already out of the index. A file larger than the whole budget is not
  // added: the result then holds `key` (the caller removes that file).
  std::vector<Key> insert(Key key, uint64_t bytes);
  bool contains(Key key) const;
  // Marks a file used (most recently); false when it is not in the index.
  bool touch(Key key);
  // Forgets a file (removed, or found bad); false when it was not there.
  bool erase(Key key);
  IndexCounts counts() const;
  // Keys from least to most recently used (tests, start-up budget check).
  std::vector<Key> lru_order() const;

  // Rebuilds the index from folder `dir`: every "<hash>.kv" / "<hash>.st" file in the
  // order of its modification time; leftover temporary files ("*.tmp", from a write a
  // crash cut short) are removed, other names left alone. Then files beyond the budget
  // are removed, oldest first. Returns how many temporary / over-budget files it removed.
  struct ScanResult {
    uint64_t removed_tmp = 0, removed_budget = 0;
  };
  ScanResult scan(const std::string& dir);

 private:
  struct Entry {
    uint64_t bytes = 0;
    std::list<Key>::iterator pos;
  };
  uint64_t budget_;
  mutable std::mutex mu_;
  std::list<Key> lru_;  // front: least recently used
  std::unordered_map<Key, Entry, KeyHash> map_;
  IndexCounts counts_;
  void forget_locked(std::unordered_map<Key, Entry, KeyHash>::iterator it);
};

}  // namespace hearth::engine::kvdisk

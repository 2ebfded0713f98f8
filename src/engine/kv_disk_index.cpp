#include "engine/kv_disk_index.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>

namespace hearth::engine::kvdisk {

namespace fs = std::filesystem;

void DiskIndex::forget_locked(std::unordered_map<Key, Entry, KeyHash>::iterator it) {
  counts_.bytes -= it->second.bytes;
  (it->first.kind == Kind::kKv ? counts_.kv_files : counts_.state_files) -= 1;
  lru_.erase(it->second.pos);
  map_.erase(it);
}

std::vector<Key> DiskIndex::insert(Key key, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Key> out;
  if (auto it = map_.find(key); it != map_.end()) forget_locked(it);  // rewritten: the new size counts
  if (bytes > budget_) {
    out.push_back(key);
    return out;
  }
  while (!lru_.empty() && counts_.bytes + bytes > budget_) {
    const Key victim = lru_.front();
    out.push_back(victim);
    forget_locked(map_.find(victim));
  }
  Entry e;
  e.bytes = bytes;
  e.pos = lru_.insert(lru_.end(), key);
  map_.emplace(key, e);
  counts_.bytes += bytes;
  (key.kind == Kind::kKv ? counts_.kv_files : counts_.state_files) += 1;
  return out;
}

bool DiskIndex::contains(Key key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

bool DiskIndex::touch(Key key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.pos);
  return true;
}

bool DiskIndex::erase(Key key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  forget_locked(it);
  return true;
}

IndexCounts DiskIndex::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

std::vector<Key> DiskIndex::lru_order() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {lru_.begin(), lru_.end()};
}

DiskIndex::ScanResult DiskIndex::scan(const std::string& dir) {
  ScanResult r;
  struct Found {
    fs::file_time_type time;
    std::string name;
    Key key;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2)) continue;
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      if (fs::remove(it->path(), e2)) ++r.removed_tmp;
      continue;
    }
    Found f;
    if (!parse_name(name, f.key.hash, f.key.kind)) continue;
    f.name = name;
    f.bytes = it->file_size(e2);
    if (e2) continue;
    f.time = it->last_write_time(e2);
    if (e2) continue;
    found.push_back(std::move(f));
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.time, a.name) < std::tie(b.time, b.name);
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.clear();
    map_.clear();
    counts_ = {};
  }
  for (const Found& f : found) {
    for (const Key& k : insert(f.key, f.bytes)) {
      std::error_code e2;
      if (fs::remove(fs::path(dir) / file_name(k.hash, k.kind), e2)) ++r.removed_budget;
    }
  }
  return r;
}

}  // namespace hearth::engine::kvdisk

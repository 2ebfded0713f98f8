// The stored responses of the Responses API; see responses_store.h.
#include "server/responses_store.h"

#include "server/openai_protocol.h"

namespace hearth::server {

ResponseStore::ResponseStore(size_t max_responses, size_t max_bytes)
    : max_responses_(max_responses), max_bytes_(max_bytes) {}

bool ResponseStore::put(const std::string& id, StoredResponse entry) {
  entry.bytes = id.size() + entry.response.size() + dump_json(entry.conversation).size();
  auto kept = std::make_shared<const StoredResponse>(std::move(entry));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (kept->bytes > max_bytes_ || max_responses_ == 0) return false;
  lru_.emplace_front(id, std::move(kept));
  index_[id] = lru_.begin();
  bytes_ += lru_.front().second->bytes;
  evict_locked();
  return true;
}

void ResponseStore::evict_locked() {
  while (!lru_.empty() && (lru_.size() > max_responses_ || bytes_ > max_bytes_)) {
    bytes_ -= lru_.back().second->bytes;
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // (iterators stay valid)
  return lru_.front().second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace hearth::server

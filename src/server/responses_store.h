// The responses `hearth serve` keeps for previous_response_id and GET /v1/responses/{id}
// (requests with store: true): a bounded in-memory LRU, by count and by bytes, shared by
// the HTTP threads. Nothing is written to disk; a restart forgets everything.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

namespace hearth::server {

struct StoredResponse {
  std::string response;  // the Response object as sent (JSON text)
  // The whole conversation in canonical items (responses_protocol.h): the earlier turns,
  // this request's input and this response's output; the next turn appends its input.
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  size_t bytes = 0;  // what this entry counts against the byte bound (set by put)
};

class ResponseStore {
 public:
  // At most `max_responses` entries and `max_bytes` bytes (responses and conversations as
  // JSON text); the least recently used go first.
  ResponseStore(size_t max_responses, size_t max_bytes);

  // Keeps `entry` under `id` (replacing an entry of that id) and evicts until both bounds
  // hold. An entry larger than max_bytes by itself is not kept: false.
  bool put(const std::string& id, StoredResponse entry);
  // The entry (now the most recently used), or null when unknown or evicted.
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  // False when there was no such entry.
  bool erase(const std::string& id);

  size_t size() const;
  size_t bytes() const;

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<const StoredResponse>>>;
  void evict_locked();

  const size_t max_responses_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  Lru lru_;  // most recently used first
  std::unordered_map<std::string, Lru::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace hearth::server

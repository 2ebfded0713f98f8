#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace hearth::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view piece) {
  if (stopped_) return "";
  held_ += piece;
  if (stops_.empty()) return std::exchange(held_, std::string());
  size_t first = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) first = at, which = &s;
  }
  if (which != nullptr) {
    stopped_ = true;
    matched_ = *which;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold the longest tail of held_ that some stop string starts with.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace hearth::engine

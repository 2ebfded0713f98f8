#include "engine/reasoning_budget.h"

#include <algorithm>

namespace hearth::engine {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

ReasoningBudget::ReasoningBudget(ReasoningLimit limit)
    : limit_(std::move(limit)), inside_(limit_.starts_inside) {}

std::optional<int32_t> ReasoningBudget::forced() {
  if (limit_.budget < 0 || limit_.close_tokens.empty() || done_) return std::nullopt;
  if (!forcing_) {
    if (!inside_ || n_inside_ < limit_.budget) return std::nullopt;
    forcing_ = true;
  }
  const int32_t t = limit_.close_tokens[next_forced_++];
  if (next_forced_ == limit_.close_tokens.size()) done_ = true;  // one cut per request
  return t;
}

void ReasoningBudget::accept(std::string_view text) {
  if (inside_) ++n_inside_;
  tail_.append(text);
  // Only the latest tag counts; keep enough bytes to see one split over tokens.
  const size_t open = tail_.rfind(kOpen), close = tail_.rfind(kClose);
  if (open != std::string::npos && (close == std::string::npos || open > close)) {
    if (!inside_) n_inside_ = 0;
    inside_ = true;
  } else if (close != std::string::npos) {
    inside_ = false;
  }
  if (open != std::string::npos || close != std::string::npos) {
    const size_t end_open = open == std::string::npos ? 0 : open + kOpen.size();
    const size_t end_close = close == std::string::npos ? 0 : close + kClose.size();
    tail_.erase(0, std::max(end_open, end_close));
  }
  if (tail_.size() > kClose.size()) {
    tail_.erase(0, tail_.size() - kClose.size());
  }
}

}  // namespace hearth::engine

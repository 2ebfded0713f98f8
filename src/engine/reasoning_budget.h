// --reasoning-budget: caps the tokens a request spends inside <think> ... </think>. It
// watches the generated text for the tags and, once `budget` tokens were generated inside
// the block, hands the engine the tokens of the closing text ("\n</think>\n\n") to emit
// instead of sampling, one per step, so the answer still comes. Per request; no model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::engine {

struct ReasoningLimit {
  int32_t budget = -1;                // < 0: no limit
  bool starts_inside = false;         // the prompt ended inside an open <think>
  std::vector<int32_t> close_tokens;  // the tokens of the closing text (non-empty to act)
};

class ReasoningBudget {
 public:
  explicit ReasoningBudget(ReasoningLimit limit);
  // The token to emit now instead of sampling, if the budget is spent.
  std::optional<int32_t> forced();
  // Whether the next forced() returns a token (without taking it).
  bool would_force() const {
    return limit_.budget >= 0 && !limit_.close_tokens.empty() && !done_ &&
           (forcing_ || (inside_ && n_inside_ >= limit_.budget));
  }
  // After every generated token (sampled or forced): the text it decoded to.
  void accept(std::string_view text);
  bool inside() const { return inside_; }
  int32_t n_inside() const { return n_inside_; }

 private:
  ReasoningLimit limit_;
  bool inside_ = false, forcing_ = false, done_ = false;
  int32_t n_inside_ = 0;
  size_t next_forced_ = 0;
  std::string tail_;  // the last bytes generated, to find tags split over tokens
};

}  // namespace hearth::engine

// Prompt-lookup drafting (speculative decoding without a draft model): the tokens that
// followed the latest earlier occurrence of the sequence's last n tokens are proposed as
// its next ones. Code and documents repeat spans of their context (a function rewritten
// with one change, a quoted file), where such a draft is often right; the target model
// verifies every drafted token in one forward pass (serve_engine_spec.cpp), so a wrong
// draft costs rows of that pass, never a wrong token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hearth::engine {

class NgramDrafter {
 public:
  // Match lengths tried, longest first: max_n down to min_n.
  explicit NgramDrafter(int32_t max_n = 3, int32_t min_n = 1);
  // Up to k tokens to follow `tokens` (the sequence so far: prompt and generated), copied
  // from after the latest earlier occurrence of its last n tokens for the longest n that
  // has one (the copy may run into the suffix itself: a repeating pattern continues).
  // Empty when no suffix of at least min_n tokens occurred before.
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t k) const;

 private:
  int32_t max_n_, min_n_;
};

}  // namespace hearth::engine

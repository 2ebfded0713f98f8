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

// Where a draft comes from: the n tokens at `start` equal the sequence's last n (n = 0:
// no match). The match length says how far the draft can be trusted (a one-token match
// is often a common token, a six-token one rarely is), so the drafting policy keeps
// its acceptance per match length (spec_policy.h).
struct NgramMatch {
  int64_t start = -1;
  int32_t n = 0;
};

class NgramDrafter {
 public:
  // Match lengths tried, longest first: max_n down to min_n.
  explicit NgramDrafter(int32_t max_n = 6, int32_t min_n = 1);
  // The latest earlier occurrence of the last n tokens of `tokens` (the sequence so far:
  // prompt and generated) for the longest n in [min_n, max_n] that has one.
  NgramMatch find(std::span<const int32_t> tokens) const;
  // Up to k tokens copied from after the match (the copy may run into the suffix itself:
  // a repeating pattern continues). Empty for no match or k <= 0.
  static std::vector<int32_t> copy(std::span<const int32_t> tokens, const NgramMatch& m, int32_t k);
  // copy(tokens, find(tokens), k).
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int32_t k) const { return copy(tokens, find(tokens), k); }

 private:
  int32_t max_n_, min_n_;
};

}  // namespace hearth::engine

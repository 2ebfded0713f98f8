#include "engine/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace hearth::engine {

NgramDrafter::NgramDrafter(int32_t max_n, int32_t min_n) : max_n_(max_n), min_n_(min_n) {
  if (min_n_ < 1 || max_n_ < min_n_) {
    fail(ErrorKind::kInvalidInput, "spec", "n-gram lengths must satisfy 1 <= min <= max");
  }
}

NgramMatch NgramDrafter::find(std::span<const int32_t> tokens) const {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n_, len - 1); n >= min_n_; --n) {
    const int32_t* suffix = tokens.data() + (len - n);
    // Latest start s < len - n whose n tokens equal the suffix (the match ends before the
    // suffix starts or overlaps it; either way tokens follow it).
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (tokens[static_cast<size_t>(s)] != suffix[0] || !std::equal(suffix, suffix + n, tokens.data() + s)) continue;
      return NgramMatch{s, static_cast<int32_t>(n)};
    }
  }
  return {};
}

std::vector<int32_t> NgramDrafter::copy(std::span<const int32_t> tokens, const NgramMatch& m, int32_t k) {
  if (k <= 0 || m.n <= 0) return {};
  const auto len = static_cast<int64_t>(tokens.size());
  // Copy from start + n on; past the end of what is known, the draft goes on from its own
  // start (the sequence is taken to repeat with period len - n - start), so a short loop
  // still fills k tokens.
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const int64_t p = m.start + m.n + i;
    out.push_back(p < len ? tokens[static_cast<size_t>(p)] : out[static_cast<size_t>(p - len)]);
  }
  return out;
}

}  // namespace hearth::engine

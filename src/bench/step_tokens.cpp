#include "bench/step_tokens.h"

namespace hearth::bench {

namespace {
int32_t spread(int64_t v, int64_t n_vocab) {
  if (n_vocab <= 200) return static_cast<int32_t>(v % n_vocab);
  return static_cast<int32_t>(100 + v % (n_vocab - 200));
}
}  // namespace

int32_t step_prompt_token(int64_t seq, int64_t t, int64_t n_vocab) { return spread(seq * 7919 + t * 104729, n_vocab); }

int32_t step_prefill_token(int64_t t, int64_t n_vocab) { return spread(t * 7919 + 13, n_vocab); }

}  // namespace hearth::bench

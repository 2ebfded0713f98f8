// bench_step's synthetic prompts (bench/step_tokens.h): every id in range for the
// longest prompts (a 32k-token prompt once gave "token id -163842 out of range": the
// index arithmetic overflowed int), and the ids of short prompts unchanged, so earlier
// measurements stay comparable.
#include <gtest/gtest.h>

#include <cstdint>

#include "bench/step_tokens.h"

namespace {

using hearth::bench::step_prefill_token;
using hearth::bench::step_prompt_token;

TEST(BenchStepTokens, LongPromptsStayInTheVocabulary) {
  for (const int64_t n_vocab : {int64_t{248320}, int64_t{151936}, int64_t{128256}, int64_t{32000}, int64_t{320}}) {
    for (int64_t s = 0; s < 64; s += 7) {
      for (int64_t t = 0; t < 131072; ++t) {
        const int32_t id = step_prompt_token(s, t, n_vocab);
        ASSERT_GE(id, 100) << "vocab " << n_vocab << " seq " << s << " token " << t;
        ASSERT_LT(id, n_vocab - 100) << "vocab " << n_vocab << " seq " << s << " token " << t;
      }
    }
    for (int64_t t = 0; t < 131072; ++t) {
      const int32_t id = step_prefill_token(t, n_vocab);
      ASSERT_GE(id, 100);
      ASSERT_LT(id, n_vocab - 100);
    }
  }
}

TEST(BenchStepTokens, TheFailingPromptLength) {
  // Token 32767 of sequence 0 at --prompt 32768: 32767 * 104729 = 3,431,655,143 > 2^31.
  const int64_t n_vocab = 248320;
  EXPECT_EQ(step_prompt_token(0, 32767, n_vocab), 100 + (int64_t{32767} * 104729) % (n_vocab - 200));
  EXPECT_GE(step_prompt_token(0, 32767, n_vocab), 100);
}

TEST(BenchStepTokens, ShortPromptsKeepTheirIds) {
  // The int formula bench_step used before, where it did not overflow.
  const int n_vocab = 151936;
  for (int s = 0; s < 8; ++s) {
    for (int t = 0; t < 4096; ++t) {
      ASSERT_EQ(step_prompt_token(s, t, n_vocab), 100 + (s * 7919 + t * 104729) % (n_vocab - 200));
      ASSERT_EQ(step_prefill_token(t, n_vocab), 100 + (t * 7919 + 13) % (n_vocab - 200));
    }
  }
}

TEST(BenchStepTokens, TinyVocabulary) {
  for (int64_t t = 0; t < 1000; ++t) {
    EXPECT_LT(step_prompt_token(3, t, 150), 150);
    EXPECT_GE(step_prompt_token(3, t, 150), 0);
  }
}

}  // namespace

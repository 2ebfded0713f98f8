// The synthetic token ids of benchmarks/bench_step.cpp (each sequence's prompt and the
// prefill prompt): spread over the vocabulary, the same for every run, and in range for
// any prompt length.
#pragma once

#include <cstdint>

namespace hearth::bench {

// Token t of sequence seq's prompt: 100 + (seq * 7919 + t * 104729) mod (n_vocab - 200), in
// 64-bit arithmetic (in int, t * 104729 overflowed past 20,505 tokens and gave negative
// ids: `bench_step --prompt 32768` failed with "token id -163842 out of range"). A
// vocabulary of at most 200 tokens takes the same sum mod n_vocab.
int32_t step_prompt_token(int64_t seq, int64_t t, int64_t n_vocab);
// Token t of the prefill prompt: 100 + (t * 7919 + 13) mod (n_vocab - 200), likewise.
int32_t step_prefill_token(int64_t t, int64_t n_vocab);

}  // namespace hearth::bench

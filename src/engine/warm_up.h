// A throwaway prompt through a freshly loaded model, before the first request: a GPU
// back-end loads its kernels and libraries' kernels on their first use and sizes its
// scratch memory on the first prompt of a size, which would otherwise land inside the
// first user's time to first token (llama.cpp's server warms up at load for the same
// reason). The prompt runs in its own small KV cache, freed before this returns.
#pragma once

#include <cstdint>

#include "model/causal_lm.h"
#include "ops/backend.h"

namespace hearth::engine {

// Tokens of the warm-up prompt (the common prompt-chunk shape), then a short chunk
// (the batched-decode products) and one decode step. Returns the seconds it took.
constexpr int64_t kWarmUpPrompt = 512;
double warm_up(model::CausalLm& model, ops::Backend& backend, int64_t n_ctx, ops::KvType kv_type);

}  // namespace hearth::engine

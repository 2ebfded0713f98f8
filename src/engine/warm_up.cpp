#include "engine/warm_up.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "model/kv_cache.h"

namespace hearth::engine {

double warm_up(model::CausalLm& model, ops::Backend& backend, int64_t n_ctx, ops::KvType kv_type) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int64_t kChunk = 16;
  const int64_t prompt = std::max<int64_t>(1, std::min<int64_t>(kWarmUpPrompt, n_ctx - kChunk - 1));
  const int64_t ctx = std::min<int64_t>(n_ctx, prompt + kChunk + 1);
  model::KvCache cache(backend, model.hparams(), ctx, kv_type);
  const int64_t n_vocab = model.hparams().n_vocab;
  std::vector<int32_t> tokens(static_cast<size_t>(prompt));
  for (int64_t i = 0; i < prompt; ++i) tokens[i] = static_cast<int32_t>((1 + i * 7919) % n_vocab);
  std::vector<float> logits;
  for (const int64_t n : {prompt, kChunk, int64_t{1}}) {
    if (cache.n_past() + n > ctx) break;
    const std::vector<model::BatchSeq> batch = {{&cache.seq(), tokens.data(), n, true}};
    model.forward_batch(cache.pool(), batch, logits);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace hearth::engine

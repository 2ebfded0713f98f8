// engine::warm_up: a throwaway prompt in its own cache leaves the model's later results
// untouched, and fits any context size.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/warm_up.h"
#include "format/gguf.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"

namespace {

std::vector<float> prompt_logits(hearth::model::CausalLm& model, hearth::ops::Backend& backend,
                                 const std::vector<int32_t>& tokens) {
  hearth::model::KvCache cache(backend, model.hparams(), 64, hearth::ops::KvType::F16);
  std::vector<float> logits;
  const std::vector<hearth::model::BatchSeq> batch = {
      {&cache.seq(), tokens.data(), static_cast<int64_t>(tokens.size()), true}};
  model.forward_batch(cache.pool(), batch, logits);
  const int32_t next = 17;
  const std::vector<hearth::model::BatchSeq> step = {{&cache.seq(), &next, 1, true}};
  std::vector<float> more;
  model.forward_batch(cache.pool(), step, more);
  logits.insert(logits.end(), more.begin(), more.end());
  return logits;
}

}  // namespace

TEST(WarmUp, LeavesLaterResultsBitIdentical) {
  const char* path = std::getenv("HEARTH_DEFAULT_MODEL");
  ASSERT_NE(path, nullptr) << "HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)";
  const hearth::gguf::File file = hearth::gguf::File::open(path);
  hearth::cpu::CpuBackend backend(2);
  const auto model = hearth::model::load_causal_lm(file, backend);
  const std::vector<int32_t> tokens = {1, 504, 3458, 282, 1345, 30, 2};
  const std::vector<float> before = prompt_logits(*model, backend, tokens);
  ASSERT_EQ(before.size(), 2 * static_cast<size_t>(model->hparams().n_vocab));

  // Contexts shorter than the warm-up prompt (kept short here: the full 512-token prompt
  // takes seconds on two cores): it shrinks to fit, down to one token.
  for (const int64_t ctx : {int64_t{100}, int64_t{40}, int64_t{2}}) {
    EXPECT_GT(hearth::engine::warm_up(*model, backend, ctx, hearth::ops::KvType::F32), 0.0) << ctx;
  }
  const std::vector<float> after = prompt_logits(*model, backend, tokens);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(before[i], after[i]) << "logit " << i;
}

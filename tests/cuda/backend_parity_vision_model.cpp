// CUDA back-end, Qwen3.5 with images: the tiny random Qwen3.5-MoE-with-vision fixture's
// vision tower embeddings (within 1e-4 of the largest, relative) and prompt logits with one
// and two images (within 1e-3 of the largest logit) against transformers, the chunked
// prefill and the greedy continuation, all on the GPU (checks: tests/unit/vision_fixture.h).
#include "../unit/vision_fixture.h"
#include "parity_common.h"

namespace {

using namespace parity;

TEST(ParityVisionModel, EncoderMatchesTransformersOnTheGpu) {
  if (!has_gpu()) GTEST_SKIP() << gpu_skip_reason();
  const double e = vision_fixture::check_encoder(gpu());
  std::cout << "model vision tower on " << gpu().name() << " vs transformers: max relative |diff| " << e << "\n";
}

TEST(ParityVisionModel, LanguageModelWithImagesMatchesTransformersOnTheGpu) {
  if (!has_gpu()) GTEST_SKIP() << gpu_skip_reason();
  const double e = vision_fixture::check_lm_with_images(gpu());
  std::cout << "model Qwen3.5-MoE with images on " << gpu().name()
            << " vs transformers: max |logit diff| / max |logit| " << e << "\n";
}

}  // namespace

// The Llama-family model on the default GGUF against llama.cpp's recorded run
// (tests/data/llama_ref, written by scripts/gen_llama_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "model/llama_model.h"

namespace {

// Tolerance on the first-step logits, over llama.cpp's 50 largest. Measured: 0 (bit
// for bit equal) on all 10 prompts, because the CPU back-end reproduces ggml's
// arithmetic: the same 8-bit activation quantization and integer dot products, RoPE
// angles by repeated multiplication, squares summed as ggml sums them, ggml's exp
// approximation in softmax and SiLU, and its summation orders in attention
// (backends/cpu/ggml_order.h). This model amplifies any deviation: one ulp in an
// attention output flips an 8-bit rounding and moves logits by 0.2-1.0 a few layers
// on (that is what a pow()-based RoPE did). So 0.05, the figure the issue suggests,
// passes only an implementation that does the same arithmetic; it leaves room for a
// libm whose cosf/sinf differ in a last bit only where that does not cascade.
constexpr float kLogitTolerance = 0.05f;

// Greedy steps checked per prompt (teacher-forced on llama.cpp's tokens). The fixtures
// hold 64; a sanitizer build checks the first 8, the release build all of them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
constexpr size_t kMaxSteps = 8;
#else
constexpr size_t kMaxSteps = 64;
#endif

std::string default_model() {
  const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
  return p ? p : "";
}

nlohmann::json load_reference() {
  std::ifstream in(HEARTH_SOURCE_DIR "/tests/data/llama_ref/smollm2-135m-q4_1.json");
  if (!in.good()) throw std::runtime_error("reference fixture tests/data/llama_ref/smollm2-135m-q4_1.json missing");
  return nlohmann::json::parse(in);
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

// Every prompt: first-step logits against llama.cpp's within kLogitTolerance; then the
// greedy continuation teacher-forced on llama.cpp's tokens: at each step our argmax must
// be llama.cpp's token or, where not, a near-tie (its logit within kLogitTolerance of
// ours). At most one prompt in eight may have such a step.
TEST(LlamaModel, MatchesLlamaCppOnDefaultModel) {
  const std::string path = default_model();
  ASSERT_FALSE(path.empty()) << "HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)";
  auto file = hearth::gguf::File::open(path);
  hearth::cpu::CpuBackend backend(0);
  hearth::model::LlamaModel model(file, backend);
  const auto ref = load_reference();
  ASSERT_EQ(model.hparams().n_vocab, ref["n_vocab"].get<int64_t>());
  ASSERT_GE(ref["cases"].size(), 8u);

  int n_identical = 0, n_parted = 0, n_cases = 0;
  float worst = 0.0f;
  for (const auto& c : ref["cases"]) {
    ++n_cases;
    std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    hearth::model::KvCache cache(backend, model.hparams(), 256);
    std::vector<float> logits = model.forward(cache, prompt);
    for (const auto& pair : c["first_step_top_logits"]) {
      const int id = pair[0].get<int>();
      const float want = pair[1].get<float>();
      worst = std::max(worst, std::fabs(logits[id] - want));
      EXPECT_NEAR(logits[id], want, kLogitTolerance) << "prompt " << n_cases << " token " << id;
    }
    const auto want_ids = c["greedy_ids"].get<std::vector<int32_t>>();
    ASSERT_FALSE(want_ids.empty());
    bool parted = false;
    for (size_t i = 0; i < std::min(want_ids.size(), kMaxSteps); ++i) {
      const int got = argmax(logits);
      if (got != want_ids[i]) {
        const float gap = logits[got] - logits[want_ids[i]];
        EXPECT_LE(gap, kLogitTolerance) << "prompt " << n_cases << " step " << i << ": got " << got
                                        << ", llama.cpp " << want_ids[i] << ", not a near-tie";
        parted = true;
      }
      if (i + 1 < want_ids.size()) logits = model.forward(cache, {want_ids[i]});
    }
    parted ? ++n_parted : ++n_identical;
  }
  std::cout << "greedy continuations identical: " << n_identical << " / " << n_cases
            << ", parted at a near-tie: " << n_parted << "; worst top-50 logit diff " << worst << "\n";
  EXPECT_LE(n_parted * 8, n_cases) << "more than one prompt in eight parted from llama.cpp";
}

// The f16 KV cache (the default of `hearth run` and `hearth serve`) against the same
// llama.cpp reference (recorded with an f32 cache): the first step's top-50 logits stay
// within kF16Tolerance of llama.cpp's. Rounding K and V to f16 moves this model's logits
// a lot (its outlier activations amplify ulps): llama.cpp itself moves by up to 0.63 on
// these prompts' top 50 between its f32 and f16 caches (llama-cpp-python 0.3.36,
// type_k/type_v 0 vs 1; Hearth's f16 differs from llama.cpp's f32 by up to 0.71), which
// is why greedy continuations can part at near-ties with an f16 cache.
TEST(LlamaModel, F16KvCacheFirstStepStaysClose) {
  constexpr float kF16Tolerance = 1.0f;
  const std::string path = default_model();
  ASSERT_FALSE(path.empty()) << "HEARTH_DEFAULT_MODEL is not set (scripts/test.sh sets it)";
  auto file = hearth::gguf::File::open(path);
  hearth::cpu::CpuBackend backend(0);
  hearth::model::LlamaModel model(file, backend);
  const auto ref = load_reference();
  float worst = 0.0f;
  for (const auto& c : ref["cases"]) {
    std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    hearth::model::KvCache c16(backend, model.hparams(), 256, hearth::ops::KvType::F16);
    const std::vector<float> l16 = model.forward(c16, prompt);
    for (const auto& pair : c["first_step_top_logits"]) {
      worst = std::max(worst, std::fabs(l16[pair[0].get<int>()] - pair[1].get<float>()));
    }
  }
  std::cout << "f16 KV cache: worst first-step top-50 diff vs llama.cpp (f32 cache) " << worst << "\n";
  EXPECT_LE(worst, kF16Tolerance);
}

// Speculative decoding: the prompt-lookup drafter, the drafting policy, and exactness on
// the real default model: verifying drafted tokens in one step gives, row for row, the
// logits of decoding them one at a time, and greedy output with --spec ngram is the
// output without it (engine::generate alone, and ServeEngine with several sequences).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/ngram_drafter.h"
#include "engine/spec_policy.h"
#include "format/gguf.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace engine = hearth::engine;
namespace model = hearth::model;

namespace {

struct Loaded {
  hearth::gguf::File file;
  hearth::cpu::CpuBackend backend{1};
  model::LlamaModel model;
  hearth::tokenizer::Tokenizer tok;
  explicit Loaded(const std::string& path)
      : file(hearth::gguf::File::open(path)), model(file, backend), tok(hearth::tokenizer::Tokenizer::from_gguf(file)) {}
};

std::unique_ptr<Loaded>& loaded() {
  static std::unique_ptr<Loaded> l = [] {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    return p != nullptr && *p != '\0' ? std::make_unique<Loaded>(p) : nullptr;
  }();
  return l;
}

}  // namespace

TEST(SpecModel, VerifiedRowsEqualOneTokenSteps) {
  if (!loaded()) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  Loaded& m = *loaded();
  const std::vector<int32_t> prompt = m.tok.encode("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n");
  const std::vector<int32_t> next = m.tok.encode("    return a - b\n\ndef mul(a, b):\n    return a * b\n");
  for (auto kv : {hearth::ops::KvType::F32, hearth::ops::KvType::F16}) {
    model::KvCache one(m.backend, m.model.hparams(), 256, kv), many(m.backend, m.model.hparams(), 256, kv);
    m.model.forward(one, prompt, false);
    m.model.forward(many, prompt, false);
    // The verification step as the engine lays it out: every row's logits, each row
    // attending as a one-token step.
    model::BatchSeq b{&many.seq(), next.data(), static_cast<int64_t>(next.size()), true};
    b.n_logits = b.n_tokens;
    b.decode_rows = true;
    std::vector<float> all;
    m.model.forward_batch(many.pool(), {b}, all);
    const size_t n_vocab = static_cast<size_t>(m.model.hparams().n_vocab);
    for (size_t i = 0; i < next.size(); ++i) {
      const std::vector<float> row = m.model.forward(one, {next[i]}, false);
      ASSERT_EQ(row.size(), n_vocab);
      EXPECT_EQ(std::memcmp(row.data(), all.data() + i * n_vocab, n_vocab * sizeof(float)), 0)
          << "row " << i << " of " << next.size() << " kv " << static_cast<int>(kv);
    }
  }
}

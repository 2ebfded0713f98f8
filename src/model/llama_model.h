// The Llama-family transformer (llama, qwen2, qwen3, qwen3moe with routed experts):
// RMSNorm, RoPE, grouped-query attention with a KV cache, SwiGLU, tied or separate
// output. Weights are bound by a tensor-name table; the math runs through an
// ops::Backend, so this file knows nothing of CPU or CUDA details.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "format/gguf.h"
#include "model/batch_layout.h"
#include "model/causal_lm.h"
#include "model/hparams.h"
#include "model/kv_cache.h"
#include "model/moe_ffn.h"
#include "ops/backend.h"

namespace hearth::model {

struct LayerWeights {
  ops::WeightView attn_norm, wq, wk, wv, wo;
  std::optional<ops::WeightView> bq, bk, bv;          // qwen2 biases
  std::optional<ops::WeightView> q_norm, k_norm;      // qwen3 per-head norms
  ops::WeightView ffn_norm, ffn_gate, ffn_up, ffn_down;  // dense FFN
  std::optional<MoeWeights> moe;                         // routed experts (qwen3moe) instead
};

class LlamaModel final : public CausalLm {
 public:
  // Binds the weights of `file` (which must outlive the model) for `backend`.
  // Throws Error naming the file and tensor when one is missing or malformed.
  LlamaModel(const gguf::File& file, ops::Backend& backend);

  const Hparams& hparams() const override { return hp_; }
  ops::Backend& backend() override { return backend_; }


 private:
  MoeParams moe_params() const;
  ops::WeightView bind(const std::string& name, std::vector<uint64_t> expect_shape, bool optional_ok = false,
                       bool* found = nullptr);

  const gguf::File& file_;
  ops::Backend& backend_;
  Hparams hp_;
  ops::WeightView tok_embd_, output_norm_, output_;
  std::vector<LayerWeights> layers_;

  // Activations of forward, kept between calls and grown when a larger batch comes.
  struct Scratch {
    int64_t n_tokens = 0;  // capacity in tokens of the per-token buffers below
    std::unique_ptr<ops::Buffer> x, cur, q, k, v, attn, gate, up, moe_out;
    int64_t logits_rows = 0;
    std::unique_ptr<ops::Buffer> logits;
  };
  void reserve_scratch(int64_t n_tokens, int64_t logits_rows);
  // Every sequence's tokens go through the layers together; attention reads each
  // one's own blocks.
  void run(KvPool& pool, std::vector<float>& out) override;
  Scratch scratch_;
};

}  // namespace hearth::model

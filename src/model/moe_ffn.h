// Routed-expert feed-forward (qwen3moe): a softmax router over n_expert experts
// picks the top n_used per token, optionally renormalises their weights, and
// sums weight * down(silu(gate x) * up x) over the chosen experts. Tokens are
// grouped by expert so each expert runs one batched matmul per step.
#pragma once

#include <cstdint>
#include <vector>

#include "format/gguf.h"
#include "ops/backend.h"

namespace hearth::model {

struct MoeParams {
  int64_t n_expert = 0;
  int64_t n_used = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;          // per expert
  bool norm_weights = true;  // divide the chosen experts' probabilities by their sum
};

struct MoeWeights {
  ops::WeightView router;                          // [n_embd -> n_expert]
  std::vector<ops::WeightView> gate, up, down;     // per expert (back-ends without fused_moe)
  // Back-ends with fused_moe(): each projection's experts as one weight (ops::MoeLayer).
  bool fused = false;
  ops::WeightView gate_all, up_all, down_all;
};

// Binds blk.N.ffn_{gate_inp,gate_exps,up_exps,down_exps}.weight, slicing the 3-D
// expert tensors into one view per expert (or, for a back-end with fused_moe(), one
// view per tensor). Throws Error naming the tensor.
MoeWeights bind_moe(const gguf::File& file, ops::Backend& backend, const std::string& prefix, const MoeParams& p);

// Routing decisions for n tokens from router logits ([n, n_expert], host memory):
// expert ids and weights, [n, n_used] each, best first.
void route_top_k(const float* logits, int64_t n, const MoeParams& p, std::vector<int32_t>& ids,
                 std::vector<float>& weights);

// out: [n, n_embd] (overwritten) = the routed FFN of x: [n, n_embd]. Both are back-end buffers.
void moe_ffn(ops::Backend& be, const MoeWeights& w, const MoeParams& p, const float* x, int64_t n, float* out);

}  // namespace hearth::model

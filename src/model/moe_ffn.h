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

// A shared expert (every token's; ops::MoeLayer's shared_* fields): gate / up
// [n_embd -> n_ff], down, and an optional one-row f32 gate (inp) whose sigmoid scales it.
struct SharedExpert {
  const ops::WeightView* gate = nullptr;
  const ops::WeightView* up = nullptr;
  const ops::WeightView* down = nullptr;
  const ops::WeightView* inp = nullptr;
  int64_t n_ff = 0;
};

// Whether the back-end's moe_ffn takes this shared expert together with the routed ones in
// a call of n tokens.
bool moe_takes_shared(ops::Backend& be, const MoeWeights& w, const MoeParams& p, const SharedExpert& shared,
                      int64_t n);

// After the experts (optional): x_res += out, then norm_out = rms_norm(x_res) * norm (the
// residual add and the next norm, Backend::moe_ffn_add_rms_norm). norm_out may alias x.
struct MoeNormAfter {
  float* x_res = nullptr;
  const ops::WeightView* norm = nullptr;
  float eps = 0.0f;
  float* norm_out = nullptr;
};

// out: [n, n_embd] (overwritten) = the routed FFN of x: [n, n_embd], plus the shared expert's
// when `shared` is given (only where moe_takes_shared); then `after` when given. All are
// back-end buffers.
void moe_ffn(ops::Backend& be, const MoeWeights& w, const MoeParams& p, const float* x, int64_t n, float* out,
             const SharedExpert* shared = nullptr, const MoeNormAfter* after = nullptr);

}  // namespace hearth::model

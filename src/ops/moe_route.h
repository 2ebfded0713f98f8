// Routing of a softmax MoE router (qwen3moe / qwen35moe), shared by the model's generic
// expert path and the back-ends that run the experts as one operation on the host.
#pragma once

#include <cstdint>
#include <vector>

namespace hearth::ops {

// Routing decisions for n tokens from router logits ([n, n_expert], host memory): the
// n_used most probable experts per token, best first (ties to the lower index), and their
// softmax probabilities, divided by their sum when norm_weights. ids / weights: [n, n_used].
void route_top_k(const float* logits, int64_t n, int64_t n_expert, int64_t n_used, bool norm_weights,
                 std::vector<int32_t>& ids, std::vector<float>& weights);
// The same for tokens [t0, t1) only, into ids / weights already [n, n_used] (tokens are
// routed independently: ranges may run in parallel).
void route_top_k_rows(const float* logits, int64_t t0, int64_t t1, int64_t n_expert, int64_t n_used,
                      bool norm_weights, int32_t* ids, float* weights);

}  // namespace hearth::ops

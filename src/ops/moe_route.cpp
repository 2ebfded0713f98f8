#include "ops/moe_route.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hearth::ops {

void route_top_k(const float* logits, int64_t n, int64_t n_expert, int64_t n_used, bool norm_weights,
                 std::vector<int32_t>& ids, std::vector<float>& weights) {
  ids.assign(static_cast<size_t>(n * n_used), 0);
  weights.assign(static_cast<size_t>(n * n_used), 0.0f);
  route_top_k_rows(logits, 0, n, n_expert, n_used, norm_weights, ids.data(), weights.data());
}

void route_top_k_rows(const float* logits, int64_t t0, int64_t t1, int64_t n_expert, int64_t n_used,
                      bool norm_weights, int32_t* ids, float* weights) {
  std::vector<float> prob(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = t0; t < t1; ++t) {
    const float* l = logits + t * n_expert;
    const float max_l = *std::max_element(l, l + n_expert);
    double sum = 0.0;
    for (int64_t e = 0; e < n_expert; ++e) {
      prob[e] = std::exp(l[e] - max_l);
      sum += prob[e];
    }
    for (auto& v : prob) v = static_cast<float>(v / sum);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n_used, order.end(),
                      [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
    float chosen = 0.0f;
    for (int64_t k = 0; k < n_used; ++k) chosen += prob[order[k]];
    for (int64_t k = 0; k < n_used; ++k) {
      ids[t * n_used + k] = order[k];
      weights[t * n_used + k] = norm_weights ? prob[order[k]] / chosen : prob[order[k]];
    }
  }
}

}  // namespace hearth::ops

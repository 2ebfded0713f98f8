#include "engine/row_reduce.h"

#include <utility>

namespace hearth::engine {

ops::RowReduce offered_row(Sampler& s, std::span<const int32_t> history, std::vector<ops::PenaltyToken>& pens,
                           bool allow_draw) {
  pens.clear();
  if (s.plain_greedy()) return ops::RowReduce{ops::RowKind::kArgmax};
  const SamplerParams& p = s.params();
  const bool draw = p.temperature > 0.0f;
  if (draw && !allow_draw) return {};
  std::vector<std::pair<int32_t, int32_t>> counts;
  s.penalty_counts(history, counts);
  if (counts.size() > static_cast<size_t>(ops::kMaxPenaltyTokens)) return {};
  for (const auto& [tok, n] : counts) pens.push_back(ops::PenaltyToken{tok, n});
  ops::RowReduce r{draw ? ops::RowKind::kDraw : ops::RowKind::kArgmax};
  if (draw) {
    r.scale = s.draw_scale();
    r.u = s.next_uniform();
    r.top_k = p.top_k;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
  }
  r.n_penalty = static_cast<int32_t>(pens.size());
  r.repeat_penalty = p.repeat_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  return r;
}

}  // namespace hearth::engine

#include "engine/row_reduce.h"

#include <utility>

#include "engine/logit_scan.h"

namespace hearth::engine {

int32_t greedy_pick(const std::vector<ops::ArgmaxRow>& picks, std::span<const float> logits, size_t row,
                    size_t n_vocab) {
  if (row < picks.size()) return picks[row].bad >= 0 ? -1 : picks[row].argmax;
  if (n_vocab == 0 || logits.size() < (row + 1) * n_vocab) return -1;
  const std::span<const float> r = logits.subspan(row * n_vocab, n_vocab);
  return first_non_finite(r) >= 0 ? -1 : static_cast<int32_t>(argmax_first(r));
}

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

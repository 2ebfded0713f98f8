// How a sequence's next-token row can be offered to the back-end (ops::RowReduce): its
// argmax (greedy), or its draw (temperature), with the penalties' token counts, so that a
// back-end that reduces rows where the logits are need not copy the row to the host.
#pragma once

#include <span>
#include <vector>

#include "engine/sampler.h"
#include "ops/backend.h"

namespace hearth::engine {

// The row's reduction for sampler s after `history`, its penalty tokens in pens (the
// first RowReduce::n_penalty). kCopy when the back-end cannot take it: more distinct
// penalized tokens than ops::kMaxPenaltyTokens, or a draw when allow_draw is false (a draw
// takes its uniform number from s now, as sampling afterwards would).
ops::RowReduce offered_row(Sampler& s, std::span<const int32_t> history, std::vector<ops::PenaltyToken>& pens,
                           bool allow_draw);

// Output row `row` of a step whose rows were asked for as argmax only (a greedy draft):
// the back-end's pick where it reduced the rows (picks), else the argmax of the row's
// logits ([rows, n_vocab]); -1 when the row is not finite or not there.
int32_t greedy_pick(const std::vector<ops::ArgmaxRow>& picks, std::span<const float> logits, size_t row,
                    size_t n_vocab);

}  // namespace hearth::engine

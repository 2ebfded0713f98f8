// Qwen3.5's 3-D rotary positions for a prompt with images (transformers'
// get_rope_index): text rows count up on all three axes; an image's tokens (its merged
// grid, row-major) sit at (start, start + row, start + column) for a still image, and
// the text after it resumes at start + max(grid rows, grid columns). Rows after the
// prompt (generated tokens) continue from where the prompt ended.
#pragma once

#include <cstdint>
#include <vector>

#include "model/batch_layout.h"

namespace hearth::model {

// One image's tokens in a prompt: rows first_row .. first_row + t * h * w, where t, h, w
// is its grid in language-model tokens (the patch grid divided by the merge size).
struct ImageGrid {
  int64_t first_row = 0;
  int64_t t = 1, h = 0, w = 0;
  int64_t n_tokens() const { return t * h * w; }
};

// Fills media.pos3 and media.tail_shift for a prompt of n_prompt rows holding `images`
// (in prompt order, not overlapping). Throws Error(kInternal) when an image lies outside
// the prompt or images overlap.
void qwen_vl_positions(int64_t n_prompt, const std::vector<ImageGrid>& images, SeqMedia& media);

}  // namespace hearth::model

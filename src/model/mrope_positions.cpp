#include "model/mrope_positions.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hearth::model {

void qwen_vl_positions(int64_t n_prompt, const std::vector<ImageGrid>& images, SeqMedia& media) {
  media.pos3.assign(static_cast<size_t>(n_prompt * 3), 0);
  int64_t row = 0, pos = 0;
  auto text_until = [&](int64_t end) {
    for (; row < end; ++row, ++pos)
      for (int a = 0; a < 3; ++a) media.pos3[static_cast<size_t>(row * 3 + a)] = static_cast<int32_t>(pos);
  };
  for (const ImageGrid& g : images) {
    if (g.first_row < row || g.t <= 0 || g.h <= 0 || g.w <= 0 || g.first_row + g.n_tokens() > n_prompt)
      fail(ErrorKind::kInternal, "model", "an image of " + std::to_string(g.n_tokens()) + " tokens at row " +
                                              std::to_string(g.first_row) + " does not fit a prompt of " +
                                              std::to_string(n_prompt) + " rows after row " + std::to_string(row));
    text_until(g.first_row);
    for (int64_t t = 0; t < g.t; ++t)
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t w = 0; w < g.w; ++w, ++row) {
          int32_t* p = &media.pos3[static_cast<size_t>(row * 3)];
          p[0] = static_cast<int32_t>(pos + t);
          p[1] = static_cast<int32_t>(pos + h);
          p[2] = static_cast<int32_t>(pos + w);
        }
    pos += std::max(g.h, g.w);
  }
  text_until(n_prompt);
  media.tail_shift = static_cast<int32_t>(pos - n_prompt);
}

}  // namespace hearth::model

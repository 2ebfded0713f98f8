// The exact product of a test weight (its dequantized values) with inputs x (f32, or the
// double values of quantized activations, q8_ref.h), summed in double: what the CUDA
// matrix products are bounded against.
#pragma once

#include <cstdint>
#include <vector>

#include "parity_common.h"
#include "quant/dequant_ref.h"

namespace parity {

template <class X>
std::vector<float> exact_matmul(const WeightPair& w, const std::vector<X>& x, int64_t n_tok) {
  const int64_t rows = w.c.n_rows, cols = w.c.n_cols;
  std::vector<float> row(static_cast<size_t>(cols)), y(static_cast<size_t>(n_tok * rows));
  for (int64_t r = 0; r < rows; ++r) {
    hearth::dequantize_row_ref(w.c.type, w.bytes.data() + r * w.c.row_bytes, row.data(), cols);
    for (int64_t t = 0; t < n_tok; ++t) {
      double s = 0;
      for (int64_t i = 0; i < cols; ++i) s += static_cast<double>(row[i]) * x[t * cols + i];
      y[t * rows + r] = static_cast<float>(s);
    }
  }
  return y;
}

}  // namespace parity

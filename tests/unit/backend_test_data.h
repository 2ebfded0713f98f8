// Random inputs shared by the CPU back-end tests: normal floats from a seed, and weight
// matrices quantized with the reference quantizers.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "format/ggml_types.h"
#include "ops/backend.h"
#include "quant/quant_ref.h"

namespace hearth::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A weight matrix in `type` with its storage; `view` points into `data`.
struct QuantWeight {
  std::vector<uint8_t> data;
  ops::WeightView view;
};

// n_rows x n_cols of `values` (row-major) quantized row by row with the reference quantizer.
inline QuantWeight quantize_weight(GgmlType type, const std::vector<float>& values, int64_t n_rows, int64_t n_cols) {
  QuantWeight w;
  const auto rb = static_cast<size_t>(*ggml_row_bytes(type, static_cast<uint64_t>(n_cols)));
  w.data.resize(rb * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) quantize_row_ref(type, values.data() + r * n_cols, w.data.data() + r * rb, n_cols);
  w.view = ops::WeightView{"w", type, w.data.data(), n_cols, n_rows, rb};
  return w;
}

// A KV pool of n_blocks blocks of `type` in plain host memory, every byte -7.0f's pattern to
// start with (rows are written through the back-end's store_kv).
struct KvTestPool {
  ops::KvType type;
  int64_t block_size, n_kv_dim;
  std::vector<float> k, v;
  KvTestPool(ops::KvType t, int64_t bs, int64_t n_blocks, int64_t dim)
      : type(t), block_size(bs), n_kv_dim(dim),
        k(static_cast<size_t>((n_blocks * bs * ops::kv_row_bytes(t, dim) + 3) / 4), -7.0f), v(k) {}
  ops::KvLayer layer() { return {k.data(), v.data(), type, block_size, n_kv_dim}; }
  int64_t row_bytes() const { return ops::kv_row_bytes(type, n_kv_dim); }
};

}  // namespace hearth::test

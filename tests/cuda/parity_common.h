// Shared by the CUDA parity tests (backend_parity_test.cpp: the operations;
// backend_parity_models.cpp: whole models): the two back-ends, random inputs, the
// error measure and buffers / weights prepared on both.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../unit/model_tiny_builder.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda_info.h"
#include "convert/hf_import.h"
#include "model/causal_lm.h"
#include "ops/backend.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"
#include "q8_ref.h"

namespace parity {
using hearth::GgmlType;
namespace ops = hearth::ops;
namespace model = hearth::model;
using json = nlohmann::json;

// The back-ends under test (backend_parity_test.cpp): the first CUDA device, absent
// when none is visible (gpu_skip_reason() says why), and a 4-thread CPU back-end.
bool has_gpu();
const std::string& gpu_skip_reason();
ops::Backend& gpu();
hearth::cpu::CpuBackend& cpu();


#define NEED_GPU() \
  if (!::parity::has_gpu()) GTEST_SKIP() << ::parity::gpu_skip_reason()

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> randu(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    m = std::max(m, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return m / scale;
}

// A buffer on each back-end holding the same values.
struct Both {
  std::unique_ptr<ops::Buffer> c, g;
  int64_t n = 0;
  explicit Both(const std::vector<float>& v) : n(static_cast<int64_t>(v.size())) {
    c = cpu().alloc(n);
    g = gpu().alloc(n);
    cpu().copy_from_host(v.data(), n, *c, 0);
    gpu().copy_from_host(v.data(), n, *g, 0);
  }
  explicit Both(int64_t size, bool lazy = false) : n(size) {
    c = lazy ? cpu().alloc_lazy(n) : cpu().alloc(n);
    g = lazy ? gpu().alloc_lazy(n) : gpu().alloc(n);
  }
  std::vector<float> cv() {
    std::vector<float> v(static_cast<size_t>(n));
    cpu().copy_to_host(*c, 0, n, v.data());
    return v;
  }
  std::vector<float> gv() {
    std::vector<float> v(static_cast<size_t>(n));
    gpu().copy_to_host(*g, 0, n, v.data());
    return v;
  }
  double err() { return rel_err(gv(), cv()); }
};

// A weight prepared for each back-end (the bytes stay alive here).
struct WeightPair {
  std::vector<uint8_t> bytes;
  ops::WeightView c, g;
};

inline std::unique_ptr<WeightPair> make_weight(GgmlType type, const std::vector<float>& values, int64_t rows, int64_t cols) {
  auto w = std::make_unique<WeightPair>();
  w->bytes = tiny::encode(type, values, cols);
  ops::WeightView v{"w", type, w->bytes.data(), cols, rows, w->bytes.size() / static_cast<size_t>(rows)};
  w->g = gpu().prepare_weight(v);
  w->c = cpu().prepare_weight(v);
  return w;
}

// A MoE layer over GPU weights (router, stacked gate / up / down).
inline ops::MoeLayer gpu_moe_layer(const WeightPair& router, const WeightPair& gate, const WeightPair& up,
                                   const WeightPair& down, int64_t n_expert, int64_t n_used, int64_t n_embd,
                                   int64_t n_ff) {
  ops::MoeLayer L;
  L.router = &router.g;
  L.gate = &gate.g;
  L.up = &up.g;
  L.down = &down.g;
  L.n_expert = n_expert;
  L.n_used = n_used;
  L.n_embd = n_embd;
  L.n_ff = n_ff;
  return L;
}

}  // namespace parity

// The CUDA tests' model of the CPU's Q8_K activations (tests/cuda/q8_ref.h, q8k_values)
// against the CPU back-end itself: the GPU's q8_gemm is checked against that model, and
// it claims the CPU's integer dot products, so the model must be the CPU's quantizer
// value for value (reference and the kernel the CPU picks for Q4_K weights).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../cuda/q8_ref.h"
#include "backends/cpu/quant_dot.h"
#include "quant/blocks.h"

namespace {

using hearth::quant::BlockQ8_K;

std::vector<double> dequantized(void (*quantize)(const float*, void*, int64_t), const std::vector<float>& x) {
  const size_t nb = x.size() / 256;
  std::vector<BlockQ8_K> blocks(nb);
  quantize(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  std::vector<double> out(x.size());
  for (size_t b = 0; b < nb; ++b) {
    float d = 0.0f;
    std::memcpy(&d, blocks[b].d, sizeof d);
    for (int j = 0; j < 256; ++j) out[b * 256 + j] = static_cast<double>(d) * blocks[b].qs[j];
  }
  return out;
}

std::vector<float> test_rows() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(256 * 64);
  for (auto& v : x) v = nd(rng);
  // Block 1 all zeros; block 2 its extreme twice with opposite signs (the first one
  // sets the sign); block 3 a negative extreme; block 4 values on rounding ties.
  for (int j = 0; j < 256; ++j) x[256 + j] = 0.0f;
  x[512 + 10] = 9.0f;
  x[512 + 20] = -9.0f;
  x[768 + 5] = -20.0f;
  for (int j = 0; j < 256; ++j) x[1024 + j] = j % 2 ? 0.5f : -1.5f;
  x[1024] = -127.0f;
  return x;
}

TEST(Q8kReference, MatchesTheCpuQuantizerValueForValue) {
  const std::vector<float> x = test_rows();
  const std::vector<double> model = q8k_values(x);
  const std::vector<double> cpu = dequantized(hearth::cpu::ref::quantize_q8_k, x);
  ASSERT_EQ(model.size(), cpu.size());
  for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(model[i], cpu[i]) << "value " << i;
  // The quantizer the CPU actually runs for Q4_K weights (SIMD where the CPU has it).
  const hearth::cpu::DotKernel* k = hearth::cpu::find_dot_kernel(hearth::GgmlType::Q4_K);
  ASSERT_NE(k, nullptr);
  ASSERT_EQ(k->act_type, hearth::GgmlType::Q8_K);
  const std::vector<double> picked = dequantized(k->quantize_act, x);
  for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(model[i], picked[i]) << "value " << i << " (" << k->isa << ")";
}

}  // namespace

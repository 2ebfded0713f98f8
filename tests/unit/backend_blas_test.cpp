// The CPU back-end's float-weight products through BLAS (cpu_blas.cpp) against the
// bit-exact path they replace for many tokens: within a tolerance where BLAS runs
// (from kBlasMinTokens tokens, kBlasMinWeights weights up), and bit for bit below that,
// in deterministic mode and with the reference kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend_test_data.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_ref.h"
#include "core/half.h"

namespace {

using hearth::GgmlType;
using hearth::test::random_floats;
using hearth::ops::WeightView;
namespace cpu = hearth::cpu;

// A float weight matrix of n_rows x n_cols in f32, f16 or bf16, and its view.
struct FloatWeight {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  WeightView view;
};

FloatWeight float_weight(GgmlType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
  FloatWeight w;
  w.f32 = random_floats(static_cast<size_t>(n_rows * n_cols), seed, 0.5f);
  if (type == GgmlType::F32) {
    w.view = WeightView{"w", type, w.f32.data(), n_cols, n_rows, static_cast<uint64_t>(n_cols) * 4};
    return w;
  }
  w.half.resize(w.f32.size());
  for (size_t i = 0; i < w.f32.size(); ++i) {
    w.half[i] = type == GgmlType::F16 ? hearth::f32_to_f16(w.f32[i]) : hearth::f32_to_bf16(w.f32[i]);
  }
  w.view = WeightView{"w", type, w.half.data(), n_cols, n_rows, static_cast<uint64_t>(n_cols) * 2};
  return w;
}

// The bit-exact path's outputs: ref::dot of each dequantized row and token, and the
// magnitudes sum |w x| for the tolerance.
void reference(const WeightView& w, const std::vector<float>& x, int64_t n_tokens, std::vector<float>& y,
               std::vector<double>& mag) {
  y.assign(static_cast<size_t>(n_tokens * w.n_rows), 0.0f);
  mag.assign(y.size(), 0.0);
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  for (int64_t r = 0; r < w.n_rows; ++r) {
    cpu::ref::dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x.data() + t * w.n_cols;
      y[t * w.n_rows + r] = cpu::ref::dot(row.data(), xt, w.n_cols);
      double m = 0.0;
      for (int64_t i = 0; i < w.n_cols; ++i) m += std::fabs(static_cast<double>(row[i]) * xt[i]);
      mag[t * w.n_rows + r] = m;
    }
  }
}

// Whether sgemm ran since the last call (the op timing table, cleared so that nothing
// is printed).
bool ran_blas(cpu::CpuBackend& be) {
  bool ran = false;
  for (const auto& row : be.op_timing_rows()) ran = ran || row.op == "matmul blas";
  be.reset_op_timing();
  return ran;
}

// Float sums of n_cols products in any order are within n_cols * 2^-24 * sum |w x|
// of each other (the first-order bound); sgemm's blocked sums stay well inside it.
double tolerance(int64_t n_cols, double mag) { return 2.0 * static_cast<double>(n_cols) * 0x1p-24 * mag + 1e-30; }

const char* name(GgmlType t) { return t == GgmlType::F32 ? "f32" : t == GgmlType::F16 ? "f16" : "bf16"; }

TEST(CpuBlas, MatchesBitExactPathWithinTolerance) {
  struct Shape {
    int64_t n_rows, n_cols;
  };
  // Odd sizes: rows not a multiple of the 256-row conversion blocks nor of 16, columns
  // not a multiple of any vector width; one just at kBlasMinWeights, one below it.
  const Shape shapes[] = {{300, 257}, {513, 130}, {1000, 71}, {256, 256}, {255, 256}};
  for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (const Shape s : shapes) {
      const auto w = float_weight(type, s.n_rows, s.n_cols, 3);
      for (const int64_t n_tokens : {cpu::kBlasMinTokens - 1, cpu::kBlasMinTokens, cpu::kBlasMinTokens + 1, int64_t{77}}) {
        const auto x = random_floats(static_cast<size_t>(n_tokens * s.n_cols), 5);
        std::vector<float> want;
        std::vector<double> mag;
        reference(w.view, x, n_tokens, want, mag);
        cpu::CpuBackend be(2), det(2), plain(1, /*reference_kernels=*/true);
        ASSERT_TRUE(det.set_deterministic(true));
        be.set_op_timing(true);
        std::vector<float> y(want.size()), y_det(want.size()), y_plain(want.size());
        be.matmul(w.view, x.data(), n_tokens, y.data());
        det.matmul(w.view, x.data(), n_tokens, y_det.data());
        plain.matmul(w.view, x.data(), n_tokens, y_plain.data());
        const std::string what = std::string(name(type)) + " " + std::to_string(s.n_rows) + "x" +
                                 std::to_string(s.n_cols) + " tokens " + std::to_string(n_tokens);
        // Deterministic mode and the reference kernels keep the old bits.
        EXPECT_EQ(y_det, want) << what;
        EXPECT_EQ(y_plain, want) << what;
        const bool blas = n_tokens >= cpu::kBlasMinTokens && s.n_rows * s.n_cols >= cpu::kBlasMinWeights;
        EXPECT_EQ(ran_blas(be), blas) << what;
        if (!blas) {
          EXPECT_EQ(y, want) << what;
          continue;
        }
        int bad = 0;
        for (size_t i = 0; i < y.size() && bad < 5; ++i) {
          if (std::fabs(static_cast<double>(y[i]) - want[i]) > tolerance(s.n_cols, mag[i])) {
            ++bad;
            ADD_FAILURE() << what << " output " << i << ": " << y[i] << " vs " << want[i] << " (sum |wx| " << mag[i]
                          << ")";
          }
        }
      }
    }
  }
}

// Turning deterministic mode back off brings BLAS back; a matrix of the Qwen3.5 vision
// tower's width with a block of tokens, through matmul_multi (one by one for float
// weights), gives what one matmul each gives.
TEST(CpuBlas, DeterministicToggleAndMatmulMulti) {
  const int64_t n_cols = 1152, n_tokens = 64;
  const auto a = float_weight(GgmlType::F16, 600, n_cols, 7), b = float_weight(GgmlType::F16, 300, n_cols, 8);
  const auto x = random_floats(static_cast<size_t>(n_tokens * n_cols), 9);
  cpu::CpuBackend be(2);
  be.set_op_timing(true);
  std::vector<float> want, ya(n_tokens * 600), yb(n_tokens * 300), za(ya.size()), zb(yb.size());
  std::vector<double> mag;
  reference(a.view, x, n_tokens, want, mag);
  ASSERT_TRUE(be.set_deterministic(true));
  be.matmul(a.view, x.data(), n_tokens, za.data());
  EXPECT_EQ(za, want);
  EXPECT_FALSE(ran_blas(be));
  ASSERT_TRUE(be.set_deterministic(false));
  const WeightView* ws[] = {&a.view, &b.view};
  float* ys[] = {ya.data(), yb.data()};
  be.matmul_multi(ws, 2, x.data(), n_tokens, ys);
  EXPECT_TRUE(ran_blas(be));
  be.matmul(a.view, x.data(), n_tokens, za.data());
  be.matmul(b.view, x.data(), n_tokens, zb.data());
  EXPECT_EQ(ya, za);
  EXPECT_EQ(yb, zb);
  for (size_t i = 0; i < ya.size(); ++i) ASSERT_LE(std::fabs(static_cast<double>(ya[i]) - want[i]), tolerance(n_cols, mag[i])) << i;
}

}  // namespace

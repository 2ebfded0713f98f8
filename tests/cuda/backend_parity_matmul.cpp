// The matrix products as one op family (cuda_matmul_family.h): one table of cases (every
// weight type the back-end takes, shapes of the models' matrices, token counts from decode
// to prompt chunks) on which every variant that takes a case runs, bounded by the
// arithmetic it declares against the exact product of the dequantized weights; and the
// dispatch: which variant matmul picks for each case, against the policy written out.
#include <iostream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_matmul_family.h"
#include "backends/cuda/quant_cuda.h"
#include "exact_matmul.h"
#include "parity_common.h"
#include "q8_ref.h"

namespace {

using namespace parity;
using hearth::cuda::CudaBackend;
using hearth::cuda::MatmulMath;

const GgmlType kTableTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                                GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                                GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::MXFP4};

CudaBackend& cuda_be() { return dynamic_cast<CudaBackend&>(gpu()); }

// The bound each declared arithmetic is held to, and the inputs it is exact for.
double bound(MatmulMath m) { return m == MatmulMath::kF16 ? 2e-3 : 1e-4; }

TEST(CudaParity, MatmulVariantsTable) {
  NEED_GPU();
  CudaBackend& be = cuda_be();
  int runs = 0;
  // (The exact products in double are the test's cost: the larger shape at fewer counts.)
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{384, 1024}, {1088, 2048}})
  for (GgmlType type : kTableTypes) {
    const auto w = make_weight(type, randn(static_cast<size_t>(rows * cols), 17, 0.5f), rows, cols);
    const std::vector<int64_t> counts = rows < 1000 ? std::vector<int64_t>{1, 5, 8, 9, 64, 100}
                                                    : std::vector<int64_t>{1, 9, 64};
    for (int64_t n_tok : counts) {
      const auto x = randn(static_cast<size_t>(n_tok * cols), 500 + static_cast<uint32_t>(n_tok));
      Both xb(x);
      const auto exact = exact_matmul(*w, x, n_tok);
      std::vector<float> exact_q8, exact_q8k;
      for (const CudaBackend::MatmulVariant& v : CudaBackend::matmul_variants()) {
        if (!be.matmul_takes(v, w->g, n_tok)) continue;
        Both yb(n_tok * rows);
        be.matmul_variant(v, w->g, xb.g->data(), n_tok, yb.g->data());
        const std::vector<float>* ref = &exact;
        if (v.math == MatmulMath::kQ8 || (v.math == MatmulMath::kQ8Gemm && !hearth::cuda::q8_gemm_uses_q8k())) {
          if (exact_q8.empty()) exact_q8 = exact_matmul(*w, q8_values(x), n_tok);
          ref = &exact_q8;
        } else if (v.math == MatmulMath::kQ8Gemm) {
          if (exact_q8k.empty()) exact_q8k = exact_matmul(*w, q8k_values(x), n_tok);
          ref = &exact_q8k;
        }
        const double e = rel_err(yb.gv(), *ref);
        const std::string what = std::string(v.name) + " " + std::string(hearth::ggml_type_name(type)) + " [" +
                                 std::to_string(rows) + "x" + std::to_string(cols) + "] n=" + std::to_string(n_tok);
        EXPECT_LE(e, bound(v.math)) << what;
        std::cout << "matmul variant " << what << ": " << e << "\n";
        ++runs;
      }
    }
  }
  EXPECT_GE(runs, 100);
}

// The dispatch policy, written out as the chain of rules it replaced: matmul_pick must
// agree on every case (types x shapes x token counts), so that moving products into a
// table changed no product's kernel.
std::string policy(const CudaBackend& be, const ops::WeightView& w, int64_t n) {
  const bool gemm8 = be.int8_gemm_takes(w, n);
  if (n <= hearth::cuda::kMaxMatvecTokens && !gemm8) {
    return hearth::cuda::q8_matvec_supported(w.type) ? "matvec q8" : "matvec";
  }
  if (w.type == GgmlType::F32) return w.n_rows <= 1024 && w.row_bytes % 4 == 0 ? "small f32" : "sgemm f32";
  if (gemm8) return "q8 gemm";
  if (w.n_rows > 512 && n <= 64 && hearth::cuda::quant_gemm_supported(w.type)) return "qgemm";
  const bool half = w.type == GgmlType::F16 || w.type == GgmlType::BF16;
  if (w.n_rows <= 512 || (half && w.n_rows * w.n_cols <= (int64_t{4} << 20))) {
    return w.n_rows <= 1024 ? "dequant+small f32" : "dequant+sgemm f32";
  }
  return "f16 gemm";
}

TEST(CudaParity, MatmulDispatchFollowsPolicy) {
  NEED_GPU();
  const CudaBackend& be = cuda_be();
  int checked = 0;
  for (GgmlType type : kTableTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 256}, {256, 4096}, {512, 2048}, {1024, 1024},
                              {2048, 2048}, {4096, 4096}, {12288, 4096}, {248320, 4096}}) {
      const uint64_t row_bytes = hearth::ggml_row_bytes(type, static_cast<uint64_t>(cols)).value_or(0);
      const ops::WeightView w{"w", type, nullptr, cols, rows, row_bytes};
      for (int64_t n : {1, 2, 3, 4, 8, 9, 16, 32, 64, 65, 128, 512, 2048}) {
        EXPECT_EQ(be.matmul_pick(w, n).name, policy(be, w, n))
            << hearth::ggml_type_name(type) << " [" << rows << "x" << cols << "] n=" << n;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 1000);
}

}  // namespace

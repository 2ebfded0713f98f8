// The CPU back-end's float-weight products of many tokens (a prompt, an image's
// patches) through OpenBLAS's sgemm: Y[t, r] = sum_k X[t, k] W[r, k] is
// sgemm(RowMajor, NoTrans, Trans) of X [n_tokens, n_cols] and W [n_rows, n_cols].
// F32 weights are read in place; F16 / BF16 rows are converted kBlasRows at a time
// into one scratch block (no f32 copy of the model), each block one sgemm writing its
// columns of Y. Both run on the calling thread, never inside Hearth's pool: sgemm's own
// threads keep spinning a while after each call, and a pool job between two sgemms
// (the conversion split over the pool was tried) then fights them for the cores; on 2
// cores that made the conversion 2-4x slower than on one thread.
// sgemm's sums are ordered by its blocking, not like ref::dot, and its kernels depend on
// the batch's shape: so this path is off in deterministic mode and for the reference
// kernels, where every row keeps the bit-exact dot products of matmul.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "backends/cpu/cpu_backend.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kBlasRows = 256;  // f16 / bf16 rows converted per sgemm

// f16 -> f32, exact (subnormals, infinities and NaNs included) and branch-free on 8
// lanes of GCC vectors (any target; core/half.h's f16_to_f32 is a call per value): the
// exponent and mantissa shifted into place and rebiased; infinities / NaNs get the rest
// of the exponent; zeros / subnormals are normalised by subtracting 2^-14.
#pragma GCC diagnostic ignored "-Wpsabi"  // internal inline vector values only
typedef uint16_t vh8 __attribute__((vector_size(16)));
typedef uint32_t vu8 __attribute__((vector_size(32)));
typedef float vf8 __attribute__((vector_size(32)));

inline vu8 f16_bits8(vh8 h16) {
  const vu8 h = __builtin_convertvector(h16, vu8);
  const vu8 em = (h & 0x7fffu) << 13, exp = em & 0x0f800000u;
  vu8 u = em + ((127u - 15u) << 23);
  u += reinterpret_cast<vu8>(exp == 0x0f800000u) & ((128u - 16u) << 23);
  const vf8 sub = reinterpret_cast<vf8>(u + (1u << 23)) - 0x1p-14f;
  u = exp == 0u ? reinterpret_cast<vu8>(sub) : u;
  return u | ((h & 0x8000u) << 16);
}

void f16_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  vh8 h;
  for (; i + 8 <= n; i += 8) {
    std::memcpy(&h, src + i, sizeof h);
    const vu8 u = f16_bits8(h);
    std::memcpy(dst + i, &u, sizeof u);
  }
  if (i < n) {
    uint16_t tail[8] = {};
    std::memcpy(tail, src + i, sizeof(uint16_t) * static_cast<size_t>(n - i));
    std::memcpy(&h, tail, sizeof h);
    const vu8 u = f16_bits8(h);
    std::memcpy(dst + i, &u, sizeof(float) * static_cast<size_t>(n - i));
  }
}

void bf16_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, sizeof u);
  }
}

}  // namespace

void blas_init(int n_threads) {
  // OpenBLAS's thread count is process-wide: the first back-end sets it (every back-end
  // of a process normally has the same thread count).
  static std::once_flag once;
  std::call_once(once, [n_threads] { openblas_set_num_threads(std::max(1, n_threads)); });
}

bool CpuBackend::matmul_blas(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  if (deterministic_ || reference_kernels_ || n_tokens < kBlasMinTokens || w.n_rows * w.n_cols < kBlasMinWeights) {
    return false;
  }
  if (w.type != GgmlType::F32 && w.type != GgmlType::F16 && w.type != GgmlType::BF16) return false;
  if (w.type == GgmlType::F32 && w.row_bytes % sizeof(float) != 0) return false;
  const auto m = static_cast<blasint>(n_tokens), k = static_cast<blasint>(w.n_cols);
  const auto ldc = static_cast<blasint>(w.n_rows);
  if (w.type == GgmlType::F32) {
    const OpScope timer(op_times_.get(), "matmul blas");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, ldc, k, 1.0f, x, k, static_cast<const float*>(w.data),
                static_cast<blasint>(w.row_bytes / sizeof(float)), 0.0f, y, ldc);
    return true;
  }
  const int64_t block = std::min(kBlasRows, w.n_rows);
  blas_rows_.resize(static_cast<size_t>(block * w.n_cols));
  float* rows = blas_rows_.data();
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += block) {
    const int64_t nr = std::min(block, w.n_rows - r0);
    {
      const OpScope timer(op_times_.get(), "matmul blas convert");
      for (int64_t r = 0; r < nr; ++r) {
        const auto* src = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(w.data) +
                                                            static_cast<uint64_t>(r0 + r) * w.row_bytes);
        (w.type == GgmlType::F16 ? f16_row : bf16_row)(src, rows + r * w.n_cols, w.n_cols);
      }
    }
    const OpScope timer(op_times_.get(), "matmul blas");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<blasint>(nr), k, 1.0f, x, k, rows, k, 0.0f,
                y + r0, ldc);
  }
  return true;
}

}  // namespace hearth::cpu

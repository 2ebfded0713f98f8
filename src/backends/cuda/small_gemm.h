// Products of f32 weights with few rows (the Gated DeltaNet's alpha / beta projections,
// MoE routers, dequantized small weights) and many tokens: y[t * n_rows + r] =
// sum_c w[r * ldw + c] * x[t * n_cols + c]. cuBLAS's SGEMM took 0.4-0.5 ms a call for
// these shapes on the H200 (32 or 256 rows, 2048 columns, 512 tokens); tiles of 32 rows
// x 32 tokens, the columns split over blocks when the rows are few. Deterministic and
// batch-invariant: the splits depend on the weight's shape only, their partial sums are
// added in a fixed order.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hearth::cuda {

// Scratch bytes small_gemm needs for this shape (0 when no column split is used).
size_t small_gemm_scratch_bytes(int64_t n_rows, int64_t n_cols, int64_t n_tokens);
// w: n_rows x n_cols, row stride ldw floats; x: n_tokens x n_cols (dense); y: n_tokens x
// n_rows. scratch: small_gemm_scratch_bytes (may be null when that is 0).
void small_gemm(const float* w, int64_t ldw, int64_t n_rows, int64_t n_cols, const float* x, int64_t n_tokens,
                float* y, void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace hearth::cuda

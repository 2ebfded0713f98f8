// The CUDA back-end's matrix products as one op family: a table of variants, each with
// its name, the arithmetic it does (what the parity test bounds it by), the calls it
// computes correctly (takes: types, shapes, token counts) and where the dispatch sends
// it (prefers: the measured thresholds and precision rules that pick among variants that
// take a call). CudaBackend::matmul runs the first variant in table order that takes and
// prefers the call; tests/cuda/backend_parity_matmul.cpp runs every variant on every case
// of one table that it takes, against the exact product (like ggml's test-backend-ops).
// The batch-invariant products of --deterministic are their own family (matmul_invariant,
// tests/cuda/backend_parity_invariance.cpp). Host-only header (no CUDA syntax).
#pragma once

#include <cstdint>

#include "backends/cuda/cuda_backend.h"

namespace hearth::cuda {

// What a variant's result is exact to (its activations' rounding, in the parity test's terms).
enum class MatmulMath {
  kQ8,     // weights' integers times x quantized to 8 bits in blocks of 32 (Q8_0-like)
  kQ8Gemm, // the same in the block form q8_gemm uses (Q8_K per 256 where q8_gemm_uses_q8k())
  kF32,    // f32 activations, f32 sums
  kF16,    // activations rounded to f16, f32 sums (tensor cores)
};

struct CudaBackend::MatmulVariant {
  const char* name;   // e.g. "matvec q8"
  const char* timer;  // its row in the op timing table, e.g. "matmul matvec q8"
  MatmulMath math;
  bool (CudaBackend::*takes)(const ops::WeightView& w, int64_t n_tokens) const;
  bool (CudaBackend::*prefers)(const ops::WeightView& w, int64_t n_tokens) const;
  void (CudaBackend::*run)(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y);
};

}  // namespace hearth::cuda

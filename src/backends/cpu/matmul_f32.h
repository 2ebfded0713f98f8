// Products of float rows with float activations, bit for bit those of ref::dot16 (one
// 16-lane fma accumulator per output over steps of 16, the last step zero-padded, then
// ggml_order::sum16), several rows and tokens at a time: the matmul of weights without
// a quantized dot product (f32 routers and gates, f16 / bf16 rows converted, the vision
// tower). Each output's arithmetic is the same wherever it falls in a tile, so results
// do not depend on the batch.
#pragma once

#include <cstdint>

namespace hearth::cpu {

// y[t * y_stride + r] = ref::dot16(rows[r], x + t * n, n) for r < n_rows, t < n_tokens.
// The AVX-512 build (one zmm accumulator per output, 4 rows x 6 tokens per tile); only
// where the CPU has AVX-512 F/VL/BW. x86-64 only, like the AVX2 one (matmul_f32_x86.cpp).
void dot_rows_f32_avx512(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                         float* y, int64_t y_stride);
// The AVX2 build (two ymm accumulators per output, 2 rows x 2 tokens per tile); only
// where the CPU has AVX2 and FMA.
void dot_rows_f32_avx2(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride);
// The NEON build (matmul_f32_neon.cpp: four float32x4 accumulators per output, 2 rows x
// 2 tokens per tile); aarch64 only.
void dot_rows_f32_neon(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride);
// The same with ref::dot16 itself (the plain reference).
void dot_rows_f32_plain(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                        float* y, int64_t y_stride);

// Exact f16 -> f32 of n values (F16C where the CPU has it), for the rows the tiles read.
void f16_row_to_f32(const uint16_t* src, float* dst, int64_t n);

}  // namespace hearth::cpu

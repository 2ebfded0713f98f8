// Products of float rows with float activations, bit for bit those of ref::dot (four
// partial sums s_k over the elements i = k mod 4, then the tail added to s0, then
// (s0 + s1) + (s2 + s3)), several rows and tokens at a time: the matmul of weights
// without a quantized dot product (f32 routers and gates, f16 / bf16 rows dequantized).
#pragma once

#include <cstdint>

namespace hearth::cpu {

// y[t * y_stride + r] = ref::dot(rows[r], x + t * n, n) for r < n_rows, t < n_tokens.
// The AVX2 build (four lanes per output, two outputs per register, 4 rows x 3 tokens
// per tile); only where the CPU has AVX2.
void dot_rows_f32_avx2(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride);
// The same with ref::dot itself (the plain reference).
void dot_rows_f32_plain(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                        float* y, int64_t y_stride);

}  // namespace hearth::cpu

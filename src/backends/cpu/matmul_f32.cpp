// The plain reference of the float-row products (matmul_f32.h); the SIMD builds are in
// matmul_f32_x86.cpp (AVX-512, AVX2) and matmul_f32_neon.cpp (aarch64).
#include "backends/cpu/matmul_f32.h"

#include <algorithm>

#include "backends/cpu/kernels_ref.h"
#include "core/half.h"

namespace hearth::cpu {

void dot_rows_f32_plain(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                        float* y, int64_t y_stride) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = ref::dot16(rows[r], x + t * n, n);
  }
}

#if !defined(__x86_64__)
// Elsewhere the plain conversion (matmul_f32_x86.cpp has the F16C one for x86-64).
void f16_row_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
#endif

}  // namespace hearth::cpu

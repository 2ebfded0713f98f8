// The x86-64 builds of the element-wise activations of the kernel table (kernel_table.h):
// SwiGLU and the GDN conv's SiLU with ggml's exp_approx evaluated on 8 (AVX2) or 16
// (AVX-512) lanes, its operations lane by lane, so the plain build's bits (negation,
// division, the + 1 and the product are single exact / IEEE operations either way).
// Lanes whose exponent leaves [-126, 127] run the scalar code.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/exp_avx2.h"
#include "backends/cpu/exp_avx512.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"

namespace hearth::cpu {

// SwiGLU 8 / 16 at a time where exp8 / exp16 applies (the same exp_approx bits; negation,
// division, the + 1 and the product are single exact / IEEE operations either way), else
// the scalar code. (AVX2's was the scalar code compiled for AVX2 + FMA, which GCC does not
// vectorise: 1.2-1.5 % of the 8B shape's prompt.)
HEARTH_SIMD void swiglu_avx2(const float* g, const float* u, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    __m256 e;
    if (exp8(_mm256_xor_ps(gv, sign), e)) {
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
      continue;
    }
    for (int64_t k = i; k < i + 8; ++k) out[k] = ggml_order::swiglu_one(g[k], u[k]);
  }
  for (; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}
HEARTH_AVX512 __attribute__((flatten)) void swiglu_avx512(const float* g, const float* u, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    __m512 e;
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gv), _mm512_set1_epi32(INT32_MIN)));
    if (exp16(neg, e)) {
      _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
      continue;
    }
    for (int64_t k = i; k < i + 16; ++k) out[k] = ggml_order::swiglu_one(g[k], u[k]);
  }
  for (; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}

// SiLU in place, 8 / 16 at a time.
HEARTH_SIMD void silu_row_avx2(float* x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 e;
    if (exp8(_mm256_xor_ps(v, sign), e)) {
      _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
      continue;
    }
    for (int64_t k = i; k < i + 8; ++k) x[k] = ggml_order::silu_one(x[k]);
  }
  for (; i < n; ++i) x[i] = ggml_order::silu_one(x[i]);
}
HEARTH_AVX512 void silu_row_avx512(float* x, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 e;
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
    if (exp16(neg, e)) {
      _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(one, e)));
      continue;
    }
    for (int64_t k = i; k < i + 16; ++k) x[k] = ggml_order::silu_one(x[k]);
  }
  for (; i < n; ++i) x[i] = ggml_order::silu_one(x[i]);
}

}  // namespace hearth::cpu

// The x86-64 builds of the element-wise activations of the kernel table (kernel_table.h):
// SwiGLU and the GDN conv's SiLU with ggml's exp_approx evaluated on 8 (AVX2) or 16
// (AVX-512) lanes, its operations lane by lane, so the plain build's bits (negation,
// division, the + 1 and the product are single exact / IEEE operations either way).
// Lanes whose exponent leaves [-126, 127] run the scalar code.
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/exp_avx512.h"
#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"

namespace hearth::cpu {
namespace {

// exp_approx on 8 AVX2 lanes, the operations of exp16 (exp_avx512.h); false when a
// lane's exponent leaves [-126, 127] (the caller then runs the scalar code).
HEARTH_SIMD inline bool exp8(__m256 x, __m256& out) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift), shift);
  const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_GE_OQ),
                                  _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
  if (_mm256_movemask_ps(ok) != 0xFF) return false;
  const __m256 r =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 hi =
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), r, _mm256_set1_ps(0x1.573e2ep-5f)), r2,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), r, _mm256_set1_ps(0x1.fffdb6p-2f)));
  const __m256 p = _mm256_fmadd_ps(hi, r2, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_cvttps_epi32(n);
  const __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  out = _mm256_mul_ps(p, pow2);
  return true;
}

}  // namespace

// SwiGLU: AVX2's is the scalar code compiled for AVX2 + FMA (GCC vectorises it).
HEARTH_SIMD __attribute__((flatten)) void swiglu_avx2(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}
// 16 at a time where exp16 applies (the same exp_approx bits; negation, division, the + 1
// and the product are single exact / IEEE operations either way), else the scalar code.
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

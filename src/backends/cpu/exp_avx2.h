// ggml_order::exp_approx on 8 AVX2 lanes, for the kernels that must keep its roundings
// (softmax in attention, SwiGLU, SiLU). x86-64 only.
#pragma once

#include <immintrin.h>

#include "backends/cpu/targets_x86.h"

namespace hearth::cpu {

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

}  // namespace hearth::cpu

// ggml_order::exp_approx on 16 AVX-512 lanes, for the kernels that must keep its
// roundings (softmax in attention, SwiGLU, SiLU). x86-64 only.
#pragma once

#include <immintrin.h>

#include "backends/cpu/targets_x86.h"

namespace hearth::cpu {

// ggml_order::exp_approx on 16 lanes, the same operations lane by lane (fnmadd(n, c, x)
// is fma(-n, c, x): the negation of the exact product is exact). Only for lanes whose
// exponent n lies in [-126, 127] (the scalar code's common case, p * 2^n); returns
// false, leaving out alone, when any lane is outside (the caller then runs the scalar code).
HEARTH_AVX512 inline bool exp16(__m512 x, __m512& out) {
  const __m512 shift = _mm512_set1_ps(0x1.8p23f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift), shift);
  const __mmask16 in_range = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-126.0f), _CMP_GE_OQ) &
                             _mm512_cmp_ps_mask(n, _mm512_set1_ps(127.0f), _CMP_LE_OQ);
  if (in_range != 0xFFFF) return false;
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 hi = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), r, _mm512_set1_ps(0x1.573e2ep-5f)), r2,
                                    _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), r, _mm512_set1_ps(0x1.fffdb6p-2f)));
  const __m512 p = _mm512_fmadd_ps(hi, r2, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), r, _mm512_set1_ps(1.0f)));
  // n is a whole number: exact, as static_cast<int>. (Masked forms: GCC 12 warns on the unmasked ones.)
  const __m512i e = _mm512_maskz_cvttps_epi32(0xFFFF, n);
  const __m512 pow2 =
      _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_add_epi32(e, _mm512_set1_epi32(127)), 23));
  out = _mm512_mul_ps(p, pow2);
  return true;
}

}  // namespace hearth::cpu

// Rotary embedding of a token's heads with AVX2 + FMA (kernel_table.h's rope_heads): the
// NeoX layout (pairs i, i + n_rot / 2) eight pairs at a time, the normal layout (pairs 2i,
// 2i + 1) four; each value the two operations of ref::rope_rotate (x0 c - rounded(x1 s),
// x0 s + rounded(x1 c), one fma each, the product negated after it is rounded), so the
// same bits, NaN signs included. Other widths: ref::rope_rotate itself. And the RMS norm's
// rows (kernel_table.h's rms_norm_rows), eight at a time with AVX-512.
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"
#include "ops/backend.h"

namespace hearth::cpu {

HEARTH_SIMD void rope_heads_avx2(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin,
                                 const ops::RopeParams& p) {
  const int64_t half = p.n_rot / 2;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  if (!p.neox && half % 4 == 0) {
    // Pairs (2i, 2i + 1), four per register: lane 2i takes x0 c - rounded(x1 s), lane
    // 2i + 1 takes x0 s + rounded(x1 c); both computed, the lanes blended.
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      for (int64_t i = 0; i < p.n_rot; i += 8) {
        const __m256 cs8 = _mm256_loadu_ps(cos_sin + i);
        const __m256 c = _mm256_permute_ps(cs8, 0xA0), s = _mm256_permute_ps(cs8, 0xF5);
        const __m256 w = _mm256_loadu_ps(v + i), ws = _mm256_permute_ps(w, 0xB1);
        const __m256 x0 = _mm256_blend_ps(w, ws, 0xAA), x1 = _mm256_blend_ps(ws, w, 0xAA);
        const __m256 e = _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, s), sign));
        const __m256 o = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
        _mm256_storeu_ps(v + i, _mm256_blend_ps(e, o, 0xAA));
      }
    }
    return;
  }
  if (!p.neox || half % 8 != 0 || half > 256) {
    for (int64_t h = 0; h < n_heads; ++h) ref::rope_rotate(x + h * head_dim, cos_sin, p);
    return;
  }
  // The angles apart once for all the heads: cos[i], sin[i].
  alignas(32) float cs[256], sn[256];
  for (int64_t i = 0; i < half; ++i) {
    cs[i] = cos_sin[2 * i];
    sn[i] = cos_sin[2 * i + 1];
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; i += 8) {
      const __m256 c = _mm256_load_ps(cs + i), s = _mm256_load_ps(sn + i);
      const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + half);
      const __m256 a = _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, s), sign));
      const __m256 b = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
      _mm256_storeu_ps(v + i, a);
      _mm256_storeu_ps(v + i + half, b);
    }
  }
}

// Eight rows at a time, one row per double lane: element i of the eight rows gathered,
// squared in float (the reference's rounding), widened exactly and added to its row's
// double sum, in order of i; so every row's sum, scale and output are ref::rms_norm_row's.
// Left-over rows: the reference.
HEARTH_AVX512 void rms_norm_rows_avx512(const float* x, const float* w, int64_t n_rows, int64_t n, float eps,
                                        float* y) {
  int64_t r = 0;
  if (n <= (int64_t{1} << 27)) {  // 32-bit element offsets
    const __m256i offs = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(static_cast<int32_t>(n)));
    for (; r + 8 <= n_rows; r += 8) {
      const float* xr = x + r * n;
      __m512d sum = _mm512_setzero_pd();
      for (int64_t i = 0; i < n; ++i) {
        const __m256 v = _mm256_i32gather_ps(xr + i, offs, 4);
        sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
      }
      alignas(64) double s[8];
      _mm512_store_pd(s, sum);
      for (int k = 0; k < 8; ++k) {
        const float scale = ref::rms_scale(s[k], n, eps);
        const float* a = xr + k * n;
        float* o = y + (r + k) * n;
        for (int64_t i = 0; i < n; ++i) o[i] = a[i] * scale * w[i];
      }
    }
  }
  for (; r < n_rows; ++r) ref::rms_norm_row(x + r * n, w, n, eps, y + r * n);
}

}  // namespace hearth::cpu

// f32 -> f16 rows with F16C for the KV cache, x86-64 only (the kernel table's f32_to_f16, kernels_x86.cpp).
#include <immintrin.h>

#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"
#include "core/half.h"

namespace hearth::cpu {

// f32_to_f16_row with the F16C conversion, 8 values at a time: round to nearest even,
// f16 subnormals and the overflow to infinity exactly as the scalar code; a group of 8
// holding a NaN is converted by the scalar code (its canonical quiet NaN).
HEARTH_SIMD void f32_to_f16_row_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      f32_to_f16_row(src + i, dst + i, 8);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  f32_to_f16_row(src + i, dst + i, n - i);
}

}  // namespace hearth::cpu

// q8_0 KV rows -> floats with AVX2 + F16C (kv_q8.h), x86-64 only.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kv_q8.h"
#include "backends/cpu/targets_x86.h"

namespace hearth::cpu {

// The same with AVX2 + F16C (exact conversions, the one multiply): the same bits.
HEARTH_SIMD void dequantize_row_q8_0_avx2(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / ops::kQ8Block; ++b, src += ops::kQ8BlockBytes, dst += ops::kQ8Block) {
    uint16_t dh;
    std::memcpy(&dh, src, sizeof dh);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
    for (int k = 0; k < 4; ++k) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + 8 * k));
      _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d));
    }
  }
}


}  // namespace hearth::cpu

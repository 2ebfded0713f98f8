// CpuBackend row movement: fill, gather and weighted scatter-add of activation rows for
// routed experts (plain loops: memory-bound and small), and rows converted to f16 for
// the KV cache.
#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "core/half.h"

namespace hearth::cpu {

#if defined(__x86_64__)
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
#else
void f32_to_f16_row_f16c(const float* src, uint16_t* dst, int64_t n) { f32_to_f16_row(src, dst, n); }
#endif

void CpuBackend::fill(float* dst, float value, int64_t n) {
  const OpScope timer(op_times_.get(), "fill");
  std::fill(dst, dst + n, value);
}

void CpuBackend::gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) {
  const OpScope timer(op_times_.get(), "gather_rows");
  for (int64_t i = 0; i < n_ids; ++i) std::memcpy(dst + i * n, src + static_cast<int64_t>(ids[i]) * n, sizeof(float) * n);
}

void CpuBackend::scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights, int64_t n_ids,
                                  float* dst) {
  const OpScope timer(op_times_.get(), "scatter_add_rows");
  for (int64_t i = 0; i < n_ids; ++i) {
    float* d = dst + static_cast<int64_t>(ids[i]) * n;
    const float* s = src + i * n;
    const float w = weights[i];
    for (int64_t j = 0; j < n; ++j) d[j] += w * s[j];
  }
}

}  // namespace hearth::cpu

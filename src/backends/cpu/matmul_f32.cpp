#include "backends/cpu/matmul_f32.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels_ref.h"

namespace hearth::cpu {

void dot_rows_f32_plain(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                        float* y, int64_t y_stride) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + r] = ref::dot(rows[r], x + t * n, n);
  }
}

#if defined(__x86_64__)
namespace {

// ref::dot's last steps for one output: its four lane sums, the tail into s0, the pairs.
HEARTH_SIMD inline float finish(__m128 lanes, const float* a, const float* b, int64_t i0, int64_t n) {
  alignas(16) float s[4];
  _mm_store_ps(s, lanes);
  for (int64_t i = i0; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// Rows w[0 .. 2P) (P pairs, one per register: lanes 0-3 the first row's four partial
// sums, 4-7 the second's) against tokens xt[0 .. T); out[k * T + t]. A separate multiply
// and add per element, as ref::dot does them (the build contracts nothing into fma).
template <int P, int T>
HEARTH_SIMD inline void tile(const float* const* w, const float* const* xt, int64_t n, float* out) {
  __m256 acc[P][T];
  for (int p = 0; p < P; ++p) {
    for (int t = 0; t < T; ++t) acc[p][t] = _mm256_setzero_ps();
  }
  const int64_t n4 = n & ~int64_t{3};
  for (int64_t i = 0; i < n4; i += 4) {
    __m256 wv[P];
    for (int p = 0; p < P; ++p) {
      wv[p] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(w[2 * p] + i)), _mm_loadu_ps(w[2 * p + 1] + i), 1);
    }
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(xt[t] + i));
      for (int p = 0; p < P; ++p) acc[p][t] = _mm256_add_ps(acc[p][t], _mm256_mul_ps(wv[p], xv));
    }
  }
  for (int p = 0; p < P; ++p) {
    for (int t = 0; t < T; ++t) {
      out[(2 * p) * T + t] = finish(_mm256_castps256_ps128(acc[p][t]), w[2 * p], xt[t], n4, n);
      out[(2 * p + 1) * T + t] = finish(_mm256_extractf128_ps(acc[p][t], 1), w[2 * p + 1], xt[t], n4, n);
    }
  }
}

template <int P>
HEARTH_SIMD void tile_tokens(const float* const* w, const float* const* xt, int nt, int64_t n, float* out) {
  switch (nt) {
    case 3: tile<P, 3>(w, xt, n, out); break;
    case 2: tile<P, 2>(w, xt, n, out); break;
    default: tile<P, 1>(w, xt, n, out); break;
  }
}

}  // namespace

// Tokens in blocks of 64 (their rows stay in L2 while every 4-row tile of the chunk
// passes over them), then 4 rows x 3 tokens per tile; short tiles repeat their last row
// or token and drop its outputs.
HEARTH_SIMD void dot_rows_f32_avx2(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens,
                                   int64_t n, float* y, int64_t y_stride) {
  constexpr int64_t kTokenBlock = 64;
  for (int64_t tb = 0; tb < n_tokens; tb += kTokenBlock) {
    const int64_t te = std::min(n_tokens, tb + kTokenBlock);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
      const int nr = static_cast<int>(std::min<int64_t>(4, n_rows - r0));
      const float* w[4];
      for (int k = 0; k < 4; ++k) w[k] = rows[r0 + std::min(k, nr - 1)];
      for (int64_t t0 = tb; t0 < te; t0 += 3) {
        const int nt = static_cast<int>(std::min<int64_t>(3, te - t0));
        const float* xt[3];
        for (int k = 0; k < 3; ++k) xt[k] = x + (t0 + std::min(k, nt - 1)) * n;
        float out[4 * 3];
        if (nr > 2) {
          tile_tokens<2>(w, xt, nt, n, out);
        } else {
          tile_tokens<1>(w, xt, nt, n, out);
        }
        for (int k = 0; k < nr; ++k) {
          for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r0 + k] = out[k * nt + t];
        }
      }
    }
  }
}
#else
void dot_rows_f32_avx2(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride) {
  dot_rows_f32_plain(rows, n_rows, x, n_tokens, n, y, y_stride);
}
#endif

}  // namespace hearth::cpu

// The float-row products of matmul_f32.h for x86-64 (compiled only there): AVX-512
// tiles of 4 rows x 6 tokens and AVX2 tiles of 2 x 2 through per-function target
// attributes, used only where the CPU has them; and the F16C row conversion.
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/attention_avx512.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/matmul_f32.h"
#include "core/half.h"

namespace hearth::cpu {

namespace {

// Tiles of up to R rows x T tokens; a short tile (the chunk's last rows or tokens) takes
// the template of its own size, so every output runs the same instructions.
// AVX-512: acc[r][t] holds output (r, t)'s 16 lanes; per step of 16 elements, R row loads,
// T token loads and R x T fmas; the last partial step loads zeros past n (maskz), which
// is ref::dot16's padding.
template <int R, int T>
HEARTH_AVX512 inline void tile512(const float* const* w, const float* const* xt, int64_t n, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(w[r] + i);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(xt[t] + i);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (n16 < n) {
    const auto m = static_cast<__mmask16>((1u << (n - n16)) - 1u);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(m, w[r] + n16);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xt[t] + n16);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) out[r * T + t] = sum16_zmm(acc[r][t]);
  }
}

template <int R>
HEARTH_AVX512 inline void tile512_tokens(const float* const* w, const float* const* xt, int nt, int64_t n,
                                         float* out) {
  switch (nt) {
    case 6: tile512<R, 6>(w, xt, n, out); break;
    case 5: tile512<R, 5>(w, xt, n, out); break;
    case 4: tile512<R, 4>(w, xt, n, out); break;
    case 3: tile512<R, 3>(w, xt, n, out); break;
    case 2: tile512<R, 2>(w, xt, n, out); break;
    default: tile512<R, 1>(w, xt, n, out); break;
  }
}

// AVX2: output (r, t)'s 16 lanes in two registers, lo[r][t] (lanes 0-7) and hi[r][t]
// (8-15); sum16's first halving is lo + hi.
template <int R, int T>
HEARTH_SIMD inline void tile256(const float* const* w, const float* const* xt, int64_t n, float* out) {
  __m256 lo[R][T], hi[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) lo[r][t] = hi[r][t] = _mm256_setzero_ps();
  }
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) {
    __m256 wl[R], wh[R];
    for (int r = 0; r < R; ++r) {
      wl[r] = _mm256_loadu_ps(w[r] + i);
      wh[r] = _mm256_loadu_ps(w[r] + i + 8);
    }
    for (int t = 0; t < T; ++t) {
      const __m256 xl = _mm256_loadu_ps(xt[t] + i), xh = _mm256_loadu_ps(xt[t] + i + 8);
      for (int r = 0; r < R; ++r) {
        lo[r][t] = _mm256_fmadd_ps(wl[r], xl, lo[r][t]);
        hi[r][t] = _mm256_fmadd_ps(wh[r], xh, hi[r][t]);
      }
    }
  }
  if (n16 < n) {
    alignas(32) int32_t lane_mask[16];
    for (int l = 0; l < 16; ++l) lane_mask[l] = n16 + l < n ? -1 : 0;
    const __m256i ml = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane_mask));
    const __m256i mh = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane_mask + 8));
    __m256 wl[R], wh[R];
    for (int r = 0; r < R; ++r) {
      wl[r] = _mm256_maskload_ps(w[r] + n16, ml);
      wh[r] = _mm256_maskload_ps(w[r] + n16 + 8, mh);
    }
    for (int t = 0; t < T; ++t) {
      const __m256 xl = _mm256_maskload_ps(xt[t] + n16, ml), xh = _mm256_maskload_ps(xt[t] + n16 + 8, mh);
      for (int r = 0; r < R; ++r) {
        lo[r][t] = _mm256_fmadd_ps(wl[r], xl, lo[r][t]);
        hi[r][t] = _mm256_fmadd_ps(wh[r], xh, hi[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      const __m256 h8 = _mm256_add_ps(lo[r][t], hi[r][t]);
      const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
      const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));  // [h4[0] + h4[2], h4[1] + h4[3]]
      out[r * T + t] = _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
    }
  }
}

template <int R>
HEARTH_SIMD inline void tile256_tokens(const float* const* w, const float* const* xt, int nt, int64_t n, float* out) {
  if (nt >= 2) {
    tile256<R, 2>(w, xt, n, out);
  } else {
    tile256<R, 1>(w, xt, n, out);
  }
}

// One tile of nr <= 4 rows x nt <= 6 tokens (AVX-512) or 2 x 2 (AVX2).
HEARTH_AVX512 void tile512_any(const float* const* w, int nr, const float* const* xt, int nt, int64_t n, float* out) {
  switch (nr) {
    case 4: tile512_tokens<4>(w, xt, nt, n, out); break;
    case 3: tile512_tokens<3>(w, xt, nt, n, out); break;
    case 2: tile512_tokens<2>(w, xt, nt, n, out); break;
    default: tile512_tokens<1>(w, xt, nt, n, out); break;
  }
}

HEARTH_SIMD void tile256_any(const float* const* w, int nr, const float* const* xt, int nt, int64_t n, float* out) {
  if (nr >= 2) {
    tile256_tokens<2>(w, xt, nt, n, out);
  } else {
    tile256_tokens<1>(w, xt, nt, n, out);
  }
}

using TileFn = void (*)(const float* const*, int, const float* const*, int, int64_t, float*);

// The loop both builds share: tokens in tiles of kT, and for each token tile every row
// tile of kR rows (the token rows stay in L1 / L2 while the rows pass over them).
template <int kR, int kT, TileFn tile>
inline void dot_rows_tiled(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                           float* y, int64_t y_stride) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kT) {
    const int nt = static_cast<int>(std::min<int64_t>(kT, n_tokens - t0));
    const float* xt[kT];
    for (int k = 0; k < nt; ++k) xt[k] = x + (t0 + k) * n;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kR) {
      const int nr = static_cast<int>(std::min<int64_t>(kR, n_rows - r0));
      float out[kR * kT];
      tile(rows + r0, nr, xt, nt, n, out);
      for (int k = 0; k < nr; ++k) {
        for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r0 + k] = out[k * nt + t];
      }
    }
  }
}

}  // namespace

void dot_rows_f32_avx512(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                         float* y, int64_t y_stride) {
  dot_rows_tiled<4, 6, tile512_any>(rows, n_rows, x, n_tokens, n, y, y_stride);
}

void dot_rows_f32_avx2(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride) {
  dot_rows_tiled<2, 2, tile256_any>(rows, n_rows, x, n_tokens, n, y, y_stride);
}

namespace {
HEARTH_SIMD void f16_row_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
}  // namespace

void f16_row_to_f32(const uint16_t* src, float* dst, int64_t n) {
  if (cpu_features().f16c && cpu_features().avx2) {
    f16_row_f16c(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
}  // namespace hearth::cpu

// The x86-64 builds of the per-item attention kernels (kernel_table.h's attend_rows and
// f16_to_f32): attend_rows (attend_rows.h) compiled for AVX2+FMA, and for AVX-512 with
// attend_one_avx512 where head_dim is a multiple of 64 (reading f16 and q8_0 rows in its
// loads). Every result is the plain build's, bit for bit.
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/attend_rows.h"
#include "backends/cpu/attention_avx2.h"
#include "backends/cpu/attention_avx512.h"
#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"
#include "core/half.h"

namespace hearth::cpu {
namespace {

// f16 -> f32 rows with F16C (exact, like the plain conversion).
struct CvtF16C {
  HEARTH_SIMD static void run(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
  }
  // q8_0 -> f32 (the same bits as CvtPlain::q8).
  HEARTH_SIMD static void q8(const uint8_t* src, float* dst, int64_t n) { dequantize_row_q8_0_avx2(src, dst, n); }
};

// ggml_order::attend_one for head_dim a multiple of 64, with the reductions written as
// AVX-512 register code instead of scalar loops. Every rounding is the reference one:
// scores are dot_order_a (4 x 16-lane fma accumulators, combined (0+2) + (1+3), then
// sum16; no leftover elements, so the double step is exact); the value sum keeps each
// lane's keys j = l, l + n_lanes, ... in order, but runs lane by lane with the
// accumulators in registers (lanes are independent); the final lane sums are sum16
// done vertically, 16 output elements at a time.
template <class K, class V>
HEARTH_AVX512 void attend_one_avx512(const float* q, const K& krow, const V& vrow, int64_t n_keys, int64_t head_dim,
                                     float scale, bool single_query, float* scores, float* acc, float* tmp,
                                     float* out) {
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    const auto kj = krow(j, tmp);
    __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < head_dim; i += 64) {
      for (int a = 0; a < 4; ++a) {
        c[a] = _mm512_fmadd_ps(load16(kj + i + 16 * a), _mm512_loadu_ps(q + i + 16 * a), c[a]);
      }
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(c[0], c[2]), _mm512_add_ps(c[1], c[3]));
    scores[j] = sum16_zmm(sum) * scale;
    max_s = std::fmax(max_s, scores[j]);
  }
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  for (int64_t j = 0; j < n_keys; ++j) scores[j] = ggml_order::exp_approx(scores[j] - max_s);
  for (int64_t j = n_keys; j < n_pad; ++j) scores[j] = 0.0f;
  double total = 0.0;
  for (int64_t j = 0; j < n_pad; j += 16) total += sum16_zmm(_mm512_loadu_ps(scores + j));
  const auto inv = static_cast<float>(1.0 / total);
  for (int64_t j = 0; j < n_keys; ++j) scores[j] *= inv;
  const int64_t n_lanes = single_query ? 64 : 16;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      __m512 r[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int64_t j = l; j < n_keys; j += n_lanes) {
        const auto vj = vrow(j, tmp) + d0;
        const __m512 p = _mm512_set1_ps(scores[j]);
        for (int b = 0; b < 4; ++b) r[b] = _mm512_fmadd_ps(load16(vj + 16 * b), p, r[b]);
      }
      for (int b = 0; b < 4; ++b) _mm512_storeu_ps(acc + l * head_dim + d0 + 16 * b, r[b]);
    }
  }
  sum_lanes(acc, head_dim, single_query, out);
}

// attend_one_avx512 with 256-bit registers (head_dim a multiple of 64), for AVX2 CPUs:
// each of its 16-lane accumulators is two 8-lane ones here, so every fma and addition is
// the reference's, in the same order. Reads f32, f16 and q8_0 rows as they are.
template <class K, class V>
HEARTH_SIMD void attend_one_avx2(const float* q, const K& krow, const V& vrow, int64_t n_keys, int64_t head_dim,
                                 float scale, bool single_query, float* scores, float* acc, float* tmp, float* out) {
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    const auto kj = krow(j, tmp);
    __m256 c[8];
    for (int a = 0; a < 8; ++a) c[a] = _mm256_setzero_ps();
    for (int64_t i = 0; i < head_dim; i += 64) {
      for (int a = 0; a < 8; ++a) c[a] = _mm256_fmadd_ps(load8(kj + i + 8 * a), _mm256_loadu_ps(q + i + 8 * a), c[a]);
    }
    // (0 + 2) + (1 + 3) of the 16-lane accumulators: halves a = 2 x + h.
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(c[0], c[4]), _mm256_add_ps(c[2], c[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(c[1], c[5]), _mm256_add_ps(c[3], c[7]));
    scores[j] = sum16_ymm(lo, hi) * scale;
    max_s = std::fmax(max_s, scores[j]);
  }
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  for (int64_t j = 0; j < n_keys; ++j) scores[j] = ggml_order::exp_approx(scores[j] - max_s);
  for (int64_t j = n_keys; j < n_pad; ++j) scores[j] = 0.0f;
  double total = 0.0;
  for (int64_t j = 0; j < n_pad; j += 16) total += sum16_ymm(_mm256_loadu_ps(scores + j), _mm256_loadu_ps(scores + j + 8));
  const auto inv = static_cast<float>(1.0 / total);
  for (int64_t j = 0; j < n_keys; ++j) scores[j] *= inv;
  // Key j to lane j % n_lanes, each lane's keys in order; lane by lane, 64 dims at a time
  // in registers (lanes and dims are independent).
  const int64_t n_lanes = single_query ? 64 : 16;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      __m256 r[8];
      for (int b = 0; b < 8; ++b) r[b] = _mm256_setzero_ps();
      for (int64_t j = l; j < n_keys; j += n_lanes) {
        const auto vj = vrow(j, tmp) + d0;
        const __m256 p = _mm256_set1_ps(scores[j]);
        for (int b = 0; b < 8; ++b) r[b] = _mm256_fmadd_ps(load8(vj + 8 * b), p, r[b]);
      }
      for (int b = 0; b < 8; ++b) _mm256_storeu_ps(acc + l * head_dim + d0 + 8 * b, r[b]);
    }
  }
  sum_lanes8(acc, head_dim, single_query, out);
}

struct Avx2Attend {
  template <class K, class V>
  HEARTH_SIMD void operator()(const float* q, const K& k, const V& v, int64_t n_keys, int64_t head_dim, float scale,
                              bool single, float* scores, float* acc, float* tmp, float* out) const {
    attend_one_avx2(q, k, v, n_keys, head_dim, scale, single, scores, acc, tmp, out);
  }
};

struct Avx512Attend {
  template <class K, class V>
  HEARTH_AVX512 void operator()(const float* q, const K& k, const V& v, int64_t n_keys, int64_t head_dim, float scale,
                                bool single, float* scores, float* acc, float* tmp, float* out) const {
    attend_one_avx512(q, k, v, n_keys, head_dim, scale, single, scores, acc, tmp, out);
  }
};

}  // namespace

HEARTH_SIMD void f16_to_f32_row_f16c(const uint16_t* src, float* dst, int64_t n) { CvtF16C::run(src, dst, n); }

HEARTH_SIMD __attribute__((flatten)) void attend_rows_avx2(const AttendArgs& a, int64_t begin, int64_t end) {
  if (a.head_dim % 64 == 0) {
    attend_rows<CvtF16C, Avx2Attend, true>(a, begin, end, Avx2Attend{});
    return;
  }
  attend_rows<CvtF16C>(a, begin, end, GenericAttend{});
}

HEARTH_AVX512 __attribute__((flatten)) void attend_rows_avx512(const AttendArgs& a, int64_t begin, int64_t end) {
  if (a.head_dim % 64 == 0) {
    attend_rows<CvtF16C, Avx512Attend, true>(a, begin, end, Avx512Attend{});
    return;
  }
  attend_rows<CvtF16C>(a, begin, end, GenericAttend{});
}

}  // namespace hearth::cpu

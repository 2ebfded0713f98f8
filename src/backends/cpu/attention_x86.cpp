// The x86-64 builds of the per-item attention kernels (kernel_table.h's attend_rows and
// f16_to_f32): attend_rows (attend_rows.h) compiled for AVX2+FMA, and for AVX-512 with
// attend_one_avx512 where head_dim is a multiple of 64 (reading f16 and q8_0 rows in its
// loads). Every result is the plain build's, bit for bit.
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/attend_rows.h"
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

// The AVX2 counterparts of attention_avx512.h's helpers: a 16-lane value as two 8-lane
// halves (lanes 0-7, 8-15), so every addition pairs the same two values as there.
// ggml_order::sum16 of lo | hi: h8 = lo + hi, then 4 + 4, then (0 + 2) + (1 + 3).
HEARTH_SIMD inline float sum16_ymm(__m256 lo, __m256 hi) {
  const __m256 h8 = _mm256_add_ps(lo, hi);
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));  // [h4[0] + h4[2], h4[1] + h4[3]]
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}
HEARTH_SIMD inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
// An f16 row converted in the load (exact).
HEARTH_SIMD inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 8 values of a q8_0 row from value p.i (a multiple of 8, so within one block): f32(d) * q,
// dequantize_row_q8_0's one rounding.
HEARTH_SIMD inline __m256 load8(Q8Ptr p) {
  const uint8_t* blk = p.row + (p.i / ops::kQ8Block) * ops::kQ8BlockBytes;
  uint16_t dh;
  __builtin_memcpy(&dh, blk, sizeof dh);
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + p.i % ops::kQ8Block));
  const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  return _mm256_mul_ps(qf, _mm256_set1_ps(_cvtsh_ss(dh)));
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
  // out[d] = sum16 over the 16 lanes (single query: each the sum of lanes l, l + 16, l + 32,
  // l + 48 as (l + 32) + (l + 16 + l + 48)), 8 dims at a time.
  for (int64_t d = 0; d < head_dim; d += 8) {
    __m256 lane[16];
    for (int l = 0; l < 16; ++l) {
      const float* a = acc + l * head_dim + d;
      lane[l] = single_query ? _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(a + 32 * head_dim)),
                                             _mm256_add_ps(_mm256_loadu_ps(a + 16 * head_dim),
                                                           _mm256_loadu_ps(a + 48 * head_dim)))
                             : _mm256_loadu_ps(a);
    }
    __m256 h8[8], h4[4];
    for (int i = 0; i < 8; ++i) h8[i] = _mm256_add_ps(lane[i], lane[i + 8]);
    for (int i = 0; i < 4; ++i) h4[i] = _mm256_add_ps(h8[i], h8[i + 4]);
    _mm256_storeu_ps(out + d, _mm256_add_ps(_mm256_add_ps(h4[0], h4[2]), _mm256_add_ps(h4[1], h4[3])));
  }
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

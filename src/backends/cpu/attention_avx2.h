// The AVX2 attention kernels' helpers (attention_x86.cpp's per-query kernel and
// attention_avx2.cpp's blocked one), x86-64 only; their arguments are attention.h's.
// A 16-lane value of the AVX-512 kernels is two 8-lane halves here (lanes 0-7, 8-15), so
// every addition pairs the same two values as there (attention_avx512.h).
#pragma once

#include <cstdint>

#include <immintrin.h>

#include "backends/cpu/attention.h"
#include "backends/cpu/kv_q8.h"
#include "backends/cpu/targets_x86.h"
#include "ops/backend.h"

namespace hearth::cpu {

// Runs blocks [begin, end) (AVX2 + FMA, head_dim % 64 == 0, f32, f16 or q8_0 cache). Each
// query's arithmetic is exactly that of the per-query kernel attend_one_avx2 (and so of
// ggml_order::attend_one); which queries share a block never matters.
void attend_blocks_avx2(const AttendArgs& a, const AttnBlock* blocks, int64_t begin, int64_t end);

// The tail of ggml_order::sum16 on h8 (its lanes i + i+8 already added): 4 + 4, then
// (0 + 2) + (1 + 3).
HEARTH_SIMD inline float sum16_tail(__m256 h8) {
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));  // [h4[0] + h4[2], h4[1] + h4[3]]
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}
// ggml_order::sum16 of lo | hi: h8 = lo + hi, then 4 + 4, then (0 + 2) + (1 + 3).
HEARTH_SIMD inline float sum16_ymm(__m256 lo, __m256 hi) { return sum16_tail(_mm256_add_ps(lo, hi)); }

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

// The final lane sums of attend_one_avx2: out[d] = sum16 over the 16 lanes (single query:
// each the sum of lanes l, l + 16, l + 32, l + 48 as (l + l + 32) + (l + 16 + l + 48)),
// 8 dims at a time. acc: lane l's head_dim sums at acc + l * head_dim.
HEARTH_SIMD inline void sum_lanes8(const float* acc, int64_t head_dim, bool single_query, float* out) {
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

}  // namespace hearth::cpu

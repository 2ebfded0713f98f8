// The AVX-512 attention kernels' helpers (attention_x86.cpp, attention_avx512.cpp), x86-64
// only; their arguments are attention.h's.
#pragma once

#include <cstdint>

#include <immintrin.h>

#include "backends/cpu/attention.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kv_q8.h"
#include "ops/backend.h"

namespace hearth::cpu {

// Runs blocks [begin, end) (AVX-512, head_dim % 64 == 0, f32, f16 or q8_0 cache). Each
// query's arithmetic is exactly that of the per-query kernel attend_one_avx512: same
// fmas in the same order, same reductions; which queries share a block never matters.
void attend_blocks_avx512(const AttendArgs& a, const AttnBlock* blocks, int64_t begin, int64_t end);

// ggml_order::sum16 (the halving tree of _mm512_reduce_add_ps) on a register: 8+8, 4+4,
// then (0+2) + (1+3), the same additions in the same order.
HEARTH_AVX512 inline float sum16_zmm(__m512 v) {
  // halves by the masked extract: GCC 12's unmasked one (and the 512->256 cast) warn
  // -Wmaybe-uninitialized
  const __m512d vd = _mm512_castps_pd(v);
  const __m256 h8 = _mm256_add_ps(_mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, vd, 0)),
                                  _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, vd, 1)));
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));  // [h4[0] + h4[2], h4[1] + h4[3]]
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

HEARTH_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
// An f16 cache row, converted in the load (exact, so the same roundings as f32 rows).
HEARTH_AVX512 inline __m512 load16(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));  // masked: GCC 12 warns on the unmasked form
}

// 16 values of a q8_0 row from value p.i (a multiple of 16, so within one block):
// f32(d) * q, the one rounding of dequantize_row_q8_0, so the same bits.
HEARTH_AVX512 inline __m512 load16(Q8Ptr p) {
  const uint8_t* blk = p.row + (p.i / ops::kQ8Block) * ops::kQ8BlockBytes;
  uint16_t dh;
  __builtin_memcpy(&dh, blk, sizeof dh);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + p.i % ops::kQ8Block));
  // masked: GCC 12 warns on the unmasked conversions
  const __m512 qf = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, q));
  return _mm512_mul_ps(qf, _mm512_set1_ps(_cvtsh_ss(dh)));
}

// The attention kernels' final lane sums: out = sum16 over the 16 (or 4 x 16) lanes.
HEARTH_AVX512 inline void sum_lanes(const float* acc, int64_t head_dim, bool single_query, float* out) {
  for (int64_t d = 0; d < head_dim; d += 16) {
    __m512 lane[16];
    for (int l = 0; l < 16; ++l) {
      const float* a = acc + l * head_dim + d;
      lane[l] = single_query ? _mm512_add_ps(_mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(a + 32 * head_dim)),
                                             _mm512_add_ps(_mm512_loadu_ps(a + 16 * head_dim),
                                                           _mm512_loadu_ps(a + 48 * head_dim)))
                             : _mm512_loadu_ps(a);
    }
    __m512 h8[8], h4[4];
    for (int i = 0; i < 8; ++i) h8[i] = _mm512_add_ps(lane[i], lane[i + 8]);
    for (int i = 0; i < 4; ++i) h4[i] = _mm512_add_ps(h8[i], h8[i + 4]);
    _mm512_storeu_ps(out + d, _mm512_add_ps(_mm512_add_ps(h4[0], h4[2]), _mm512_add_ps(h4[1], h4[3])));
  }
}

}  // namespace hearth::cpu

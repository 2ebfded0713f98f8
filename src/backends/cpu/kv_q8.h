// The q8_0 KV cache on the CPU (ops::KvType::Q8_0): writing rows (quantize) and the
// attention kernels' row access (dequantize as they read).
//
// A row of n values is n / 32 blocks of 34 bytes: the f16 scale d, then 32 int8 q.
// Writing follows llama.cpp's reference quantize_row_q8_0 (the same code as q8_0
// weights): d = max|x| / 127, q = roundf(x * (1 / d)) (0 for an all-zero block), d
// stored as the nearest f16.
// Reading gives value = f32(d) * q: one rounding, so the plain loop, the AVX2 one and
// the AVX-512 loads give the same bits, and every attention kernel reading a q8_0 cache
// computes exactly what it computes on an f32 cache holding those values (the kernels'
// tests compare them bit for bit). Nothing dequantizes the cache as a whole: each
// kernel turns the rows it is about to use into floats (a key or value row into its
// scratch row, or 16 values straight into a register).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_features.h"
#include "core/half.h"
#include "ops/backend.h"
#include "quant/dequant_kernels.h"
#include "quant/quant_kernels.h"

namespace hearth::cpu {

// n values (n % 32 == 0) -> n / 32 q8_0 blocks at dst: the project's q8_0 weight
// quantizer (quant/quant_legacy.cpp, llama.cpp's quantize_row_q8_0_ref).
inline void quantize_row_q8_0(const float* x, uint8_t* dst, int64_t n) { quant::quant_q8_0(x, dst, n / ops::kQ8Block); }

// n / 32 q8_0 blocks -> n values, plain (quant/dequant_legacy.cpp: f32(d) * q).
inline void dequantize_row_q8_0(const uint8_t* src, float* dst, int64_t n) {
  quant::dequant_q8_0(src, dst, n / ops::kQ8Block);
}

#if defined(__x86_64__)
// The same with AVX2 + F16C (exact conversions, the one multiply): the same bits.
HEARTH_SIMD inline void dequantize_row_q8_0_avx2(const uint8_t* src, float* dst, int64_t n) {
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
#endif

// Where value i of a q8_0 row is: the AVX-512 kernels walk it like a float pointer
// (row + i, then load16 reads 16 values from a 16-aligned i; see attention_avx512.h).
struct Q8Ptr {
  const uint8_t* row;
  int64_t i;
  Q8Ptr operator+(int64_t n) const { return {row, i + n}; }
};
// Raw q8_0 rows for the AVX-512 kernels, which dequantize in their loads.
struct KvRowsOffRawQ8 {
  const uint8_t* base;
  const int64_t* offs;
  Q8Ptr operator()(int64_t j, float*) const { return {base + offs[j], 0}; }
};

}  // namespace hearth::cpu

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

// The same with AVX2 + F16C (exact conversions, the one multiply): the same bits.
// x86-64 only (kv_q8_x86.cpp), where the CPU has AVX2 and F16C.
void dequantize_row_q8_0_avx2(const uint8_t* src, float* dst, int64_t n);

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

// Quantized dot products: a weight row in its ggml block format times an
// activation row quantized to 8 bits (Q8_0, Q8_1 or Q8_K, as ggml pairs them),
// computed on the integer blocks directly. Each weight type has a plain
// reference kernel (dot_ref.cpp) and, where the CPU has them, SIMD kernels
// (dot_avx2.cpp) chosen at run time; tests compare the two.
#pragma once

#include <cstdint>

#include "format/ggml_types.h"

namespace hearth::cpu {

// Quantizes n floats (a multiple of the activation block size) into blocks of act_type.
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t n);
// Dot product of n elements: a weight row (raw blocks) and a quantized activation row.
using VecDotFn = float (*)(int64_t n, const void* w_row, const void* x_q);

struct DotKernel {
  GgmlType weight_type;
  GgmlType act_type;  // Q8_0, Q8_1 or Q8_K
  QuantizeActFn quantize_act;
  VecDotFn vec_dot;
  const char* isa;  // "ref", "avx2"
};

// The best kernel for weights of `type` on this CPU, or nullptr when no quantized
// dot product exists for it (the caller then dequantizes). reference_only picks the
// plain kernel.
const DotKernel* find_dot_kernel(GgmlType type, bool reference_only = false);

// Tiled matrix product on the quantized blocks: y[t * y_stride + r] = vec_dot(n, weight
// row r, activation row t) for r < n_w, t < n_x, with rows w_stride / x_stride bytes
// apart; each output equals the one-pair SIMD vec_dot bit for bit (dot_tile.inc).
using MatmulFn = void (*)(int64_t n, const void* w, uint64_t w_stride, int64_t n_w, const void* x,
                          uint64_t x_stride, int64_t n_x, float* y, int64_t y_stride);
enum class MatmulIsa { kBest, kAvx2, kVnni };
// The tiled kernel for weights of `type` on this CPU (kBest: AVX-512 VNNI, else AVX2;
// on aarch64 the NEON vec_dot per output, dot_neon.cpp),
// or nullptr (no such kernel, or the CPU lacks the instruction set asked for).
MatmulFn find_matmul_kernel(GgmlType type, MatmulIsa isa = MatmulIsa::kBest);

namespace ref {
void quantize_q8_0(const float* x, void* dst, int64_t n);
void quantize_q8_1(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);
float dot_q4_0_q8_0(int64_t n, const void* w, const void* x);
float dot_q4_1_q8_1(int64_t n, const void* w, const void* x);
float dot_q5_0_q8_0(int64_t n, const void* w, const void* x);
float dot_q5_1_q8_1(int64_t n, const void* w, const void* x);
float dot_q8_0_q8_0(int64_t n, const void* w, const void* x);
float dot_q4_k_q8_k(int64_t n, const void* w, const void* x);
float dot_q5_k_q8_k(int64_t n, const void* w, const void* x);
float dot_q6_k_q8_k(int64_t n, const void* w, const void* x);
}  // namespace ref

namespace avx2 {
// Null when this build's compiler cannot target AVX2 (non-x86).
const DotKernel* find(GgmlType type);
}  // namespace avx2

namespace neon {
// aarch64 only (dot_neon.cpp): the NEON kernel for `type` on this CPU (with the dot-product
// instructions where it reports them), or nullptr.
const DotKernel* find(GgmlType type);
// The plain-NEON build of the same kernels (no dot-product instructions), for the tests.
const DotKernel* find_plain(GgmlType type);
}  // namespace neon

}  // namespace hearth::cpu

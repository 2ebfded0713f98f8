// Per-type reference dequantization kernels, internal to the quant layer;
// use dequantize_row_ref (dequant_ref.h). Each takes nb whole blocks.
#pragma once

#include <cstdint>

namespace hearth::quant {

// Legacy 32-element blocks and float types (dequant_legacy.cpp).
void dequant_f32(const uint8_t* src, float* dst, int64_t n);
void dequant_f16(const uint8_t* src, float* dst, int64_t n);
void dequant_bf16(const uint8_t* src, float* dst, int64_t n);
void dequant_q4_0(const uint8_t* src, float* dst, int64_t nb);
void dequant_q4_1(const uint8_t* src, float* dst, int64_t nb);
void dequant_q5_0(const uint8_t* src, float* dst, int64_t nb);
void dequant_q5_1(const uint8_t* src, float* dst, int64_t nb);
void dequant_q8_0(const uint8_t* src, float* dst, int64_t nb);
void dequant_q8_1(const uint8_t* src, float* dst, int64_t nb);
void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t nb);
void dequant_mxfp4(const uint8_t* src, float* dst, int64_t nb);

// 256-element K-quant super-blocks (dequant_kquants.cpp).
void dequant_q2_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q3_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q4_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q5_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q6_k(const uint8_t* src, float* dst, int64_t nb);
void dequant_q8_k(const uint8_t* src, float* dst, int64_t nb);

}  // namespace hearth::quant

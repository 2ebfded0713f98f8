// Per-type reference quantization kernels and their shared rounding helpers,
// internal to the quant layer; use quantize_row_ref (quant_ref.h).
// Each kernel takes nb whole blocks (float types: n elements).
#pragma once

#include <cstdint>
#include <cstring>

namespace hearth::quant {

// Round to nearest (ties to even) by adding 1.5 * 2^23, as ggml's nearest_int;
// valid for |f| <= 4194303.
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return static_cast<int>(bits & 0x007fffffu) - 0x00400000;
}

// C's float -> int conversion as x86-64 performs it (truncation; values out of
// int range or NaN give INT32_MIN), without the undefined behaviour, so that
// (int8_t)(x) / (uint8_t)(x) casts in ggml's code can be reproduced exactly.
inline int32_t trunc_to_int(float f) {
  if (!(f > -2147483904.0f && f < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(f);
}
// The low byte of trunc_to_int, as signed / unsigned (C casts of float to 8-bit types).
inline int8_t trunc_to_i8(float f) { return static_cast<int8_t>(trunc_to_int(f) & 0xff); }
inline uint8_t trunc_to_u8(float f) { return static_cast<uint8_t>(trunc_to_int(f) & 0xff); }

// Float types and legacy 32-element blocks (quant_legacy.cpp).
void quant_f32(const float* x, uint8_t* dst, int64_t n);
void quant_f16(const float* x, uint8_t* dst, int64_t n);
void quant_bf16(const float* x, uint8_t* dst, int64_t n);
void quant_q4_0(const float* x, uint8_t* dst, int64_t nb);
void quant_q4_1(const float* x, uint8_t* dst, int64_t nb);
void quant_q5_0(const float* x, uint8_t* dst, int64_t nb);
void quant_q5_1(const float* x, uint8_t* dst, int64_t nb);
void quant_q8_0(const float* x, uint8_t* dst, int64_t nb);
void quant_q8_1(const float* x, uint8_t* dst, int64_t nb);
void quant_iq4_nl(const float* x, uint8_t* dst, int64_t nb);
void quant_mxfp4(const float* x, uint8_t* dst, int64_t nb);

// 256-element K-quant super-blocks (quant_kquants.cpp).
void quant_q2_k(const float* x, uint8_t* dst, int64_t nb);
void quant_q3_k(const float* x, uint8_t* dst, int64_t nb);
void quant_q4_k(const float* x, uint8_t* dst, int64_t nb);
void quant_q5_k(const float* x, uint8_t* dst, int64_t nb);
void quant_q6_k(const float* x, uint8_t* dst, int64_t nb);
void quant_q8_k(const float* x, uint8_t* dst, int64_t nb);

}  // namespace hearth::quant

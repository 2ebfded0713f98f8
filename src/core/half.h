// Conversions between float and the two 16-bit float formats of GGUF tensors:
// IEEE binary16 ("f16", ggml_fp16_t) and bfloat16 ("bf16", ggml_bf16_t).
// Results are bit-identical with ggml's scalar conversions (ggml-impl.h):
//  - f16 -> f32 and bf16 -> f32 are exact (every value, subnormals, inf); an f16 NaN keeps
//    its sign and payload and comes back quiet, as from ggml (whose multiply quiets it);
//  - f32 -> f16 rounds to nearest, ties to even; overflow gives inf; every NaN becomes
//    the quiet NaN 0x7e00 with the input's sign (ggml's behaviour, payload dropped);
//  - f32 -> bf16 rounds to nearest, ties to even; subnormals kept; a NaN keeps its top
//    payload bits and is forced quiet (bit 6 set).
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <cstring>

namespace hearth {

// Bits of a float / float of bits (no aliasing tricks).
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Exact value of an f16 given by its bits.
float f16_to_f32(uint16_t h);
// Nearest f16 (ties to even) of a float, as bits.
uint16_t f32_to_f16(float f);

// Exact value of a bf16 given by its bits.
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
// Nearest bf16 (ties to even, NaN forced quiet) of a float, as bits.
uint16_t f32_to_bf16(float f);

// Row helpers: n values from src to dst (no overlap).
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n);

}  // namespace hearth

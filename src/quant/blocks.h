// Byte layouts of ggml's quantized blocks (ggml-common.h), as plain structs of
// byte arrays: alignment 1 and no padding, so a block can be read in place at
// any offset of a mapped file. Multi-byte fields are little-endian (GGUF) and
// read through the load/store helpers below. Internal to the quant layer.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"

namespace hearth::quant {

inline constexpr int kQK = 32;    // elements per legacy block (Q4_0 ... Q8_1, IQ4_NL, MXFP4)
inline constexpr int kQKK = 256;  // elements per K-quant super-block

using Half = uint8_t[2];  // little-endian f16 bits

inline float load_f16(const Half& h) { return f16_to_f32(static_cast<uint16_t>(h[0] | (h[1] << 8))); }
inline uint16_t load_f16_bits(const Half& h) { return static_cast<uint16_t>(h[0] | (h[1] << 8)); }
inline void store_f16(Half& h, float f) {
  const uint16_t b = f32_to_f16(f);
  h[0] = static_cast<uint8_t>(b & 0xff);
  h[1] = static_cast<uint8_t>(b >> 8);
}
inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline float load_f32(const uint8_t* p) { return f32_from_bits(load_u32(p)); }
inline void store_f32(uint8_t* p, float f) { store_u32(p, f32_bits(f)); }

// x = d * (q - 8), q 4-bit; element j in low nibble of qs[j], j+16 in high nibble.
struct BlockQ4_0 { Half d; uint8_t qs[kQK / 2]; };
// x = d * q + m, q 4-bit.
struct BlockQ4_1 { Half d; Half m; uint8_t qs[kQK / 2]; };
// x = d * (q - 16), q 5-bit: low 4 bits as Q4_0, bit 4 of element j in bit j of qh (LE u32).
struct BlockQ5_0 { Half d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
// x = d * q + m, q 5-bit.
struct BlockQ5_1 { Half d; Half m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
// x = d * q, q int8.
struct BlockQ8_0 { Half d; int8_t qs[kQK]; };
// x = d * q; s = d * sum(q) (used by dot products only).
struct BlockQ8_1 { Half d; Half s; int8_t qs[kQK]; };
// x = d * kvalues_iq4nl[q], q 4-bit, nibbles as Q4_0.
struct BlockIQ4_NL { Half d; uint8_t qs[kQK / 2]; };
// x = 2^(e-128) * kvalues_fp4[q] (E8M0 scale, E2M1 values doubled).
struct BlockMXFP4 { uint8_t e; uint8_t qs[kQK / 2]; };

// 16 sub-blocks of 16: x = d * (sc & 15) * q - dmin * (sc >> 4), q 2-bit.
struct BlockQ2_K { uint8_t scales[kQKK / 16]; uint8_t qs[kQKK / 4]; Half d; Half dmin; };
// 16 sub-blocks of 16: x = d * (s - 32) * (q - 4 * !hbit), q 2 low bits + high bit in hmask,
// s 6-bit scales packed in 12 bytes.
struct BlockQ3_K { uint8_t hmask[kQKK / 8]; uint8_t qs[kQKK / 4]; uint8_t scales[12]; Half d; };
// 8 sub-blocks of 32: x = d * sc * q - dmin * m, q 4-bit, 6-bit sc/m packed in 12 bytes.
struct BlockQ4_K { Half d; Half dmin; uint8_t scales[12]; uint8_t qs[kQKK / 2]; };
// As Q4_K with a fifth bit per element in qh.
struct BlockQ5_K { Half d; Half dmin; uint8_t scales[12]; uint8_t qh[kQKK / 8]; uint8_t qs[kQKK / 2]; };
// 16 sub-blocks of 16: x = d * sc * (q - 32), q 6-bit (4 low in ql, 2 high in qh), sc int8.
struct BlockQ6_K { uint8_t ql[kQKK / 2]; uint8_t qh[kQKK / 4]; int8_t scales[kQKK / 16]; Half d; };
// x = d * q with an f32 d; bsums = sums of 16 consecutive q (for dot products).
struct BlockQ8_K { uint8_t d[4]; int8_t qs[kQKK]; uint8_t bsums[2 * kQKK / 16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 &&
              sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(alignof(BlockQ8_K) == 1 && alignof(BlockQ6_K) == 1);

// Non-linear 4-bit codebook of IQ4_NL / IQ4_XS.
inline constexpr int8_t kValuesIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values times two, shared by MXFP4 (and NVFP4).
inline constexpr int8_t kValuesFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e-128): half the E8M0 scale, as ggml's ggml_e8m0_to_fp32_half (e = 0, 1 are subnormal).
inline float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return f32_from_bits(bits);
}

// Unpacks the j-th (0..7) 6-bit scale and min of a Q4_K / Q5_K block.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Unpacks the 16 6-bit scales of a Q3_K block (stored offset by 32) into signed values.
inline void q3k_scales(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xf) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

}  // namespace hearth::quant

// Reference dequantization of the float types (F32, F16, BF16) and the legacy
// 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, MXFP4).
// Algorithm per block: x[j] = d * q[j] (+ m), with q unpacked from nibbles /
// bytes; element j of the first half shares a byte with element j + 16.
// The float expression and its order match ggml's dequantize_row_* exactly:
// the integer quant is converted to float, multiplied by d, then m is added.
#include "quant/fp_contract_off.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant_kernels.h"

namespace hearth::quant {

void dequant_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8)));
}

void dequant_q4_0(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_0& b = blocks[i];
    const float d = load_f16(b.d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) - 8;
      const int hi = (b.qs[j] >> 4) - 8;
      y[j] = static_cast<float>(lo) * d;
      y[j + kQK / 2] = static_cast<float>(hi) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_1& b = blocks[i];
    const float d = load_f16(b.d);
    const float m = load_f16(b.m);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = b.qs[j] & 0x0f;
      const int hi = b.qs[j] >> 4;
      y[j] = static_cast<float>(lo) * d + m;
      y[j + kQK / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequant_q5_0(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ5_0& b = blocks[i];
    const float d = load_f16(b.d);
    const uint32_t qh = load_u32(b.qh);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = static_cast<int>((b.qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16;
      const int hi = static_cast<int>((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
      y[j] = static_cast<float>(lo) * d;
      y[j + kQK / 2] = static_cast<float>(hi) * d;
    }
  }
}

void dequant_q5_1(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ5_1& b = blocks[i];
    const float d = load_f16(b.d);
    const float m = load_f16(b.m);
    const uint32_t qh = load_u32(b.qh);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = static_cast<int>((b.qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
      const int hi = static_cast<int>((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      y[j] = static_cast<float>(lo) * d + m;
      y[j + kQK / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_0& b = blocks[i];
    const float d = load_f16(b.d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// ggml has no to_float for Q8_1 (it is only a dot-product operand); the value
// of an element is d * q as for Q8_0, and s is ignored.
void dequant_q8_1(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_1& b = blocks[i];
    const float d = load_f16(b.d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockIQ4_NL& b = blocks[i];
    const float d = load_f16(b.d);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(kValuesIQ4NL[b.qs[j] & 0x0f]);
      y[j + kQK / 2] = d * static_cast<float>(kValuesIQ4NL[b.qs[j] >> 4]);
    }
  }
}

void dequant_mxfp4(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockMXFP4*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockMXFP4& b = blocks[i];
    const float d = e8m0_to_f32_half(b.e);
    float* y = dst + i * kQK;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kValuesFP4[b.qs[j] & 0x0f]) * d;
      y[j + kQK / 2] = static_cast<float>(kValuesFP4[b.qs[j] >> 4]) * d;
    }
  }
}

}  // namespace hearth::quant

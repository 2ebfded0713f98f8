// Reference dequantization of the K-quant super-blocks (256 elements):
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K.
// Algorithm: each super-block has an f16 scale d (and dmin); each sub-block
// of 16 or 32 elements has a small integer scale (and min) that multiplies d;
// elements are x = (d * scale) * q - (dmin * min). The low bits of the quants
// are interleaved as in ggml (Q2_K/Q3_K: 4 bit-planes of 2 bits over 32 bytes
// per 128 elements; Q4_K/Q5_K: nibbles over 32 bytes per 64 elements; Q6_K:
// nibbles in ql, 2-bit planes in qh per 128 elements). Float operations are
// done in the same order as ggml's dequantize_row_* (scale product first, in
// float; min subtracted last), which makes the results bit-identical.
#include "quant/fp_contract_off.h"

#include "quant/blocks.h"
#include "quant/dequant_kernels.h"

namespace hearth::quant {

void dequant_q2_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ2_K& b = blocks[i];
    const float d = load_f16(b.d);
    const float dmin = load_f16(b.dmin);
    float* y = dst + i * kQKK;
    int sub = 0;  // sub-block of 16, 0..15
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int plane = 0; plane < 4; ++plane) {
        const int shift = 2 * plane;
        for (int part = 0; part < 2; ++part, ++sub) {
          const uint8_t sc = b.scales[sub];
          const float dl = d * static_cast<float>(sc & 0xf);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            const int v = (q[16 * part + l] >> shift) & 3;
            *y++ = dl * static_cast<float>(v) - ml;
          }
        }
      }
    }
  }
}

void dequant_q3_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ3_K& b = blocks[i];
    const float d = load_f16(b.d);
    int8_t scales[16];
    q3k_scales(b.scales, scales);
    float* y = dst + i * kQKK;
    int sub = 0;
    int hbit = 0;  // bit of hmask[l] that holds the high bit of this plane
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int plane = 0; plane < 4; ++plane, ++hbit) {
        const int shift = 2 * plane;
        for (int part = 0; part < 2; ++part, ++sub) {
          const float dl = d * static_cast<float>(scales[sub]);
          for (int l = 0; l < 16; ++l) {
            const int idx = 16 * part + l;
            const int low = (q[idx] >> shift) & 3;
            const int v = low - (((b.hmask[idx] >> hbit) & 1) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequant_q4_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_K& b = blocks[i];
    const float d = load_f16(b.d);
    const float dmin = load_f16(b.dmin);
    float* y = dst + i * kQKK;
    for (int pair = 0; pair < 4; ++pair) {  // 64 elements: low nibbles, then high nibbles
      const uint8_t* q = b.qs + 32 * pair;
      uint8_t sc, m;
      k4_scale_min(2 * pair, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      k4_scale_min(2 * pair + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ5_K& b = blocks[i];
    const float d = load_f16(b.d);
    const float dmin = load_f16(b.dmin);
    float* y = dst + i * kQKK;
    for (int pair = 0; pair < 4; ++pair) {
      const uint8_t* ql = b.qs + 32 * pair;
      const int bit1 = 2 * pair;  // qh bit of the low-nibble sub-block
      const int bit2 = 2 * pair + 1;
      uint8_t sc, m;
      k4_scale_min(2 * pair, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      k4_scale_min(2 * pair + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        const int v = (ql[l] & 0xf) + (((b.qh[l] >> bit1) & 1) ? 16 : 0);
        *y++ = d1 * static_cast<float>(v) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (ql[l] >> 4) + (((b.qh[l] >> bit2) & 1) ? 16 : 0);
        *y++ = d2 * static_cast<float>(v) - m2;
      }
    }
  }
}

void dequant_q6_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_K& b = blocks[i];
    const float d = load_f16(b.d);
    float* y = dst + i * kQKK;
    for (int half = 0; half < 2; ++half) {  // 128 elements each
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      const int8_t* sc = b.scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        // (d * scale) * q: the product order of ggml's reference.
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
      y += 128;
    }
  }
}

void dequant_q8_k(const uint8_t* src, float* dst, int64_t nb) {
  const auto* blocks = reinterpret_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_K& b = blocks[i];
    const float d = load_f32(b.d);
    float* y = dst + i * kQKK;
    for (int j = 0; j < kQKK; ++j) y[j] = d * static_cast<float>(b.qs[j]);
  }
}

}  // namespace hearth::quant

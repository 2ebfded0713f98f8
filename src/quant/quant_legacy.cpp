// Reference quantization to the float types and the legacy 32-element blocks.
// Algorithms (ggml's quantize_row_*_ref):
//  - Q4_0 / Q5_0: d = (signed value of largest magnitude) / -8 (/ -16), so that
//    value maps to the lowest level; q = trunc(x / d + 8.5) (+ 16.5), capped at 15 (31).
//  - Q4_1 / Q5_1: d = (max - min) / 15 (/ 31), m = min; q = trunc((x - min) / d + 0.5).
//  - Q8_0 / Q8_1: d = amax / 127; q = round(x / d) (half away from zero);
//    Q8_1 also stores s = d * sum(q).
//  - IQ4_NL: as ggml_quantize_chunk without imatrix (quantize_iq4_nl, 7 tries):
//    weights x^2, start from d = max / 127, then the best of 15 candidate
//    inverse scales by weighted least squares; each value takes the nearest
//    codebook entry (binary search, as ggml's best_index_int8).
//  - MXFP4: shared power-of-two scale 2^(floor(log2(amax)) - 2); each value takes
//    the nearest E2M1 code (first one on ties).
// "x / d" is x * (1/d) computed in float, exactly as ggml does.
#include "quant/fp_contract_off.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant_kernels.h"

namespace hearth::quant {
namespace {

// Signed value of largest magnitude (the first one on ties), and that magnitude.
void abs_max(const float* x, int n, float* amax_out, float* max_out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  *amax_out = amax;
  *max_out = max;
}

void min_max(const float* x, int n, float* min_out, float* max_out) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  *min_out = min;
  *max_out = max;
}

}  // namespace

void quant_f32(const float* x, uint8_t* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

void quant_f16(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    dst[2 * i] = static_cast<uint8_t>(h & 0xff);
    dst[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

void quant_bf16(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    dst[2 * i] = static_cast<uint8_t>(h & 0xff);
    dst[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

void quant_q4_0(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax, max;
    abs_max(x, kQK, &amax, &max);
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0& b = blocks[i];
    store_f16(b.d, d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min<int>(15, trunc_to_i8(x[j] * id + 8.5f));
      const int hi = std::min<int>(15, trunc_to_i8(x[j + kQK / 2] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quant_q4_1(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1& b = blocks[i];
    store_f16(b.d, d);
    store_f16(b.m, min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = std::min<int>(15, trunc_to_i8((x[j] - min) * id + 0.5f));
      const int hi = std::min<int>(15, trunc_to_i8((x[j + kQK / 2] - min) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quant_q5_0(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax, max;
    abs_max(x, kQK, &amax, &max);
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0& b = blocks[i];
    store_f16(b.d, d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = static_cast<uint8_t>(std::min<int>(31, trunc_to_i8(x[j] * id + 16.5f)));
      const uint8_t hi = static_cast<uint8_t>(std::min<int>(31, trunc_to_i8(x[j + kQK / 2] * id + 16.5f)));
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kQK / 2);
    }
    store_u32(b.qh, qh);
  }
}

void quant_q5_1(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    min_max(x, kQK, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1& b = blocks[i];
    store_f16(b.d, d);
    store_f16(b.m, min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t lo = trunc_to_u8((x[j] - min) * id + 0.5f);
      const uint8_t hi = trunc_to_u8((x[j + kQK / 2] - min) * id + 0.5f);
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + kQK / 2);
    }
    store_u32(b.qh, qh);
  }
}

void quant_q8_0(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0& b = blocks[i];
    store_f16(b.d, d);
    for (int j = 0; j < kQK; ++j) b.qs[j] = trunc_to_i8(std::round(x[j] * id));
  }
}

void quant_q8_1(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_1& b = blocks[i];
    store_f16(b.d, d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b.qs[j] = trunc_to_i8(std::round(x[j] * id));
      sum += b.qs[j];
    }
    store_f16(b.s, static_cast<float>(sum) * d);
  }
}

namespace {

// Index of the codebook entry nearest to v (codebook sorted ascending; on a tie the upper one).
int nearest_code(const int8_t* values, int n, float v) {
  if (v <= static_cast<float>(values[0])) return 0;
  if (v >= static_cast<float>(values[n - 1])) return n - 1;
  int lo = 0, hi = n - 1;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < static_cast<float>(values[mid])) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return v - static_cast<float>(values[hi - 1]) < static_cast<float>(values[hi]) - v ? hi - 1 : hi;
}

constexpr int kIQ4NLTries = 7;  // what ggml_quantize_chunk uses (quantize_row_iq4_nl_ref uses none)

}  // namespace

void quant_iq4_nl(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockIQ4_NL*>(dst);
  const int8_t* values = kValuesIQ4NL;
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    BlockIQ4_NL& b = blocks[i];
    float weight[kQK];
    for (int j = 0; j < kQK; ++j) weight[j] = x[j] * x[j];
    float amax, max;
    abs_max(x, kQK, &amax, &max);
    float scale = 0.0f;
    if (amax >= 1e-15f) {
      float d = -max / static_cast<float>(values[0]);
      float id = 1 / d;
      float sumqx = 0, sumq2 = 0;
      for (int j = 0; j < kQK; ++j) {
        const float q = static_cast<float>(values[nearest_code(values, 16, id * x[j])]);
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
      }
      d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
      float best = d * sumqx;
      for (int itry = -kIQ4NLTries; itry <= kIQ4NLTries; ++itry) {
        id = static_cast<float>(itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < kQK; ++j) {
          const float q = static_cast<float>(values[nearest_code(values, 16, id * x[j])]);
          sumqx += weight[j] * q * x[j];
          sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
      scale = d;
    }
    store_f16(b.d, scale);
    const float id = scale != 0.0f ? 1 / scale : 0.0f;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = nearest_code(values, 16, id * x[j]);
      const int hi = nearest_code(values, 16, id * x[j + kQK / 2]);
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void quant_mxfp4(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockMXFP4*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const uint8_t e = amax > 0.0f ? trunc_to_u8(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const float d = e8m0_to_f32_half(e);
    auto best = [d](float v) {
      int best_idx = 0;
      float best_err = std::fabs(static_cast<float>(kValuesFP4[0]) * d - v);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(static_cast<float>(kValuesFP4[k]) * d - v);
        if (err < best_err) {
          best_idx = k;
          best_err = err;
        }
      }
      return best_idx;
    };
    BlockMXFP4& b = blocks[i];
    b.e = e;
    for (int j = 0; j < kQK / 2; ++j) b.qs[j] = static_cast<uint8_t>(best(x[j]) | (best(x[j + kQK / 2]) << 4));
  }
}

}  // namespace hearth::quant

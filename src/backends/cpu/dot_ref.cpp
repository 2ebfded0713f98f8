// Reference quantized dot products and activation quantizers: plain loops over
// ggml's block layouts (quant/blocks.h), the same arithmetic as ggml's generic
// C kernels (per-block integer sums, scaled in float). The oracle for the SIMD kernels.
#include <array>
#include <cmath>
#include <cstdlib>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/quant_dot.h"
#include "quant/blocks.h"

namespace hearth::cpu {

using namespace hearth::quant;

namespace ref {

namespace {
// Q8_K activation block as ggml lays it out (f32 d, int8 qs, int16 bsums), read natively.
float q8k_d(const BlockQ8_K& b) { return load_f32(b.d); }
int16_t q8k_bsum(const BlockQ8_K& b, int j) {
  return static_cast<int16_t>(b.bsums[2 * j] | (b.bsums[2 * j + 1] << 8));
}
void q8k_set_bsum(BlockQ8_K& b, int j, int v) {
  b.bsums[2 * j] = static_cast<uint8_t>(v & 0xff);
  b.bsums[2 * j + 1] = static_cast<uint8_t>((v >> 8) & 0xff);
}
// Round to nearest, ties to even: what ggml's x86 SIMD activation quantizers do, so
// activations quantize exactly as llama.cpp quantizes them on these machines.
int8_t round_q(float v) { return static_cast<int8_t>(std::nearbyint(v)); }
}  // namespace

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    store_f16(y[b].d, d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = round_q(xb[j] * id);
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[b].qs[j] = round_q(xb[j] * id);
      sum += y[b].qs[j];
    }
    store_f16(y[b].d, d);
    store_f16(y[b].s, static_cast<float>(sum) * d);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* xb = x + b * kQKK;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      store_f32(y[b].d, 0.0f);
      for (int j = 0; j < kQKK; ++j) y[b].qs[j] = 0;
      for (int j = 0; j < kQKK / 16; ++j) q8k_set_bsum(y[b], j, 0);
      continue;
    }
    // Scale by the signed extreme so it maps to -127 exactly (ggml's choice).
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      const int v = static_cast<int>(std::nearbyint(iscale * xb[j]));
      y[b].qs[j] = static_cast<int8_t>(std::min(127, v));
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * j + i];
      q8k_set_bsum(y[b], j, sum);
    }
    store_f32(y[b].d, 1.0f / iscale);
  }
}

float dot_q4_0_q8_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j] + ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (load_f16(w[b].d) * load_f16(x[b].d));
  }
  return sum;
}

float dot_q4_1_q8_1(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_1*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (w[b].qs[j] & 0xf) * x[b].qs[j] + (w[b].qs[j] >> 4) * x[b].qs[j + kQK / 2];
    }
    sum += (load_f16(w[b].d) * load_f16(x[b].d)) * static_cast<float>(sumi) + load_f16(w[b].m) * load_f16(x[b].s);
  }
  return sum;
}

float dot_q5_0_q8_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t qh = load_u32(w[b].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = ((w[b].qs[j] & 0xf) | (((qh >> j) & 1) << 4)) - 16;
      const int hi = ((w[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += lo * x[b].qs[j] + hi * x[b].qs[j + kQK / 2];
    }
    sum += static_cast<float>(sumi) * (load_f16(w[b].d) * load_f16(x[b].d));
  }
  return sum;
}

float dot_q5_1_q8_1(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_1*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t qh = load_u32(w[b].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (w[b].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
      const int hi = (w[b].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += lo * x[b].qs[j] + hi * x[b].qs[j + kQK / 2];
    }
    sum += (load_f16(w[b].d) * load_f16(x[b].d)) * static_cast<float>(sumi) + load_f16(w[b].m) * load_f16(x[b].s);
  }
  return sum;
}

float dot_q8_0_q8_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += w[b].qs[j] * x[b].qs[j];
    sum += static_cast<float>(sumi) * (load_f16(w[b].d) * load_f16(x[b].d));
  }
  return sum;
}

namespace {
// Q4_K and Q5_K share their layout of 8 sub-blocks of 32 with 6-bit scales and mins;
// Q5_K adds a fifth bit per value in qh (bit j for sub-block j).
template <typename Block, bool kFifthBit>
float dot_k4_family(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const Block*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {  // 8 sub-blocks of 32: low nibbles of 32 bytes, then high
      uint8_t sc = 0, m = 0;
      k4_scale_min(j, w[b].scales, &sc, &m);
      const uint8_t* q = w[b].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      int s = 0;
      for (int i = 0; i < 32; ++i) {
        int v = (q[i] >> shift) & 0xf;
        if constexpr (kFifthBit) v |= ((w[b].qh[i] >> j) & 1) << 4;
        s += v * x[b].qs[32 * j + i];
      }
      sumi += sc * s;
      summ += m * (q8k_bsum(x[b], 2 * j) + q8k_bsum(x[b], 2 * j + 1));
    }
    const float dx = q8k_d(x[b]);
    sum += load_f16(w[b].d) * dx * static_cast<float>(sumi) - load_f16(w[b].dmin) * dx * static_cast<float>(summ);
  }
  return sum;
}
}  // namespace

float dot_q4_k_q8_k(int64_t n, const void* wv, const void* xv) {
  return dot_k4_family<BlockQ4_K, false>(n, wv, xv);
}

float dot_q5_k_q8_k(int64_t n, const void* wv, const void* xv) {
  return dot_k4_family<BlockQ5_K, true>(n, wv, xv);
}

float dot_q6_k_q8_k(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    // Unpack the 256 6-bit values (two halves of 128, each four groups of 32).
    std::array<int8_t, kQKK> v{};
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const uint8_t* qh = w[b].qh + 32 * h;
      int8_t* out = v.data() + 128 * h;
      for (int i = 0; i < 32; ++i) {
        out[i] = static_cast<int8_t>(((ql[i] & 0xf) | (((qh[i] >> 0) & 3) << 4)) - 32);
        out[i + 32] = static_cast<int8_t>(((ql[i + 32] & 0xf) | (((qh[i] >> 2) & 3) << 4)) - 32);
        out[i + 64] = static_cast<int8_t>(((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4)) - 32);
        out[i + 96] = static_cast<int8_t>(((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4)) - 32);
      }
    }
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += v[16 * j + i] * x[b].qs[16 * j + i];
      sumi += w[b].scales[j] * s;
    }
    sum += load_f16(w[b].d) * q8k_d(x[b]) * static_cast<float>(sumi);
  }
  return sum;
}

}  // namespace ref

namespace {

constexpr std::array kRefKernels = {
    DotKernel{GgmlType::Q4_0, GgmlType::Q8_0, ref::quantize_q8_0, ref::dot_q4_0_q8_0, "ref"},
    DotKernel{GgmlType::Q4_1, GgmlType::Q8_1, ref::quantize_q8_1, ref::dot_q4_1_q8_1, "ref"},
    DotKernel{GgmlType::Q5_0, GgmlType::Q8_0, ref::quantize_q8_0, ref::dot_q5_0_q8_0, "ref"},
    DotKernel{GgmlType::Q5_1, GgmlType::Q8_1, ref::quantize_q8_1, ref::dot_q5_1_q8_1, "ref"},
    DotKernel{GgmlType::Q8_0, GgmlType::Q8_0, ref::quantize_q8_0, ref::dot_q8_0_q8_0, "ref"},
    DotKernel{GgmlType::Q4_K, GgmlType::Q8_K, ref::quantize_q8_k, ref::dot_q4_k_q8_k, "ref"},
    DotKernel{GgmlType::Q5_K, GgmlType::Q8_K, ref::quantize_q8_k, ref::dot_q5_k_q8_k, "ref"},
    DotKernel{GgmlType::Q6_K, GgmlType::Q8_K, ref::quantize_q8_k, ref::dot_q6_k_q8_k, "ref"},
};

}  // namespace

// The SIMD kernels of this build's architecture (x86-64: dot_avx2.cpp; aarch64:
// dot_neon.cpp, which checks the CPU's features itself), else the reference.
const DotKernel* find_dot_kernel(GgmlType type, bool reference_only) {
#if defined(__x86_64__)
  if (!reference_only && cpu_features().avx2 && cpu_features().fma && cpu_features().f16c) {
    if (const DotKernel* k = avx2::find(type)) return k;
  }
#elif defined(__aarch64__)
  if (!reference_only) {
    if (const DotKernel* k = neon::find(type)) return k;
  }
#endif
  for (const auto& k : kRefKernels) {
    if (k.weight_type == type) return &k;
  }
  return nullptr;
}

}  // namespace hearth::cpu

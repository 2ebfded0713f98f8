// NEON quantized dot products for aarch64 (compiled only there, see src/CMakeLists.txt):
// Q4_0, Q4_1 and Q8_0 against Q8_0 / Q8_1, Q4_K and Q6_K against Q8_K, the hot decode
// products. Two builds of the same kernels (dot_neon.inc): plain ARMv8-A NEON (widening
// multiplies vmull_s8 and pairwise additions), and one compiled under a target pragma for
// the dot-product extension (SDOT, four 4-byte dot products per instruction) used only
// when the kernel reports it (HWCAP_ASIMDDP), so one binary runs on every ARMv8-A CPU.
// Both give the same bits as x86's AVX2 kernels: the K-quants equal the reference kernels
// (dot_ref.cpp: exact integer sums, then its float expression in its order), the legacy
// types ggml's AVX2 lane order (dot_neon.inc), and the build never contracts a * b + c
// into a fused multiply-add behind the code's back (CMakeLists.txt).
// The other types (Q5_0, Q5_1, Q5_K, ...) run their reference kernels on ARM for now.
#include "backends/cpu/quant_dot.h"

#include <arm_neon.h>

#include <array>
#include <bit>

#include "backends/cpu/cpu_features.h"
#include "quant/blocks.h"

namespace hearth::cpu {

using namespace hearth::quant;

namespace neon {
namespace {

// The 8 6-bit scales and 8 mins of a Q4_K block (k4_scale_min for every j at once, on
// three little-endian words of the packed bytes).
inline void k4_scales_mins(const uint8_t* packed, uint8_t sc[8], uint8_t m[8]) {
  const uint32_t u0 = load_u32(packed), u1 = load_u32(packed + 4), u2 = load_u32(packed + 8);
  store_u32(sc, u0 & 0x3f3f3f3fu);
  store_u32(sc + 4, (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4));
  store_u32(m, u1 & 0x3f3f3f3fu);
  store_u32(m + 4, ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4));
}

// f16 -> f32 by the FCVT instruction: exact, so the same value as quant::load_f16 (which
// calls the portable converter out of line, two calls per block in these loops).
inline float f16(const Half& h) { return static_cast<float>(std::bit_cast<__fp16>(load_f16_bits(h))); }

// Plain NEON: the 16 products widened to int16 (|a b| <= 128 * 128 fits), then added
// pairwise into the int32 lanes.
inline int32x4_t dot16_plain(int32x4_t acc, int8x16_t a, int8x16_t b) {
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}

// Plain NEON, SDOT's lane grouping: the products widened, then added in adjacent pairs
// twice (vpaddlq_s16, vpaddq_s32), so lane l holds products 4l .. 4l + 3.
inline int32x4_t dot4_plain(int8x16_t a, int8x16_t b) {
  return vpaddq_s32(vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b))), vpaddlq_s16(vmull_high_s8(a, b)));
}

}  // namespace

#define HEARTH_NS plain
#define HEARTH_TGT
#define HEARTH_DOT16(acc, a, b) dot16_plain((acc), (a), (b))
#define HEARTH_DOT4(a, b) dot4_plain((a), (b))
#include "backends/cpu/dot_neon.inc"
#undef HEARTH_NS
#undef HEARTH_TGT
#undef HEARTH_DOT16
#undef HEARTH_DOT4

// (A target pragma rather than a function attribute: GCC 12 does not let the SDOT
// intrinsic inline into functions marked target("+dotprod").)
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#define HEARTH_NS dotprod
#define HEARTH_TGT
#define HEARTH_DOT16(acc, a, b) vdotq_s32((acc), (a), (b))
#define HEARTH_DOT4(a, b) vdotq_s32(vdupq_n_s32(0), (a), (b))
#include "backends/cpu/dot_neon.inc"
#undef HEARTH_NS
#undef HEARTH_TGT
#undef HEARTH_DOT16
#undef HEARTH_DOT4
#pragma GCC pop_options

namespace {

// The matrix product as find_matmul_kernel's callers take it (weights' rows x activation
// rows), one vec_dot per output: each weight row is read once for all the tokens, and
// the activations are quantized once per call by the caller. Equal to vec_dot by
// construction. (A register-tiled NEON product is future work.)
template <VecDotFn kDot>
void rows_matmul(int64_t n, const void* w, uint64_t w_stride, int64_t n_w, const void* x, uint64_t x_stride,
                 int64_t n_x, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < n_w; ++r) {
    const void* wr = static_cast<const uint8_t*>(w) + static_cast<uint64_t>(r) * w_stride;
    for (int64_t t = 0; t < n_x; ++t) {
      y[t * y_stride + r] = kDot(n, wr, static_cast<const uint8_t*>(x) + static_cast<uint64_t>(t) * x_stride);
    }
  }
}

struct MatmulEntry {
  GgmlType type;
  MatmulFn plain, dotprod;
};
constexpr MatmulEntry kMatmul[] = {
    {GgmlType::Q4_0, rows_matmul<plain::dot_q4_0_q8_0>, rows_matmul<dotprod::dot_q4_0_q8_0>},
    {GgmlType::Q4_1, rows_matmul<plain::dot_q4_1_q8_1>, rows_matmul<dotprod::dot_q4_1_q8_1>},
    {GgmlType::Q8_0, rows_matmul<plain::dot_q8_0_q8_0>, rows_matmul<dotprod::dot_q8_0_q8_0>},
    {GgmlType::Q4_K, rows_matmul<plain::dot_q4_k_q8_k>, rows_matmul<dotprod::dot_q4_k_q8_k>},
    {GgmlType::Q6_K, rows_matmul<plain::dot_q6_k_q8_k>, rows_matmul<dotprod::dot_q6_k_q8_k>},
};

constexpr std::array kPlain = {
    DotKernel{GgmlType::Q4_0, GgmlType::Q8_0, ref::quantize_q8_0, plain::dot_q4_0_q8_0, "neon"},
    DotKernel{GgmlType::Q4_1, GgmlType::Q8_1, ref::quantize_q8_1, plain::dot_q4_1_q8_1, "neon"},
    DotKernel{GgmlType::Q8_0, GgmlType::Q8_0, ref::quantize_q8_0, plain::dot_q8_0_q8_0, "neon"},
    DotKernel{GgmlType::Q4_K, GgmlType::Q8_K, ref::quantize_q8_k, plain::dot_q4_k_q8_k, "neon"},
    DotKernel{GgmlType::Q6_K, GgmlType::Q8_K, ref::quantize_q8_k, plain::dot_q6_k_q8_k, "neon"},
};
constexpr std::array kDotprod = {
    DotKernel{GgmlType::Q4_0, GgmlType::Q8_0, ref::quantize_q8_0, dotprod::dot_q4_0_q8_0, "neon-dotprod"},
    DotKernel{GgmlType::Q4_1, GgmlType::Q8_1, ref::quantize_q8_1, dotprod::dot_q4_1_q8_1, "neon-dotprod"},
    DotKernel{GgmlType::Q8_0, GgmlType::Q8_0, ref::quantize_q8_0, dotprod::dot_q8_0_q8_0, "neon-dotprod"},
    DotKernel{GgmlType::Q4_K, GgmlType::Q8_K, ref::quantize_q8_k, dotprod::dot_q4_k_q8_k, "neon-dotprod"},
    DotKernel{GgmlType::Q6_K, GgmlType::Q8_K, ref::quantize_q8_k, dotprod::dot_q6_k_q8_k, "neon-dotprod"},
};

}  // namespace

const DotKernel* find(GgmlType type) {
  const CpuFeatures& f = cpu_features();
  if (!f.neon) return nullptr;
  for (const auto& k : f.dotprod ? kDotprod : kPlain) {
    if (k.weight_type == type) return &k;
  }
  return nullptr;
}

const DotKernel* find_plain(GgmlType type) {
  if (!cpu_features().neon) return nullptr;
  for (const auto& k : kPlain) {
    if (k.weight_type == type) return &k;
  }
  return nullptr;
}

}  // namespace neon

// The x86 instruction sets asked for by name (kAvx2, kVnni) do not exist here.
MatmulFn find_matmul_kernel(GgmlType type, MatmulIsa isa) {
  const CpuFeatures& f = cpu_features();
  if (isa != MatmulIsa::kBest || !f.neon) return nullptr;
  for (const auto& e : neon::kMatmul) {
    if (e.type == type) return f.dotprod ? e.dotprod : e.plain;
  }
  return nullptr;
}

}  // namespace hearth::cpu

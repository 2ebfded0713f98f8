// The NEON builds of the element-wise activations of the kernel table (kernel_table.h),
// aarch64 only: SwiGLU and the GDN conv's SiLU with ggml's exp_approx (ggml_order.h)
// evaluated on 4 lanes, its operations lane by lane: fma(-n, c, x) is FMLS (the negation
// of the exact product is exact), the polynomial FMLA, the power of two built in the
// exponent bits. Negation, division, the + 1 and the product are single exact / IEEE
// operations either way, so the plain build's bits. A group of 4 with a lane whose
// exponent leaves [-126, 127] runs the scalar code (its subnormal / overflow scaling).
#include <arm_neon.h>

#include <cstdint>

#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kernels_neon.h"

namespace hearth::cpu {
namespace {

// exp_approx on 4 lanes; false (out untouched) when a lane's n is outside [-126, 127].
inline bool exp4(float32x4_t x, float32x4_t& out) {
  const float32x4_t shift = vdupq_n_f32(0x1.8p23f);
  const float32x4_t n = vsubq_f32(vfmaq_f32(shift, x, vdupq_n_f32(0x1.715476p+0f)), shift);
  const uint32x4_t ok = vandq_u32(vcgeq_f32(n, vdupq_n_f32(-126.0f)), vcleq_f32(n, vdupq_n_f32(127.0f)));
  if (vminvq_u32(ok) == 0) return false;
  const float32x4_t r =
      vfmsq_f32(vfmsq_f32(x, n, vdupq_n_f32(0x1.62e4p-1f)), n, vdupq_n_f32(0x1.7f7d1cp-20f));
  const float32x4_t r2 = vmulq_f32(r, r);
  const float32x4_t hi = vfmaq_f32(vfmaq_f32(vdupq_n_f32(0x1.fffdb6p-2f), vdupq_n_f32(0x1.555e66p-3f), r), r2,
                                   vfmaq_f32(vdupq_n_f32(0x1.573e2ep-5f), vdupq_n_f32(0x1.0e4020p-7f), r));
  const float32x4_t p = vfmaq_f32(vfmaq_f32(vdupq_n_f32(1.0f), vdupq_n_f32(0x1.ffffecp-1f), r), hi, r2);
  // n is a whole number in range: the conversion is exact, as static_cast<int>.
  const int32x4_t e = vcvtq_s32_f32(n);
  const float32x4_t pow2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(e, vdupq_n_s32(127)), 23));
  out = vmulq_f32(p, pow2);
  return true;
}

// The scalar code for n values (a group with a lane out of exp4's range, and the tail):
// kept out of line, so the vector loop's constants stay in registers.
[[gnu::noinline, gnu::cold]] void swiglu_scalar(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_order::swiglu_one(g[i], u[i]);
}
[[gnu::noinline, gnu::cold]] void silu_scalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = ggml_order::silu_one(x[i]);
}

}  // namespace

// The vector loop runs until a group needs the scalar code, which runs out of line
// (so the loop keeps exp4's constants in registers), then the loop resumes.
void swiglu_neon(const float* g, const float* u, int64_t n, float* out) {
  int64_t i = 0;
  while (i + 4 <= n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    for (; i + 4 <= n; i += 4) {
      const float32x4_t gv = vld1q_f32(g + i);
      float32x4_t e;
      if (!exp4(vnegq_f32(gv), e)) break;
      vst1q_f32(out + i, vmulq_f32(vdivq_f32(gv, vaddq_f32(one, e)), vld1q_f32(u + i)));
    }
    if (i + 4 <= n) {
      swiglu_scalar(g + i, u + i, 4, out + i);
      i += 4;
    }
  }
  swiglu_scalar(g + i, u + i, n - i, out + i);
}

void silu_row_neon(float* x, int64_t n) {
  int64_t i = 0;
  while (i + 4 <= n) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    for (; i + 4 <= n; i += 4) {
      const float32x4_t v = vld1q_f32(x + i);
      float32x4_t e;
      if (!exp4(vnegq_f32(v), e)) break;
      vst1q_f32(x + i, vdivq_f32(v, vaddq_f32(one, e)));
    }
    if (i + 4 <= n) {
      silu_scalar(x + i, 4);
      i += 4;
    }
  }
  silu_scalar(x + i, n - i);
}

}  // namespace hearth::cpu

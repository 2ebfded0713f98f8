// f16 <-> f32 rows with NEON's conversions (kernel_table.h's f16_to_f32 and f32_to_f16:
// the f16 KV cache), aarch64 only. FCVTL is exact (a signalling NaN comes back quiet with
// its payload, as core/half.h's conversion does); FCVTN rounds to nearest even with
// f16 subnormals and the overflow to infinity as the scalar code does (Linux runs with
// FPCR's default rounding, no flushing, no default NaN). A group of 8 holding a NaN is
// converted by the scalar code (its canonical quiet NaN), as x86's F16C build does.
#include <arm_neon.h>

#include "backends/cpu/kernels_neon.h"
#include "core/half.h"

namespace hearth::cpu {

void f16_to_f32_row_neon(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
    vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
    vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_row_neon(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t a = vld1q_f32(src + i), b = vld1q_f32(src + i + 4);
    if (vminvq_u32(vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b))) == 0) {  // a NaN
      f32_to_f16_row(src + i, dst + i, 8);
      continue;
    }
    vst1q_u16(dst + i, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(a), b)));
  }
  f32_to_f16_row(src + i, dst + i, n - i);
}

}  // namespace hearth::cpu

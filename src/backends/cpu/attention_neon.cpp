// The NEON build of the per-item attention kernel (kernel_table.h's attend_rows),
// aarch64 only: ggml_order::attend_one for head_dim a multiple of 64 with its reductions
// in registers, reading f32, f16 and q8_0 cache rows in its loads (f16: FCVTL; q8_0: the
// block's f16 scale times the widened int8 values, dequantize_row_q8_0's one rounding),
// so no row is converted into a scratch row first. Other head dims run attend_rows
// (attend_rows.h) as the plain build does. Every rounding is the reference one:
//   - scores: dot_order_a's 4 accumulators x 16 lanes, each as 4 float32x4 registers
//     (lanes 4q .. 4q + 3), FMLA per element as its std::fma; combined (0+2) + (1+3),
//     then sum16's tree (lanes i + i+8, + i+4, then (0+2) + (1+3)); no leftover elements
//     (head_dim % 64 == 0), so its double step is exact;
//   - softmax: the scalar code, with the double sum of 16-score sum16s;
//   - value sum: lane l (of 64 for a single query, else 16) adds keys l, l + n_lanes, ...
//     in order, FMLA per element as the reference's std::fma, lane by lane with the 64
//     accumulators of a 64-wide slice of the head in 16 registers;
//   - lane sums: sum16 done vertically, 4 output elements at a time.
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/attend_rows.h"
#include "backends/cpu/kernels_neon.h"

namespace hearth::cpu {
namespace {

struct V16 {
  float32x4_t v[4];
};

inline V16 load16(const float* p) { return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}}; }
// An f16 cache row, converted in the load (exact).
inline V16 load16(const uint16_t* p) {
  const uint16x8_t a = vld1q_u16(p), b = vld1q_u16(p + 8);
  const float16x8_t ha = vreinterpretq_f16_u16(a), hb = vreinterpretq_f16_u16(b);
  return {{vcvt_f32_f16(vget_low_f16(ha)), vcvt_high_f32_f16(ha), vcvt_f32_f16(vget_low_f16(hb)),
           vcvt_high_f32_f16(hb)}};
}
// 16 values of a q8_0 row from value p.i (a multiple of 16, so within one block):
// f32(d) * q, the one rounding of dequantize_row_q8_0.
inline V16 load16(Q8Ptr p) {
  const uint8_t* blk = p.row + (p.i / ops::kQ8Block) * ops::kQ8BlockBytes;
  uint16_t dh;
  std::memcpy(&dh, blk, sizeof dh);
  const float32x4_t d = vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(dh)));  // f32(d), exact
  const int8x16_t q = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 2 + p.i % ops::kQ8Block));
  const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
  const float32x4_t f0 = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), f1 = vcvtq_f32_s32(vmovl_high_s16(lo));
  const float32x4_t f2 = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), f3 = vcvtq_f32_s32(vmovl_high_s16(hi));
  return {{vmulq_f32(d, f0), vmulq_f32(d, f1), vmulq_f32(d, f2), vmulq_f32(d, f3)}};
}

// ggml_order::sum16 of the 16 lanes a[0..3] (lanes 4q .. 4q + 3 in a[q]).
inline float sum16(const float32x4_t a[4]) {
  const float32x4_t h4 = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
  return (vgetq_lane_f32(h4, 0) + vgetq_lane_f32(h4, 2)) + (vgetq_lane_f32(h4, 1) + vgetq_lane_f32(h4, 3));
}

template <class K, class V>
void attend_one_neon(const float* q, const K& krow, const V& vrow, int64_t n_keys, int64_t head_dim, float scale,
                     bool single_query, float* scores, float* acc, float* tmp, float* out) {
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    const auto kj = krow(j, tmp);
    float32x4_t c[4][4];
    for (int a = 0; a < 4; ++a) {
      for (int b = 0; b < 4; ++b) c[a][b] = vdupq_n_f32(0.0f);
    }
    for (int64_t i = 0; i < head_dim; i += 64) {
      for (int a = 0; a < 4; ++a) {
        const V16 k = load16(kj + i + 16 * a);
        for (int b = 0; b < 4; ++b) c[a][b] = vfmaq_f32(c[a][b], k.v[b], vld1q_f32(q + i + 16 * a + 4 * b));
      }
    }
    float32x4_t s[4];
    for (int b = 0; b < 4; ++b) s[b] = vaddq_f32(vaddq_f32(c[0][b], c[2][b]), vaddq_f32(c[1][b], c[3][b]));
    scores[j] = sum16(s) * scale;
    max_s = std::fmax(max_s, scores[j]);
  }
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  for (int64_t j = 0; j < n_keys; ++j) scores[j] = ggml_order::exp_approx(scores[j] - max_s);
  for (int64_t j = n_keys; j < n_pad; ++j) scores[j] = 0.0f;
  double total = 0.0;
  for (int64_t j = 0; j < n_pad; j += 16) total += sum16(load16(scores + j).v);
  const auto inv = static_cast<float>(1.0 / total);
  for (int64_t j = 0; j < n_keys; ++j) scores[j] *= inv;
  const int64_t n_lanes = single_query ? 64 : 16;
  for (int64_t d0 = 0; d0 < head_dim; d0 += 64) {
    for (int64_t l = 0; l < n_lanes; ++l) {
      float32x4_t r[16];
      for (int b = 0; b < 16; ++b) r[b] = vdupq_n_f32(0.0f);
      for (int64_t j = l; j < n_keys; j += n_lanes) {
        const auto vj = vrow(j, tmp) + d0;
        const float32x4_t p = vdupq_n_f32(scores[j]);
        for (int a = 0; a < 4; ++a) {
          const V16 v = load16(vj + 16 * a);
          for (int b = 0; b < 4; ++b) r[4 * a + b] = vfmaq_f32(r[4 * a + b], v.v[b], p);
        }
      }
      for (int b = 0; b < 16; ++b) vst1q_f32(acc + l * head_dim + d0 + 4 * b, r[b]);
    }
  }
  // out[d] = sum16 over the lanes (a single query's 64 lanes first folded to 16:
  // (l + l+32) + (l+16 + l+48)).
  for (int64_t d = 0; d < head_dim; d += 4) {
    float32x4_t lane[16];
    for (int l = 0; l < 16; ++l) {
      const float* a = acc + l * head_dim + d;
      lane[l] = single_query ? vaddq_f32(vaddq_f32(vld1q_f32(a), vld1q_f32(a + 32 * head_dim)),
                                         vaddq_f32(vld1q_f32(a + 16 * head_dim), vld1q_f32(a + 48 * head_dim)))
                             : vld1q_f32(a);
    }
    float32x4_t h8[8], h4[4];
    for (int i = 0; i < 8; ++i) h8[i] = vaddq_f32(lane[i], lane[i + 8]);
    for (int i = 0; i < 4; ++i) h4[i] = vaddq_f32(h8[i], h8[i + 4]);
    vst1q_f32(out + d, vaddq_f32(vaddq_f32(h4[0], h4[2]), vaddq_f32(h4[1], h4[3])));
  }
}

struct NeonAttend {
  template <class K, class V>
  void operator()(const float* q, const K& k, const V& v, int64_t n_keys, int64_t head_dim, float scale, bool single,
                  float* scores, float* acc, float* tmp, float* out) const {
    attend_one_neon(q, k, v, n_keys, head_dim, scale, single, scores, acc, tmp, out);
  }
};

}  // namespace

void attend_rows_neon(const AttendArgs& a, int64_t begin, int64_t end) {
  if (a.head_dim % 64 == 0) {
    attend_rows<CvtPlain, NeonAttend, true>(a, begin, end, NeonAttend{});
    return;
  }
  attend_rows<CvtPlain>(a, begin, end, GenericAttend{});
}

}  // namespace hearth::cpu

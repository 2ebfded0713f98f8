// The float-row products of matmul_f32.h with NEON, for aarch64 (compiled only there):
// tiles of 2 rows x 2 tokens, each output's 16 lanes in four float32x4 accumulators
// (lanes 0-3, 4-7, 8-11, 12-15), one fused multiply-add per lane and step of 16 as
// ref::dot16's std::fma, the last partial step zero-padded as it is, then sum16's tree
// (lanes i + i+8, then + i+4, then (0 + 2) + (1 + 3)). So every output equals
// ref::dot16 bit for bit, wherever it falls in a tile.
#include <arm_neon.h>

#include <algorithm>

#include "backends/cpu/matmul_f32.h"

namespace hearth::cpu {
namespace {

inline float sum16_neon(const float32x4_t acc[4]) {
  const float32x4_t h4 = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
  return (vgetq_lane_f32(h4, 0) + vgetq_lane_f32(h4, 2)) + (vgetq_lane_f32(h4, 1) + vgetq_lane_f32(h4, 3));
}

// One tile of R rows x T tokens (R, T <= 2): out[r * T + t].
template <int R, int T>
void tile(const float* const* w, const float* const* xt, int64_t n, float* out) {
  float32x4_t acc[R][T][4];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      for (int q = 0; q < 4; ++q) acc[r][t][q] = vdupq_n_f32(0.0f);
    }
  }
  const auto step = [&](const float* const* wp, const float* const* xp, int64_t i) {
    for (int q = 0; q < 4; ++q) {
      float32x4_t wv[R];
      for (int r = 0; r < R; ++r) wv[r] = vld1q_f32(wp[r] + i + 4 * q);
      for (int t = 0; t < T; ++t) {
        const float32x4_t xv = vld1q_f32(xp[t] + i + 4 * q);
        for (int r = 0; r < R; ++r) acc[r][t][q] = vfmaq_f32(acc[r][t][q], wv[r], xv);
      }
    }
  };
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) step(w, xt, i);
  if (n16 < n) {  // the last partial step, zero-padded like ref::dot16
    float wpad[R][16] = {}, xpad[T][16] = {};
    const float* wp[R];
    const float* xp[T];
    for (int r = 0; r < R; ++r) {
      std::copy(w[r] + n16, w[r] + n, wpad[r]);
      wp[r] = wpad[r];
    }
    for (int t = 0; t < T; ++t) {
      std::copy(xt[t] + n16, xt[t] + n, xpad[t]);
      xp[t] = xpad[t];
    }
    step(wp, xp, 0);
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) out[r * T + t] = sum16_neon(acc[r][t]);
  }
}

}  // namespace

void dot_rows_f32_neon(const float* const* rows, int64_t n_rows, const float* x, int64_t n_tokens, int64_t n,
                       float* y, int64_t y_stride) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += 2) {
    const int nt = static_cast<int>(std::min<int64_t>(2, n_tokens - t0));
    const float* xt[2] = {x + t0 * n, x + (t0 + nt - 1) * n};
    for (int64_t r0 = 0; r0 < n_rows; r0 += 2) {
      const int nr = static_cast<int>(std::min<int64_t>(2, n_rows - r0));
      float out[4];
      if (nr == 2 && nt == 2) {
        tile<2, 2>(rows + r0, xt, n, out);
      } else if (nr == 2) {
        tile<2, 1>(rows + r0, xt, n, out);
      } else if (nt == 2) {
        tile<1, 2>(rows + r0, xt, n, out);
      } else {
        tile<1, 1>(rows + r0, xt, n, out);
      }
      for (int k = 0; k < nr; ++k) {
        for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r0 + k] = out[k * nt + t];
      }
    }
  }
}

}  // namespace hearth::cpu

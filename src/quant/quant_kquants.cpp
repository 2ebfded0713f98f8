// Reference quantization to the K-quant super-blocks (256 elements):
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K, as ggml's quantize_row_*_ref.
// Algorithm: each sub-block (16 or 32 elements) gets a float scale (and min)
// chosen by a small search that minimises a weighted squared (Q2_K: absolute)
// error; the sub-block scales are then quantized to 4/6/8 bits against one
// f16 super-block scale, and the elements are re-quantized with the scales as
// actually stored. The searches:
//  - scale_min_search (ggml make_qkx2_quants): affine x ~ s*q - m, q in
//    [0, nmax], trying nstep+1 candidate inverse scales and a least-squares
//    fit of (s, m) for each (Q2_K, Q4_K, Q5_K);
//  - symmetric_search (make_qx_quants, rmse_type 1): x ~ s*q, q in
//    [-nmax, nmax), 19 candidate scales, weights x^2 (Q6_K);
//  - q3_search (make_q3_quants): as above, then up to 5 passes of
//    coordinate descent on single quants (Q3_K).
// Every float expression keeps ggml's operand order, so the bytes match.
#include "quant/fp_contract_off.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant_kernels.h"

namespace hearth::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all zero

int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Affine fit x ~ scale * L - the_min (the_min >= 0), L in [0, nmax]; returns scale.
// aux: scratch of n bytes.
float scale_min_search(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* aux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, aux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric fit x ~ scale * (L - nmax), weights x^2; L in [0, 2*nmax). Returns scale.
float symmetric_search(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric fit with coordinate-descent refinement (Q3_K); L as symmetric_search.
float q3_search(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Packs 2-bit quants: byte l of each 32-byte group holds elements l, l+32, l+64, l+96.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQKK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
    }
  }
}

// Packs 8 6-bit scales and mins into the 12 bytes of a Q4_K / Q5_K block.
void pack_k4_scales(const float* scales, const float* mins, float max_scale, float max_min, uint8_t* out) {
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < kQKK / 32; ++j) {
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      out[j] = ls;
      out[j + 4] = lm;
    } else {
      out[j + 4] = static_cast<uint8_t>((ls & 0xf) | ((lm & 0xf) << 4));
      out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      out[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
}

// Scales and mins of the 8 sub-blocks of 32 for Q4_K (nmax 15) / Q5_K (nmax 31),
// written into the block's d, dmin, scales; then L re-quantized against them.
template <typename Block>
void quant_k4_like(const float* x, Block& b, uint8_t* L, int nmax, float rmin, int nstep) {
  float weights[32], mins[kQKK / 32], scales[kQKK / 32];
  uint8_t aux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQKK / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = scale_min_search(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], aux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  pack_k4_scales(scales, mins, max_scale, max_min, b.scales);
  store_f16(b.d, max_scale / 63.f);
  store_f16(b.dmin, max_min / 63.f);
  for (int j = 0; j < kQKK / 32; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, b.scales, &sc, &m);
    const float d = load_f16(b.d) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = load_f16(b.dmin) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void quant_q2_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ2_K*>(dst);
  constexpr float q4scale = 15.f;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ2_K& b = blocks[i];
    uint8_t L[kQKK], aux[16];
    float weights[16], mins[kQKK / 16], scales[kQKK / 16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < kQKK / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = scale_min_search(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], aux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kQKK / 16; ++j) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      store_f16(b.d, max_scale / q4scale);
    } else {
      std::memset(b.scales, 0, sizeof b.scales);
      store_f16(b.d, 0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kQKK / 16; ++j) {
        b.scales[j] = static_cast<uint8_t>(b.scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      store_f16(b.dmin, max_min / q4scale);
    } else {
      store_f16(b.dmin, 0.f);
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = load_f16(b.d) * static_cast<float>(b.scales[j] & 0xf);
      if (d == 0.0f) continue;
      const float dm = load_f16(b.dmin) * static_cast<float>(b.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
      }
    }
    pack_2bit(L, b.qs);
  }
}

void quant_q3_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ3_K& b = blocks[i];
    int8_t L[kQKK];
    float scales[kQKK / 16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < kQKK / 16; ++j) {
      scales[j] = q3_search(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(b.scales, 0, sizeof b.scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < kQKK / 16; ++j) {
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(clamp_int(l, -32, 31) + 32);
        if (j < 8) {
          b.scales[j] = static_cast<uint8_t>(l & 0xf);
        } else {
          b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | ((l & 0xf) << 4));
        }
        l = static_cast<int8_t>(l >> 4);
        b.scales[j % 4 + 8] = static_cast<uint8_t>(b.scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      store_f16(b.d, 1 / iscale);
    } else {
      store_f16(b.d, 0.f);
    }
    int8_t sc[16];
    q3k_scales(b.scales, sc);
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = load_f16(b.d) * static_cast<float>(sc[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
      }
    }
    // High bit of element j goes to bit j/32 of hmask[j % 32].
    std::memset(b.hmask, 0, sizeof b.hmask);
    uint8_t low[kQKK];
    for (int j = 0; j < kQKK; ++j) {
      int v = L[j];
      if (v > 3) {
        b.hmask[j % 32] = static_cast<uint8_t>(b.hmask[j % 32] | (1 << (j / 32)));
        v -= 4;
      }
      low[j] = static_cast<uint8_t>(v);
    }
    pack_2bit(low, b.qs);
  }
}

void quant_q4_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ4_K& b = blocks[i];
    uint8_t L[kQKK];
    quant_k4_like(x, b, L, 15, -1.f, 20);
    for (int j = 0; j < kQKK; j += 64) {
      for (int l = 0; l < 32; ++l) b.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quant_q5_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ5_K& b = blocks[i];
    uint8_t L[kQKK];
    quant_k4_like(x, b, L, 31, -0.5f, 15);
    std::memset(b.qh, 0, sizeof b.qh);
    for (int n = 0, pair = 0; n < kQKK; n += 64, ++pair) {
      uint8_t* ql = b.qs + 32 * pair;
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        int l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          b.qh[j] = static_cast<uint8_t>(b.qh[j] | (1 << (2 * pair)));
        }
        if (l2 > 15) {
          l2 -= 16;
          b.qh[j] = static_cast<uint8_t>(b.qh[j] | (1 << (2 * pair + 1)));
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

void quant_q6_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ6_K& b = blocks[i];
    int8_t L[kQKK];
    float scales[kQKK / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kQKK / 16; ++ib) {
      scales[ib] = symmetric_search(16, 32, x + 16 * ib, L + 16 * ib);
      const float abs_scale = std::fabs(scales[ib]);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&b, 0, sizeof b);
      store_f16(b.d, 0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    store_f16(b.d, 1 / iscale);
    for (int ib = 0; ib < kQKK / 16; ++ib) {
      b.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      const float d = load_f16(b.d) * static_cast<float>(b.scales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
      }
    }
    for (int j = 0, half = 0; j < kQKK; j += 128, ++half) {
      uint8_t* ql = b.ql + 64 * half;
      uint8_t* qh = b.qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xf) | ((q3 & 0xf) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xf) | ((q4 & 0xf) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

void quant_q8_k(const float* x, uint8_t* dst, int64_t nb) {
  auto* blocks = reinterpret_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    BlockQ8_K& b = blocks[i];
    float max = 0, amax = 0;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      store_f32(b.d, 0.0f);
      std::memset(b.qs, 0, sizeof b.qs);
      std::memset(b.bsums, 0, sizeof b.bsums);  // ggml leaves them unwritten; zero is their value
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += b.qs[j * 16 + ii];
      const auto s = static_cast<uint16_t>(static_cast<int16_t>(sum));
      b.bsums[2 * j] = static_cast<uint8_t>(s & 0xff);
      b.bsums[2 * j + 1] = static_cast<uint8_t>(s >> 8);
    }
    store_f32(b.d, 1 / iscale);
  }
}

}  // namespace hearth::quant

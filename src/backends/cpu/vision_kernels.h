// The vision tower's vector kernels (cpu_vision.cpp), one template per vector policy V
// (VecPlain here: GCC vector extensions without fused multiply-adds, any CPU; the x86
// policies with fused multiply-adds in vision_x86.cpp): attention_full's tiled
// online-softmax work items (full_items) and GELU (gelu_rows). Each includer compiles
// them for its instruction set.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace hearth::cpu::vision {

constexpr int64_t kQueryRows = 32;  // query rows per work item
constexpr int64_t kKeyTile = 64;    // keys per step of the online softmax
constexpr int64_t kScoreLanes = 32;      // keys per block of scores (the rows' independent sums)

template <bool Fma>
inline float madd(float a, float b, float c) {
  if constexpr (Fma) {
    return std::fma(a, b, c);
  } else {
    return a * b + c;
  }
}

// e^x for x <= 0: round(x / ln 2) split off, ln 2 in two parts (the first exact times
// any n here), a degree-6 polynomial on |r| <= ln2 / 2 (relative error about 2e-7),
// the power of two built in the exponent bits. Below -87 it returns e^-87 (about 1.6e-38),
// which only ever multiplies sums that are then at least 1 (the row's max scores 1).
// Branch-free, so loops over it vectorise.
template <bool Fma>
inline float exp_nonpos(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float shift = 0x1.8p23f;
  const float n = (x * 1.44269504f + shift) - shift;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-6f;
  float p = 1.0f / 720.0f;
  p = madd<Fma>(p, r, 1.0f / 120.0f);
  p = madd<Fma>(p, r, 1.0f / 24.0f);
  p = madd<Fma>(p, r, 1.0f / 6.0f);
  p = madd<Fma>(p, r, 0.5f);
  p = madd<Fma>(p, r, 1.0f);
  p = madd<Fma>(p, r, 1.0f);
  const auto e = static_cast<int32_t>(n);
  return p * std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
}

// (Internal inline functions only: the ABI note GCC gives for 32-byte vector values on
// targets without AVX does not concern them.)
#pragma GCC diagnostic ignored "-Wpsabi"
// 8-float vector operations for the tiled kernel: GCC vector extensions (any target:
// SSE pairs, NEON, ...; separate multiply and add) or AVX2 with fused multiply-adds.
typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));
struct VecPlain {
  static constexpr bool kFma = false;
  // A policy with kWide has its own score and p v loops over wider vectors (scores(),
  // pv() in vision_x86.cpp: AVX-512). Lanes are keys (scores) or output dimensions
  // (p v), each summed in the same order as here, so the bits are the same.
  static constexpr bool kWide = false;
  static constexpr int kScoreRows = 2;  // query rows whose scores share each key vector load
  static constexpr int kPvRows = 1;     // query rows whose outputs share each value vector load
  static vf8 load(const float* p) {
    vf8 v;
    std::memcpy(&v, p, sizeof(vf8));
    return v;
  }
  static void store(float* p, vf8 v) { std::memcpy(p, &v, sizeof(vf8)); }
  static vf8 set1(float x) { return vf8{x, x, x, x, x, x, x, x}; }
  static vf8 fma(vf8 a, vf8 b, vf8 c) { return a * b + c; }
};

struct FullArgs {
  // The keys transposed in blocks of kScoreLanes rows of one segment: block b of head h
  // at (h * n_blocks + b) * head_dim * kScoreLanes, dim d of its row l at d * kScoreLanes + l
  // (rows past the segment's end zero).
  const float* kt;
  const float* q;
  const float* v;
  int64_t n_head, head_dim, n_blocks;
  float scale;
  float* out;
};

using FullItem = FullAttnItem;

// e^x on 8 lanes (x <= 0), exp_nonpos' arithmetic.
template <class V>
inline vf8 exp_nonpos8(vf8 x) {
  const vf8 lo = V::set1(-87.0f), shift = V::set1(0x1.8p23f);
  x = x < lo ? lo : x;
  const vf8 n = (x * V::set1(1.44269504f) + shift) - shift;
  const vf8 r = (x - n * V::set1(0.693145751953125f)) - n * V::set1(1.428606765330187e-6f);
  vf8 p = V::set1(1.0f / 720.0f);
  p = V::fma(p, r, V::set1(1.0f / 120.0f));
  p = V::fma(p, r, V::set1(1.0f / 24.0f));
  p = V::fma(p, r, V::set1(1.0f / 6.0f));
  p = V::fma(p, r, V::set1(0.5f));
  p = V::fma(p, r, V::set1(1.0f));
  p = V::fma(p, r, V::set1(1.0f));
  const vi8 e = __builtin_convertvector(n, vi8);
  return p * reinterpret_cast<vf8>((e + 127) << 23);  // 2^n in the exponent bits
}

// Scores of V::kScoreRows query rows q[r] against the kScoreLanes keys of one transposed
// block: kScoreRows x kScoreLanes / 8 independent vector sums, each key vector loaded once
// for all the rows.
template <int kD, class V>
inline void score_rows(const float* kb, const float* const* q, float* const* out) {
  constexpr int kS = kScoreLanes / 8, kR = V::kScoreRows;
  vf8 s[kR][kS];
  for (int r = 0; r < kR; ++r) {
    for (int l = 0; l < kS; ++l) s[r][l] = vf8{};
  }
  for (int64_t d = 0; d < kD; ++d) {
    vf8 qv[kR];
    for (int r = 0; r < kR; ++r) qv[r] = V::set1(q[r][d]);
    const float* kr = kb + d * kScoreLanes;
    for (int l = 0; l < kS; ++l) {
      const vf8 kv = V::load(kr + 8 * l);
      for (int r = 0; r < kR; ++r) s[r][l] = V::fma(qv[r], kv, s[r][l]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    for (int l = 0; l < kS; ++l) V::store(out[r] + 8 * l, s[r][l]);
  }
}

// Items [begin, end): for each, the query rows scaled, then the segment's keys kKeyTile at
// a time: scores (score_rows), the online-softmax update (each row's running max; its
// output and sum rescaled by e^(old max - new max)), and p v added to the output, which
// stays in registers while the tile's value rows stream past. kD: head_dim as a
// compile-time multiple of 8 (vector code), or 0: any head_dim, scalar code.
template <int kD, class V>
inline void full_items(const FullArgs& a, const FullItem* items, int64_t begin, int64_t end) {
  constexpr bool Fma = V::kFma;
  const int64_t D = kD > 0 ? kD : a.head_dim, stride = a.n_head * D;
  std::vector<float> buf(static_cast<size_t>(2 * kQueryRows * D + kQueryRows * kKeyTile + 3 * kQueryRows));
  float* qs = buf.data();                       // [kQueryRows, D]: scaled queries
  float* acc = qs + kQueryRows * D;             // [kQueryRows, D]: unnormalised outputs
  float* sc = acc + kQueryRows * D;             // [kQueryRows, kKeyTile]: a tile's scores
  float* row_max = sc + kQueryRows * kKeyTile;  // [kQueryRows]
  float* row_sum = row_max + kQueryRows;        // [kQueryRows]
  float* corr = row_sum + kQueryRows;           // [kQueryRows]: a tile's rescaling of each row
  for (int64_t it = begin; it < end; ++it) {
    const FullItem& w = items[it];
    const int64_t nq = w.n_q, h = w.head;
    for (int64_t i = 0; i < nq; ++i) {
      const float* qr = a.q + (w.row0 + i) * stride + h * D;
      for (int64_t d = 0; d < D; ++d) qs[i * D + d] = qr[d] * a.scale;
      row_max[i] = -INFINITY;
      row_sum[i] = 0.0f;
    }
    std::fill(acc, acc + nq * D, 0.0f);
    const float* kt_seg = a.kt + (h * a.n_blocks + w.kt_block0) * D * kScoreLanes;
    for (int64_t j0 = 0; j0 < w.seg_n; j0 += kKeyTile) {  // keys j0 .. of the segment
      const int64_t nk = std::min(kKeyTile, w.seg_n - j0);
      // Scores (a partial last block's extra keys are zero rows; their scores are unused).
      for (int64_t jb = 0; jb < nk; jb += kScoreLanes) {
        const float* kb = kt_seg + (j0 + jb) * D;  // block (j0 + jb) / kScoreLanes
        constexpr int kR = V::kScoreRows;
        if constexpr (kD > 0 && V::kWide) {
          V::template scores<kD>(kb, qs, nq, sc + jb, kKeyTile);
          continue;
        }
        for (int64_t i = 0; i < nq; i += kR) {
          if constexpr (kD > 0) {
            // A short last group repeats its last row (the same sums stored again).
            const float* qr[kR];
            float* outr[kR];
            for (int r = 0; r < kR; ++r) {
              const int64_t ir = std::min<int64_t>(i + r, nq - 1);
              qr[r] = qs + ir * kD;
              outr[r] = sc + ir * kKeyTile + jb;
            }
            score_rows<kD, V>(kb, qr, outr);
          } else {
            for (int64_t r = i; r < std::min<int64_t>(i + kR, nq); ++r) {
              float s[kScoreLanes] = {};
              for (int64_t d = 0; d < D; ++d) {
                const float qd = qs[r * D + d];
                for (int64_t l = 0; l < kScoreLanes; ++l) s[l] = madd<Fma>(qd, kb[d * kScoreLanes + l], s[l]);
              }
              std::memcpy(sc + r * kKeyTile + jb, s, sizeof(s));
            }
          }
        }
      }
      const float* v0 = a.v + (w.seg0 + j0) * stride + h * D;
      for (int64_t i = 0; i < nq; ++i) {
        float* si = sc + i * kKeyTile;
        // The tile's max and (after the exponentials) its sum in 8 lanes over the whole
        // vectors of real keys, the rest one by one (no scalar chain through every key).
        const int64_t nk_full = nk & ~int64_t{7};
        vf8 m8 = V::set1(row_max[i]);
        for (int64_t j = 0; j < nk_full; j += 8) {
          const vf8 sj = V::load(si + j);
          m8 = sj > m8 ? sj : m8;
        }
        float mx = row_max[i];
        for (int l = 0; l < 8; ++l) mx = m8[l] > mx ? m8[l] : mx;
        for (int64_t j = nk_full; j < nk; ++j) mx = si[j] > mx ? si[j] : mx;
        corr[i] = exp_nonpos<Fma>(row_max[i] - mx);
        const int64_t nk8 = (nk + 7) & ~int64_t{7};  // within the tile: the extra scores are finite
        const vf8 mv = V::set1(mx);
        vf8 s8{};
        int64_t j = 0;
        if constexpr (V::kWide) j = V::exp_tile(si, nk8, nk_full, mx, s8);  // 16 at a time
        for (; j < nk8; j += 8) {
          const vf8 e = exp_nonpos8<V>(V::load(si + j) - mv);
          V::store(si + j, e);
          if (j < nk_full) s8 += e;
        }
        row_max[i] = mx;
        float tile_sum = ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7]));
        for (int64_t j = nk_full; j < nk; ++j) tile_sum += si[j];
        row_sum[i] = madd<Fma>(row_sum[i], corr[i], tile_sum);
      }
      if constexpr (kD > 0 && V::kWide) {
        V::template pv<kD>(acc, corr, sc, kKeyTile, v0, stride, nk, nq);
      } else if constexpr (kD > 0) {
        // kP rows at a time, each value vector loaded once for all of them, where their
        // outputs fit in registers (a short last group repeats its last row: the same
        // values computed and stored again).
        constexpr int kO = kD / 8, kP = V::kPvRows == 2 && kO <= 12 ? 2 : 1;
        for (int64_t i = 0; i < nq; i += kP) {
          int64_t ir[kP];
          for (int r = 0; r < kP; ++r) ir[r] = std::min<int64_t>(i + r, nq - 1);
          vf8 o[kP][kO];
          for (int r = 0; r < kP; ++r) {
            const vf8 c = V::set1(corr[ir[r]]);
            for (int k = 0; k < kO; ++k) o[r][k] = V::load(acc + ir[r] * kD + 8 * k) * c;
          }
          for (int64_t j = 0; j < nk; ++j) {
            vf8 p[kP];
            for (int r = 0; r < kP; ++r) p[r] = V::set1(sc[ir[r] * kKeyTile + j]);
            const float* vj = v0 + j * stride;
            for (int k = 0; k < kO; ++k) {
              const vf8 vv = V::load(vj + 8 * k);
              for (int r = 0; r < kP; ++r) o[r][k] = V::fma(p[r], vv, o[r][k]);
            }
          }
          for (int r = 0; r < kP; ++r) {
            for (int k = 0; k < kO; ++k) V::store(acc + ir[r] * kD + 8 * k, o[r][k]);
          }
        }
      } else {
        for (int64_t i = 0; i < nq; ++i) {
          const float* si = sc + i * kKeyTile;
          float* oi = acc + i * D;
          for (int64_t d = 0; d < D; ++d) oi[d] *= corr[i];
          for (int64_t j = 0; j < nk; ++j) {
            const float* vj = v0 + j * stride;
            for (int64_t d = 0; d < D; ++d) oi[d] = madd<Fma>(si[j], vj[d], oi[d]);
          }
        }
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      const float inv = 1.0f / row_sum[i];
      float* orow = a.out + (w.row0 + i) * stride + h * D;
      for (int64_t d = 0; d < D; ++d) orow[d] = acc[i * D + d] * inv;
    }
  }
}

template <class V>
inline void full_items_any(const FullArgs& a, const FullItem* items, int64_t begin, int64_t end) {
  switch (a.head_dim) {
    case 16: return full_items<16, V>(a, items, begin, end);
    case 32: return full_items<32, V>(a, items, begin, end);
    case 64: return full_items<64, V>(a, items, begin, end);
    case 72: return full_items<72, V>(a, items, begin, end);
    case 80: return full_items<80, V>(a, items, begin, end);
    case 128: return full_items<128, V>(a, items, begin, end);
    default: return full_items<0, V>(a, items, begin, end);
  }
}

// GELU on 8 lanes, both forms as ref::gelu_one computes them, but branch-free:
// tanh form: 0.5 x (1 + tanh(u)) = x sigmoid(2u), the sigmoid from e^(-2|u|) (so the
// exponent is never positive); erf form: with a = |x| / sqrt(2), erfc(a) by Abramowitz
// and Stegun 7.1.26 (t = 1 / (1 + p a), a degree-5 polynomial in t times e^(-a^2);
// absolute error below 1.5e-7), then x - x erfc(a) / 2 for x >= 0 and x erfc(a) / 2
// below. Both within about 1e-7 |x| of the reference (tests/unit/backend_vision_test.cpp).
template <class V>
__attribute__((always_inline)) inline vf8 gelu8(vf8 x, bool tanh_approx) {
  const vf8 zero = V::set1(0.0f), one = V::set1(1.0f), half = V::set1(0.5f);
  if (tanh_approx) {
    const vf8 u = V::set1(0.7978845608028654f) * (x + V::set1(0.044715f) * x * x * x);
    const vf8 au = u < zero ? -u : u;
    const vf8 e = exp_nonpos8<V>(V::set1(-2.0f) * au);
    const vf8 s = (u < zero ? e : one) / (one + e);  // sigmoid(2u)
    return x * s;
  }
  const vf8 ax = x < zero ? -x : x;
  const vf8 a = ax * V::set1(0.7071067811865476f);
  const vf8 t = one / V::fma(V::set1(0.3275911f), a, one);
  vf8 p = V::set1(1.061405429f);
  p = V::fma(p, t, V::set1(-1.453152027f));
  p = V::fma(p, t, V::set1(1.421413741f));
  p = V::fma(p, t, V::set1(-0.284496736f));
  p = V::fma(p, t, V::set1(0.254829592f));
  const vf8 erfc = p * t * exp_nonpos8<V>(-(a * a));
  const vf8 h = half * x * erfc;
  return x < zero ? h : x - h;
}

// gelu8 over n values; the last (n % 8) through a padded vector, so every value takes
// the same arithmetic wherever it falls.
template <class V>
inline void gelu_rows(float* x, int64_t n, bool tanh_approx) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) V::store(x + i, gelu8<V>(V::load(x + i), tanh_approx));
  if (i < n) {
    float tail[8] = {};
    std::memcpy(tail, x + i, sizeof(float) * static_cast<size_t>(n - i));
    V::store(tail, gelu8<V>(V::load(tail), tanh_approx));
    std::memcpy(x + i, tail, sizeof(float) * static_cast<size_t>(n - i));
  }
}

}  // namespace hearth::cpu::vision

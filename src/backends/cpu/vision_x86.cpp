// The x86-64 builds of the vision tower's kernels (vision_kernels.h; kernel_table.h's
// gelu and full_items): the vector policy with AVX2's fused multiply-adds, and the same
// code with AVX-512's 32 registers. They agree with the plain build within the tests'
// tolerance (fused multiply-adds round once where it rounds twice), not bit for bit.
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"
#include "backends/cpu/vision_kernels.h"

namespace hearth::cpu {
namespace {

using namespace vision;

// The same with fused multiply-adds (the build keeps a * b + c unfused: -ffp-contract=off).
struct VecAvx2 : VecPlain {
  static constexpr bool kFma = true;
  HEARTH_SIMD static vf8 set1(float x) { return reinterpret_cast<vf8>(_mm256_set1_ps(x)); }
  HEARTH_SIMD static vf8 fma(vf8 a, vf8 b, vf8 c) {
    return reinterpret_cast<vf8>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
                                                 reinterpret_cast<__m256>(c)));
  }
};
// AVX-512: the same vector code (its 32 registers: four query rows' scores at once, two
// rows' outputs), except the two loops that carry the work, which run on 16 lanes:
// - scores: 8 query rows against a block of 32 keys, 16 sums of 16 keys, each key vector
//   loaded once for the 8 rows;
// - p v: 4 rows' outputs (2 past 96 dimensions) in registers while the tile's value rows
//   stream past, each value vector loaded once for them.
// Every lane sums over the head's dimensions (scores) or the keys (outputs) in the order
// of the 8-lane code, with the same fused multiply-adds: the bits of VecAvx2's.
struct VecAvx512 : VecAvx2 {
  static constexpr int kScoreRows = 4;
  static constexpr int kPvRows = 2;
  static constexpr bool kWide = true;

  // exp_nonpos8's arithmetic on 16 lanes (each lane's operations the same, in order).
  HEARTH_AVX512 static __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), x, lo);  // x < lo ? lo : x
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), shift), shift);
    const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f))),
                                   _mm512_mul_ps(n, _mm512_set1_ps(1.428606765330187e-6f)));
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    // (the masked forms: GCC 12's unmasked ones start from an undefined register and warn)
    const __m512i e =
        _mm512_maskz_slli_epi32(0xFFFF, _mm512_add_epi32(_mm512_maskz_cvttps_epi32(0xFFFF, n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  }

  // A row's tile of scores si[0 .. nk8) replaced by e^(s - mx), 16 at a time while whole
  // vectors of 16 remain; the real keys' (below nk_full) added into s8 in the 8-lane
  // code's order (lanes 0-7, then 8-15). Returns where the 8-lane code goes on.
  HEARTH_AVX512 static int64_t exp_tile(float* si, int64_t nk8, int64_t nk_full, float mx, vf8& s8) {
    const __m512 mv = _mm512_set1_ps(mx);
    __m256 acc = reinterpret_cast<__m256>(s8);
    int64_t j = 0;
    for (; j + 16 <= nk8; j += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(si + j), mv));
      _mm512_storeu_ps(si + j, e);
      const __m512d ed = _mm512_castps_pd(e);  // its halves by the masked extract, as above
      if (j < nk_full) acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, ed, 0)));
      if (j + 8 < nk_full) acc = _mm256_add_ps(acc, _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xF, ed, 1)));
    }
    s8 = reinterpret_cast<vf8>(acc);
    return j;
  }

  // Scores of the nq rows of qs ([nq, kD]) against one transposed block of kScoreLanes
  // keys, into out + row * out_stride (a short last group repeats its last row).
  template <int kD>
  HEARTH_AVX512 static void scores(const float* kb, const float* qs, int64_t nq, float* out, int64_t out_stride) {
    static_assert(kScoreLanes == 32, "two 16-lane vectors a row");
    constexpr int kR = 8;
    for (int64_t i = 0; i < nq; i += kR) {
      const float* q[kR];
      for (int r = 0; r < kR; ++r) q[r] = qs + std::min<int64_t>(i + r, nq - 1) * kD;
      __m512 s0[kR], s1[kR];
      for (int r = 0; r < kR; ++r) s0[r] = s1[r] = _mm512_setzero_ps();
      for (int d = 0; d < kD; ++d) {
        const __m512 k0 = _mm512_loadu_ps(kb + d * kScoreLanes), k1 = _mm512_loadu_ps(kb + d * kScoreLanes + 16);
        for (int r = 0; r < kR; ++r) {
          const __m512 qv = _mm512_set1_ps(q[r][d]);
          s0[r] = _mm512_fmadd_ps(qv, k0, s0[r]);
          s1[r] = _mm512_fmadd_ps(qv, k1, s1[r]);
        }
      }
      for (int r = 0; r < kR; ++r) {
        float* o = out + std::min<int64_t>(i + r, nq - 1) * out_stride;
        _mm512_storeu_ps(o, s0[r]);
        _mm512_storeu_ps(o + 16, s1[r]);
      }
    }
  }

  // acc[row] = acc[row] * corr[row] + sum over the tile's nk keys of p[row][j] v[j], for
  // the nq rows; p in sc (row stride sc_stride), value row j at v0 + j * stride.
  template <int kD>
  HEARTH_AVX512 static void pv(float* acc, const float* corr, const float* sc, int64_t sc_stride, const float* v0,
                               int64_t stride, int64_t nk, int64_t nq) {
    static_assert(kD % 8 == 0, "whole 8-lane vectors");
    constexpr int kZ = kD / 16;             // 16-lane vectors of a row
    constexpr bool kY = kD % 16 != 0;       // and an 8-lane one
    constexpr int kP = (kZ + kY) * 4 <= 24 ? 4 : 2;
    for (int64_t i = 0; i < nq; i += kP) {
      int64_t ir[kP];
      for (int r = 0; r < kP; ++r) ir[r] = std::min<int64_t>(i + r, nq - 1);
      __m512 oz[kP][kZ > 0 ? kZ : 1];
      __m256 oy[kP];
      for (int r = 0; r < kP; ++r) {
        const float* a = acc + ir[r] * kD;
        const __m512 cz = _mm512_set1_ps(corr[ir[r]]);
        for (int k = 0; k < kZ; ++k) oz[r][k] = _mm512_mul_ps(_mm512_loadu_ps(a + 16 * k), cz);
        if constexpr (kY) oy[r] = _mm256_mul_ps(_mm256_loadu_ps(a + 16 * kZ), _mm256_set1_ps(corr[ir[r]]));
      }
      for (int64_t j = 0; j < nk; ++j) {
        const float* vj = v0 + j * stride;
        __m512 vz[kZ > 0 ? kZ : 1];
        for (int k = 0; k < kZ; ++k) vz[k] = _mm512_loadu_ps(vj + 16 * k);
        __m256 vy{};
        if constexpr (kY) vy = _mm256_loadu_ps(vj + 16 * kZ);
        for (int r = 0; r < kP; ++r) {
          const float p = sc[ir[r] * sc_stride + j];
          const __m512 pz = _mm512_set1_ps(p);
          for (int k = 0; k < kZ; ++k) oz[r][k] = _mm512_fmadd_ps(pz, vz[k], oz[r][k]);
          if constexpr (kY) oy[r] = _mm256_fmadd_ps(_mm256_set1_ps(p), vy, oy[r]);
        }
      }
      for (int r = 0; r < kP; ++r) {
        float* a = acc + ir[r] * kD;
        for (int k = 0; k < kZ; ++k) _mm512_storeu_ps(a + 16 * k, oz[r][k]);
        if constexpr (kY) _mm256_storeu_ps(a + 16 * kZ, oy[r]);
      }
    }
  }
};

}  // namespace

HEARTH_SIMD __attribute__((flatten)) void full_items_avx2(const FullArgs& a, const FullAttnItem* items, int64_t begin,
                                                           int64_t end) {
  full_items_any<VecAvx2>(a, items, begin, end);
}
// The same code with AVX-512's 32 vector registers (the 256-bit operations encoded with
// EVEX): a head of 72 keeps its 9 output vectors and the 8 score sums without spilling.
HEARTH_AVX512 __attribute__((flatten)) void full_items_avx512(const FullArgs& a, const FullAttnItem* items,
                                                               int64_t begin, int64_t end) {
  full_items_any<VecAvx512>(a, items, begin, end);
}

HEARTH_SIMD __attribute__((flatten)) void gelu_avx2(float* x, int64_t n, bool tanh_approx) {
  gelu_rows<VecAvx2>(x, n, tanh_approx);
}

}  // namespace hearth::cpu

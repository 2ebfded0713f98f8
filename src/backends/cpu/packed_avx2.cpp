// AVX2 kernels for packed Q4_0 / Q4_1 / Q8_0 weights (packed.h), for CPUs without AVX-512
// VNNI: the 16-row groups of packed_vnni.cpp, each 64-byte register of a block's weights
// taken as two 256-bit halves (rows 0-7, rows 8-15: one row per 32-bit lane), one half
// after the other over the group's blocks (8 float accumulators per token and half). The
// lane sums of vpdpbusd come from vpmaddubsw + vpmaddwd (ones) added to the lane's start
// value; the float work (the kFloatMagic subtraction, ggml's fma, the reduction of the 8
// lanes) is packed_vnni.cpp's, so every output equals ref::packed_order_matmul bit for bit.
// Q8_0 is stored unsigned (q + 128), and 255 x 127 pairs would saturate vpmaddubsw's
// 16-bit sums, so its kernel takes the signed values back (u ^ 0x80) and multiplies |q| by
// the activations with q's sign (|pair| <= 2 x 128 x 127 = 32,512); its lane then starts
// from kFloatMagic itself: corr + sum (q + 128) x = kFloatMagic + sum q x, the same integer.
#include "backends/cpu/packed.h"
#include "backends/cpu/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define HEARTH_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace hearth::cpu::packed_avx2 {
namespace {

HEARTH_AVX2 inline __m256i bcst4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
HEARTH_AVX2 inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
HEARTH_AVX2 inline __m256 load_half8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Half H (rows 8H .. 8H + 7) of one group, tokens t0 .. t0 + T - 1 (T <= 1 or 2: 8
// accumulators per token); block b prefetches the lines of [pf + b * pf_step, + pf_step).
template <GgmlType kType, int T, int H>
HEARTH_AVX2 void half_tokens(const PackedWeight& w, int64_t g, const PackedAct& a, int64_t t0, float* y, int64_t ys,
                             const uint8_t* pf, int64_t pf_step) {
  constexpr bool kQ41 = kType == GgmlType::Q4_1;
  constexpr bool kQ8 = kType == GgmlType::Q8_0;
  constexpr int kScaleBytes = kQ41 ? 64 : 32;
  constexpr int64_t kActBlock = kQ41 ? 36 : 34;  // Q8_1 / Q8_0 block bytes
  constexpr int64_t kActQs = kQ41 ? 4 : 2;       // offset of the 32 int8 values
  const int64_t nb = w.nb;
  const uint8_t* base = w.group(g);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // the float whose bits are kFloatMagic
  __m256 acc[T][8], mins[T];
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < 8; ++j) acc[t][j] = _mm256_setzero_ps();
    mins[t] = _mm256_setzero_ps();
  }
  const uint8_t* xrow[T];
  for (int t = 0; t < T; ++t) xrow[t] = a.xq + (t0 + t) * a.row_bytes + kActQs;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + b * w.block_bytes;
    if (pf != nullptr) {  // this pass's share of the next group's lines, into L2 (packed_vnni.cpp)
      const uintptr_t lo = reinterpret_cast<uintptr_t>(pf + b * pf_step) & ~uintptr_t{63};
      const uintptr_t hi = reinterpret_cast<uintptr_t>(pf + (b + 1) * pf_step);
      for (uintptr_t line = lo; line < hi; line += 64) prefetch_l2(reinterpret_cast<const char*>(line));
    }
    const __m256 dw = load_half8(blk + 16 * H);
    __m256 mw = _mm256_setzero_ps();
    if constexpr (kQ41) mw = load_half8(blk + 32 + 16 * H);
    __m256 scale[T];
    for (int t = 0; t < T; ++t) {
      const int64_t ai = (t0 + t) * nb + b;
      scale[t] = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ai]));
      if constexpr (kQ41) mins[t] = _mm256_add_ps(mins[t], _mm256_mul_ps(mw, _mm256_set1_ps(a.s[ai])));
    }
    const uint8_t* qs = blk + kScaleBytes + 32 * H;
    for (int j = 0; j < 8; ++j) {
      // Weights 4j .. 4j + 3 of the half's rows: Q8_0 register j; Q4 register j % 4, low
      // nibbles for j < 4, high for j >= 4.
      __m256i wv;
      if constexpr (kQ8) {
        wv = _mm256_xor_si256(load32(qs + 64 * j), _mm256_set1_epi8(static_cast<char>(0x80)));  // q, signed
      } else {
        const __m256i raw = load32(qs + 64 * (j & 3));
        wv = _mm256_and_si256(j < 4 ? raw : _mm256_srli_epi16(raw, 4), low4);
      }
      for (int t = 0; t < T; ++t) {
        const uint8_t* xq = xrow[t] + b * kActBlock;
        const __m256i x = bcst4(xq + 4 * j);
        __m256i s;
        __m256i p0;
        if constexpr (kQ8) {
          s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(x, wv)), ones);
          p0 = _mm256_castps_si256(magic);
        } else {
          s = _mm256_madd_epi16(_mm256_maddubs_epi16(wv, x), ones);
          p0 = _mm256_set1_epi32(a.corr[8 * ((t0 + t) * nb + b) + j]);
        }
        const __m256 f = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(p0, s)), magic);
        acc[t][j] = _mm256_fmadd_ps(scale[t], f, acc[t][j]);
      }
    }
  }
  const int64_t row0 = g * kPackRows + 8 * H;
  const int64_t valid = std::min<int64_t>(8, w.n_rows - row0);
  if (valid <= 0) return;
  for (int t = 0; t < T; ++t) {
    const __m256* l = acc[t];
    __m256 out = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                               _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7])));
    if constexpr (kQ41) out = _mm256_add_ps(out, mins[t]);
    float* dst = y + (t0 + t) * ys + row0;
    if (valid == 8) {
      _mm256_storeu_ps(dst, out);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, out);
      std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

template <GgmlType kType>
HEARTH_AVX2 void packed_matmul(const PackedWeight& w, int64_t g0, int64_t g1, const PackedAct& a, int64_t n_tokens,
                               float* y, int64_t ys) {
  // As packed_vnni.cpp: the next group's lines are prefetched while this one is computed,
  // each pass over the group (a half and up to two tokens) taking its share.
  const int64_t n_pass = 2 * ((n_tokens + 1) / 2);
  const int64_t group_bytes = w.nb * w.block_bytes;
  const int64_t step = w.block_bytes / n_pass;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* next = w.group(g) + group_bytes;
    int64_t p = 0;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += 2) {
      const uint8_t* pf0 = next + (p++) * group_bytes / n_pass;
      const uint8_t* pf1 = next + (p++) * group_bytes / n_pass;
      if (t0 + 2 <= n_tokens) {
        half_tokens<kType, 2, 0>(w, g, a, t0, y, ys, pf0, step);
        half_tokens<kType, 2, 1>(w, g, a, t0, y, ys, pf1, step);
      } else {
        half_tokens<kType, 1, 0>(w, g, a, t0, y, ys, pf0, step);
        half_tokens<kType, 1, 1>(w, g, a, t0, y, ys, pf1, step);
      }
    }
  }
}

}  // namespace

PackedMatmulFn find_packed(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return packed_matmul<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return packed_matmul<GgmlType::Q4_1>;
    case GgmlType::Q8_0: return packed_matmul<GgmlType::Q8_0>;
    default: return nullptr;
  }
}

}  // namespace hearth::cpu::packed_avx2

#else

namespace hearth::cpu::packed_avx2 {
PackedMatmulFn find_packed(GgmlType) { return nullptr; }
}  // namespace hearth::cpu::packed_avx2

#endif

// AVX-512 VNNI kernels for packed weights (packed.h): per 16-row group and two tokens
// at a time, each 64-byte register of a block's weights (4 weights of every row) is
// unpacked once, vpdpbusd against the token's 4 activation bytes broadcast (started
// from the Q4_0 / Q8_0 offset correction) gives ggml's lane j for all 16 rows, and the
// 8 lanes' float accumulators are updated with ggml's fma; the lanes are reduced in
// ggml's order at the end. Same arithmetic, lane by lane, as ref::packed_order_matmul.
#include "backends/cpu/packed.h"
#include "backends/cpu/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define HEARTH_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

namespace hearth::cpu::vnni {
namespace {

HEARTH_VNNI inline __m512i bcst4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

HEARTH_VNNI inline __m512 load_half16(const uint8_t* p) {
  // Masked forms with a zero source: GCC 12's unmasked ones start from an undefined
  // register and warn -Wmaybe-uninitialized.
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// One group of 16 rows, tokens t0 .. t0 + T - 1 (T <= 2: 8 accumulators per token);
// block b prefetches the lines of [pf + b * pf_step, pf + (b + 1) * pf_step).
template <GgmlType kType, int T>
HEARTH_VNNI void group_tokens(const PackedWeight& w, int64_t g, const PackedAct& a, int64_t t0, float* y,
                              int64_t ys, const uint8_t* pf, int64_t pf_step) {
  constexpr bool kQ41 = kType == GgmlType::Q4_1;
  constexpr bool kQ8 = kType == GgmlType::Q8_0;
  constexpr int kScaleBytes = kQ41 ? 64 : 32;
  constexpr int64_t kActBlock = kQ41 ? 36 : 34;  // Q8_1 / Q8_0 block bytes
  constexpr int64_t kActQs = kQ41 ? 4 : 2;       // offset of the 32 int8 values
  const int64_t nb = w.nb;
  const uint8_t* base = w.group(g);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512 magic = _mm512_set1_ps(12582912.0f);  // the float whose bits are kFloatMagic
  __m512 acc[T][8], mins[T];
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < 8; ++j) acc[t][j] = _mm512_setzero_ps();
    mins[t] = _mm512_setzero_ps();
  }
  const uint8_t* xrow[T];
  for (int t = 0; t < T; ++t) xrow[t] = a.xq + (t0 + t) * a.row_bytes + kActQs;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + b * w.block_bytes;
    // The weights stream from memory once per group (later token pairs find them in
    // cache): this block's share of the lines at pf (packed_matmul), into L2 (into L1
    // before: 3-8 % longer one-sequence decode steps of the default model, 2 cores).
    {
      const uintptr_t lo = reinterpret_cast<uintptr_t>(pf + b * pf_step) & ~uintptr_t{63};
      const uintptr_t hi = reinterpret_cast<uintptr_t>(pf + (b + 1) * pf_step);
      for (uintptr_t line = lo; line < hi; line += 64) prefetch_l2(reinterpret_cast<const char*>(line));
    }
    const __m512 dw = load_half16(blk);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kQ41) mw = load_half16(blk + 32);
    __m512 scale[T];
    for (int t = 0; t < T; ++t) {
      const int64_t ai = (t0 + t) * nb + b;
      scale[t] = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ai]));
      if constexpr (kQ41) mins[t] = _mm512_add_ps(mins[t], _mm512_mul_ps(mw, _mm512_set1_ps(a.s[ai])));
    }
    const uint8_t* qs = blk + kScaleBytes;
    for (int j = 0; j < 8; ++j) {
      // Weights 4j .. 4j + 3 of every row: Q8_0 register j; Q4 register j % 4, low
      // nibbles for j < 4, high for j >= 4 (weights 16 + 4 (j - 4) ..).
      __m512i wv;
      if constexpr (kQ8) {
        wv = _mm512_loadu_si512(qs + 64 * j);
      } else {
        const __m512i raw = _mm512_loadu_si512(qs + 64 * (j & 3));
        wv = _mm512_and_si512(j < 4 ? raw : _mm512_srli_epi16(raw, 4), low4);
      }
      for (int t = 0; t < T; ++t) {
        const uint8_t* xq = xrow[t] + b * kActBlock;
        // The sum starts from the lane's start value broadcast from memory (a load, where
        // a zeroed register would cost a vector-port copy); it carries kFloatMagic, so the
        // sum's bits are the float 1.5 * 2^23 + sum and one subtraction (either vector
        // port) gives float(sum) exactly, where vcvtdq2ps would take the one port that
        // vpdpbusd needs too.
        const __m512i p0 = _mm512_set1_epi32(a.corr[8 * ((t0 + t) * nb + b) + j]);
        const __m512i p = _mm512_dpbusd_epi32(p0, wv, bcst4(xq + 4 * j));
        const __m512 f = _mm512_sub_ps(_mm512_castsi512_ps(p), magic);
        acc[t][j] = _mm512_fmadd_ps(scale[t], f, acc[t][j]);
      }
    }
  }
  const int64_t row0 = g * kPackRows;
  const int64_t valid = std::min<int64_t>(kPackRows, w.n_rows - row0);
  const __mmask16 mask = valid >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << valid) - 1);
  for (int t = 0; t < T; ++t) {
    const __m512* l = acc[t];
    __m512 out = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                               _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])));
    if constexpr (kQ41) out = _mm512_add_ps(out, mins[t]);
    _mm512_mask_storeu_ps(y + (t0 + t) * ys + row0, mask, out);
  }
}

template <GgmlType kType>
HEARTH_VNNI void packed_matmul(const PackedWeight& w, int64_t g0, int64_t g1, const PackedAct& a, int64_t n_tokens,
                               float* y, int64_t ys) {
  // Prefetching: the group after this one is fetched while this one is computed, each
  // pass over the group (two tokens) taking its share, so memory stays busy while later
  // passes run from cache. Measured on the 2-core machine with the default model (decode
  // steps, medians, interleaved): against 4 blocks ahead within the group, 10% shorter
  // steps for one sequence and 11% for four.
  const int64_t n_pass = (n_tokens + 1) / 2;
  const int64_t group_bytes = w.nb * w.block_bytes;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* next = w.group(g) + group_bytes;
    for (int64_t p = 0, t0 = 0; t0 < n_tokens; ++p, t0 += 2) {
      const uint8_t* pf = next + p * group_bytes / n_pass;
      const int64_t step = w.block_bytes / n_pass;
      if (t0 + 2 <= n_tokens) {
        group_tokens<kType, 2>(w, g, a, t0, y, ys, pf, step);
      } else {
        group_tokens<kType, 1>(w, g, a, t0, y, ys, pf, step);
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

}  // namespace hearth::cpu::vnni

#else

namespace hearth::cpu::vnni {
PackedMatmulFn find_packed(GgmlType) { return nullptr; }
}  // namespace hearth::cpu::vnni

#endif

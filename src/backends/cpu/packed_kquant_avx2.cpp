// AVX2 kernels for packed Q4_K / Q5_K / Q6_K weights (packed_kquant.h), for CPUs without
// AVX-512 VNNI: the same 16-row groups as packed_kquant_vnni.cpp, each 64-byte register of
// weights taken as two 256-bit halves (rows 0-7 and 8-15, one row per 32-bit lane). Per
// half and up to four tokens at a time, a register is unpacked once and meets every
// token's 4 activation bytes broadcast (vpmaddubsw: unsigned weights x signed bytes, pair
// sums in 16 bits). The 16-bit pair sums of several registers are added in 16 bits before
// vpmaddwd multiplies them by the rows' sub-block scales (duplicated into both halves of a
// row's lane): that gives sc * (integer sum of the sub-block's products) in 32 bits, the
// integer that the VNNI kernel gets with vpdpbusd and vpmulld. No 16-bit sum can overflow:
// |pair| <= 2 * 15 * 128 = 3,840 for Q4_K (8 registers: 30,720), 2 * 31 * 128 = 7,936 for
// Q5_K (4: 31,744), 2 * 63 * 128 = 16,128 for Q6_K (2: 32,256), all below 32,768 (Q8_K
// values lie in [-127, 127]). The mins / -32 terms and vec_dot's float expression per
// super-block are the VNNI kernel's, so every output equals kquant::ref_matmul (and
// vec_dot) bit for bit. Long prompts go in blocks of tokens (cpu.token_block).
#include "backends/cpu/packed_kquant.h"
#include "backends/cpu/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#define HEARTH_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace hearth::cpu::kquant {
namespace {

constexpr int64_t kQ8KBytes = 292;  // Q8_K block: f32 d | 256 int8 | 16 int16 bsums
constexpr int64_t kQ8KBsums = 260;

HEARTH_AVX2 inline __m256i bcst4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
HEARTH_AVX2 inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
HEARTH_AVX2 inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
HEARTH_AVX2 inline __m256 load_half8(const uint8_t* p) { return _mm256_cvtph_ps(load16(p)); }

template <int S>
HEARTH_AVX2 inline __m256i shift16(__m256i v) {
  if constexpr (S > 0) return _mm256_slli_epi16(v, S);
  else if constexpr (S < 0) return _mm256_srli_epi16(v, -S);
  else return v;
}

// Int16 pairs (even, odd) per 32-bit lane -> (even, even) / (odd, odd): a row's scale in
// both halves of its lane, for vpmaddwd against that lane's two 16-bit pair sums.
HEARTH_AVX2 inline __m256i dup_even(__m256i v) {
  return _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(v, 0xa0), 0xa0);
}
HEARTH_AVX2 inline __m256i dup_odd(__m256i v) {
  return _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(v, 0xf5), 0xf5);
}

// Registers per 16-bit chain (see the head of the file).
template <GgmlType kType>
constexpr int kChain = kType == GgmlType::Q4_K ? 8 : kType == GgmlType::Q5_K ? 4 : 2;

// Half H of register k (k in [K0, K1)) of quarter P against the tokens' activations, the
// low-nibble elements 64P + 4k .. (N = 0) or the high ones 64P + 32 + 4k .. (N = 1):
// s += sc * (their sums), in 32 bits, through 16-bit chains of kChain registers. One
// nibble at a time (a chain holds one register per token, four fewer than with both
// nibbles; one tile of four tokens on one thread, 64 tokens of 4,096 x 2,048 Q4_K
// weights: 4,976 -> 4,518 us, DISABLED_PackedSpeed). The integers are exact, so the order
// of the 32-bit additions does not matter.
template <GgmlType kType, int T, int H, int P, int K0, int K1, int N>
HEARTH_AVX2 inline void nibble_sums(const uint8_t* blk, const uint8_t* const* xq, __m256i sc, __m256i* s) {
  constexpr int L = kChain<kType>;
  static_assert((K1 - K0) % L == 0);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int k0 = K0; k0 < K1; k0 += L) {
    __m256i a[T];
    for (int t = 0; t < T; ++t) a[t] = _mm256_setzero_si256();
    for (int k = k0; k < k0 + L; ++k) {
      const __m256i raw = load32(blk + layout::kNib + (8 * P + k) * 64 + 32 * H);
      __m256i v = N == 0 ? _mm256_and_si256(raw, low4) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      if constexpr (kType == GgmlType::Q5_K) {
        // Bit 2P -> bit 4 for the low elements, bit 2P + 1 -> bit 4 for the high ones.
        const __m256i h = load32(blk + layout::kHigh + k * 64 + 32 * H), bit4 = _mm256_set1_epi8(0x10);
        v = _mm256_or_si256(v, _mm256_and_si256(shift16<4 - 2 * P - N>(h), bit4));
      } else if constexpr (kType == GgmlType::Q6_K) {
        // Bits 4 (P % 2) .. +1 -> bits 4..5 for the low elements, the next two for the high.
        const __m256i h = load32(blk + layout::kHigh + (8 * (P / 2) + k) * 64 + 32 * H);
        v = _mm256_or_si256(v, _mm256_and_si256(shift16<4 - 4 * (P % 2) - 2 * N>(h), _mm256_set1_epi8(0x30)));
      }
      for (int t = 0; t < T; ++t) {
        a[t] = _mm256_add_epi16(a[t], _mm256_maddubs_epi16(v, bcst4(xq[t] + 64 * P + 32 * N + 4 * k)));
        // Keeps the running sums in registers: without it GCC 12 re-associates the chain,
        // computes every product of the chain first and spills them (2 stack accesses per
        // vpmaddubsw).
        asm("" : "+x"(a[t]));
      }
    }
    for (int t = 0; t < T; ++t) s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(a[t], sc));
  }
}

// Both nibbles: s += sc0 * (low sums) + sc1 * (high sums).
template <GgmlType kType, int T, int H, int P, int K0, int K1>
HEARTH_AVX2 inline void quarter_sums(const uint8_t* blk, const uint8_t* const* xq, __m256i sc0, __m256i sc1,
                                     __m256i* s) {
  nibble_sums<kType, T, H, P, K0, K1, 0>(blk, xq, sc0, s);
  nibble_sums<kType, T, H, P, K0, K1, 1>(blk, xq, sc1, s);
}

// Q4_K / Q5_K quarter P (sub-blocks 2P, 2P + 1) of half H: sumi += sc[2P] s0 + sc[2P + 1] s1.
template <GgmlType kType, int T, int H, int P>
HEARTH_AVX2 inline void quarter_k4(const uint8_t* blk, const uint8_t* scales, const uint8_t* const* xq,
                                   __m256i* sumi) {
  const __m256i sc = _mm256_cvtepu8_epi16(load16(scales + 32 * P + 16 * H));
  quarter_sums<kType, T, H, P, 0, 8>(blk, xq, dup_even(sc), dup_odd(sc), sumi);
}

// Q6_K quarter P of half H (sub-blocks of 16: 4P, 4P + 1 low, 4P + 2, 4P + 3 high): the
// scaled sums of the unsigned values, and corr += sum of scale * bsum over those sub-blocks.
template <int T, int H, int P>
HEARTH_AVX2 inline void quarter_q6(const uint8_t* blk, const uint8_t* const* xq, const uint8_t* const* bsums,
                                   __m256i* sumi, __m256i* corr) {
  const __m256i sa = _mm256_cvtepi8_epi16(load16(blk + layout::kQ6Scales + 64 * P + 16 * H));       // 4P, 4P + 1
  const __m256i sb = _mm256_cvtepi8_epi16(load16(blk + layout::kQ6Scales + 64 * P + 32 + 16 * H));  // 4P + 2, 4P + 3
  quarter_sums<GgmlType::Q6_K, T, H, P, 0, 4>(blk, xq, dup_even(sa), dup_even(sb), sumi);
  quarter_sums<GgmlType::Q6_K, T, H, P, 4, 8>(blk, xq, dup_odd(sa), dup_odd(sb), sumi);
  for (int t = 0; t < T; ++t) {
    // bsums 4P, 4P + 1 and 4P + 2, 4P + 3 as int16 pairs, as the scales are paired.
    corr[t] = _mm256_add_epi32(corr[t], _mm256_madd_epi16(sa, bcst4(bsums[t] + 8 * P)));
    corr[t] = _mm256_add_epi32(corr[t], _mm256_madd_epi16(sb, bcst4(bsums[t] + 8 * P + 4)));
  }
}

// Half H of super-block blk against tokens t0 .. t0 + T - 1: acc[t] += vec_dot's
// expression for the half's 8 rows. Not inlined: inlined, GCC 12 shares the activation
// broadcasts of the two halves and keeps all of them on the stack (340 stores a
// super-block).
template <GgmlType kType, int T, int H>
__attribute__((noinline)) HEARTH_AVX2 void half_block(const uint8_t* blk, const PackedAct& a, int64_t t0, int64_t b,
                                   const uint8_t* const* xq, const uint8_t* const* bsums, __m256* acc) {
  constexpr bool kQ6 = kType == GgmlType::Q6_K;
  constexpr int kD = kQ6 ? layout::kQ6D : kType == GgmlType::Q5_K ? layout::kQ5D : layout::kQ4D;
  const int64_t nb = a.nb;
  __m256i sumi[T], aux[T];  // aux: the mins sum (Q4_K / Q5_K) or the Q6_K correction
  for (int t = 0; t < T; ++t) sumi[t] = aux[t] = _mm256_setzero_si256();
  if constexpr (kQ6) {
    quarter_q6<T, H, 0>(blk, xq, bsums, sumi, aux);
    quarter_q6<T, H, 1>(blk, xq, bsums, sumi, aux);
    quarter_q6<T, H, 2>(blk, xq, bsums, sumi, aux);
    quarter_q6<T, H, 3>(blk, xq, bsums, sumi, aux);
  } else {
    const uint8_t* scales = blk + kD + layout::kScales;
    quarter_k4<kType, T, H, 0>(blk, scales, xq, sumi);
    quarter_k4<kType, T, H, 1>(blk, scales, xq, sumi);
    quarter_k4<kType, T, H, 2>(blk, scales, xq, sumi);
    quarter_k4<kType, T, H, 3>(blk, scales, xq, sumi);
  }
  // vec_dot's expression, each product rounded (no fma, as in the VNNI kernel).
  const __m256 dw = load_half8(blk + kD + 16 * H);
  for (int t = 0; t < T; ++t) {
    const __m256 dx = _mm256_set1_ps(a.d[(t0 + t) * nb + b]);
    if constexpr (kQ6) {
      const __m256i v = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(aux[t], 5));
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(v)));
    } else {
      // summ = sum_j m[j] P(j): pairs of mins against the token's pairs of P.
      for (int i = 0; i < 4; ++i) {
        const __m256i m = _mm256_cvtepu8_epi16(load16(blk + kD + layout::kMins + 32 * i + 16 * H));
        aux[t] = _mm256_add_epi32(aux[t],
                                  _mm256_madd_epi16(m, _mm256_set1_epi32(a.corr[8 * ((t0 + t) * nb + b) + i])));
      }
      const __m256 dm = load_half8(blk + kD + layout::kDmin + 16 * H);
      const __m256 tw = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(sumi[t]));
      const __m256 tm = _mm256_mul_ps(_mm256_mul_ps(dm, dx), _mm256_cvtepi32_ps(aux[t]));
      acc[t] = _mm256_add_ps(acc[t], _mm256_sub_ps(tw, tm));
    }
  }
}

// Stores the 8 rows of one half (rows row0 .. row0 + 7, of which `valid` exist).
HEARTH_AVX2 inline void store_rows(float* dst, __m256 v, int64_t valid) {
  if (valid >= 8) {
    _mm256_storeu_ps(dst, v);
  } else if (valid > 0) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(float));
  }
}

// One group of 16 rows, tokens t0 .. t0 + T - 1 (T <= 4), both halves per super-block so
// that the weights' lines are read once.
// ahead: the prefetch distance (prefetch.h), 0 for none.
template <GgmlType kType, int T>
HEARTH_AVX2 void group_tokens(const PackedWeight& w, int64_t g, const PackedAct& a, int64_t t0, float* y,
                              int64_t ys, int64_t ahead) {
  const int64_t nb = w.nb;
  const uint8_t* base = w.group(g);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + b * w.block_bytes;
    // The weights' lines 32 KiB ahead, into L2 (prefetch.h; measured in packed_kquant_vnni.cpp).
    if (ahead > 0) {
      for (int64_t off = 0; off < w.block_bytes; off += 64) prefetch_l2(blk + ahead + off);
    }
    const uint8_t* xq[T];
    const uint8_t* bsums[T];
    for (int t = 0; t < T; ++t) {
      const uint8_t* xb = a.xq + (t0 + t) * a.row_bytes + b * kQ8KBytes;
      xq[t] = xb + 4;
      bsums[t] = xb + kQ8KBsums;
    }
    half_block<kType, T, 0>(blk, a, t0, b, xq, bsums, acc0);
    half_block<kType, T, 1>(blk, a, t0, b, xq, bsums, acc1);
  }
  const int64_t row0 = g * kPackRows;
  const int64_t valid = std::min<int64_t>(kPackRows, w.n_rows - row0);
  for (int t = 0; t < T; ++t) {
    float* dst = y + (t0 + t) * ys + row0;
    store_rows(dst, acc0[t], valid);
    store_rows(dst + 8, acc1[t], valid - 8);
  }
}

// Tokens [t0, t1) against group g: tiles of four, then the rest. Only the first tile
// prefetches the lines ahead (packed_kquant_vnni.cpp: the later tiles would ask again).
template <GgmlType kType>
HEARTH_AVX2 void group_range(const PackedWeight& w, int64_t g, const PackedAct& a, int64_t t0, int64_t t1,
                             int64_t ahead, float* y, int64_t ys) {
  for (; t0 + 4 <= t1; t0 += 4, ahead = 0) group_tokens<kType, 4>(w, g, a, t0, y, ys, ahead);
  switch (t1 - t0) {
    case 3: group_tokens<kType, 3>(w, g, a, t0, y, ys, ahead); break;
    case 2: group_tokens<kType, 2>(w, g, a, t0, y, ys, ahead); break;
    case 1: group_tokens<kType, 1>(w, g, a, t0, y, ys, ahead); break;
    default: break;
  }
}

// A long prompt in blocks of tokens, each block against every group of the range (its
// quantized rows stay in L2), as in packed_kquant_vnni.cpp; the tiles start at the same
// tokens either way, so the bits do not change.
template <GgmlType kType>
HEARTH_AVX2 void packed_matmul(const PackedWeight& w, int64_t g0, int64_t g1, const PackedAct& a, int64_t n_tokens,
                               float* y, int64_t ys) {
  const int64_t tb = tuned_token_block(tune::kCpuTokenBlock);
  const int64_t ahead = prefetch_distance(w.block_bytes);
  if (tb == 0 || n_tokens <= tb || g1 - g0 < 2) {
    for (int64_t g = g0; g < g1; ++g) group_range<kType>(w, g, a, 0, n_tokens, ahead, y, ys);
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += tb) {
    const int64_t t1 = std::min(n_tokens, t0 + tb);
    for (int64_t g = g0; g < g1; ++g) group_range<kType>(w, g, a, t0, t1, ahead, y, ys);
  }
}

}  // namespace

PackedMatmulFn find_avx2(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K: return packed_matmul<GgmlType::Q4_K>;
    case GgmlType::Q5_K: return packed_matmul<GgmlType::Q5_K>;
    case GgmlType::Q6_K: return packed_matmul<GgmlType::Q6_K>;
    default: return nullptr;
  }
}

}  // namespace hearth::cpu::kquant

#else

namespace hearth::cpu::kquant {
PackedMatmulFn find_avx2(GgmlType) { return nullptr; }
}  // namespace hearth::cpu::kquant

#endif

// AVX-512 VNNI kernels for packed Q4_K / Q5_K / Q6_K weights (packed_kquant.h): per
// 16-row group and up to eight tokens at a time (cpu.tile8=0: four), each 64-byte register of weights is
// unpacked once and meets every token's 4 activation bytes broadcast (vpdpbusd), giving
// a sub-block's integer sum for all 16 rows; the sums are multiplied by the rows'
// sub-block scales (vpmulld), the mins / -32 terms come from vpdpwssd of the rows'
// int16 mins / scales against broadcast activation sums, and vec_dot's float
// expression per super-block then runs lane-wise. Same arithmetic as kquant::ref_matmul. Long prompts go in
// blocks of tokens (cpu.token_block, default 128; packed_matmul).
#include "backends/cpu/packed_kquant.h"
#include "backends/cpu/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#define HEARTH_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

namespace hearth::cpu::kquant {
namespace {

constexpr int64_t kQ8KBytes = 292;  // Q8_K block: f32 d | 256 int8 | 16 int16 bsums
constexpr int64_t kQ8KBsums = 260;

HEARTH_VNNI inline __m512i bcst4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
HEARTH_VNNI inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }
HEARTH_VNNI inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// Masked forms with a zero source: GCC 12's unmasked ones start from an undefined
// register and warn -Wmaybe-uninitialized.
HEARTH_VNNI inline __m512 load_half16(const uint8_t* p) { return _mm512_maskz_cvtph_ps(0xffff, load32(p)); }
HEARTH_VNNI inline __m512 to_float(__m512i v) { return _mm512_maskz_cvtepi32_ps(0xffff, v); }

// v shifted left by S bits (right for S < 0) in 16-bit lanes; the callers keep only bits
// that stay within their byte.
template <int S>
HEARTH_VNNI inline __m512i shift16(__m512i v) {
  if constexpr (S > 0) return _mm512_slli_epi16(v, S);
  else if constexpr (S < 0) return _mm512_srli_epi16(v, -S);
  else return v;
}

// lo | (hi & mask) in one vpternlogd.
HEARTH_VNNI inline __m512i or_masked(__m512i lo, __m512i hi, __m512i mask) {
  return _mm512_ternarylogic_epi32(lo, hi, mask, 0xf8);
}

// The int16 pairs of a scales chunk widened per 32-bit lane: the even / odd value, by
// vpmaddwd against (1, 0) / (0, 1) (one instruction, where shifts take two).
HEARTH_VNNI inline __m512i even16(__m512i v) { return _mm512_madd_epi16(v, _mm512_set1_epi32(0x00000001)); }
HEARTH_VNNI inline __m512i odd16(__m512i v) { return _mm512_madd_epi16(v, _mm512_set1_epi32(0x00010000)); }

// Sums of register k (k in [K0, K1)) of quarter P, against tokens' activations xq[t]:
// s0 gets the low-nibble elements 64P + 4k .., s1 the high ones 64P + 32 + 4k ..; for
// T <= 2 each goes into two chains (k even / odd) so that vpdpbusd's latency hides.
template <GgmlType kType, int T, int P, int K0, int K1>
HEARTH_VNNI inline void quarter_sums(const uint8_t* blk, const uint8_t* const* xq, __m512i* s0, __m512i* s1) {
  constexpr int C = T <= 2 ? 2 : 1;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512i a0[T][C], a1[T][C];
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) a0[t][c] = a1[t][c] = _mm512_setzero_si512();
  }
  for (int k = K0; k < K1; ++k) {
    const __m512i raw = load64(blk + layout::kNib + (8 * P + k) * 64);
    __m512i lo = _mm512_and_si512(raw, low4);
    // Q4_K (quarter_q4f): the high nibbles where they are, 16 times their value, so s1
    // comes out as 16 s1 (|16 s1| <= 983,040: exact in the int32 lanes and as a float);
    // one AND instead of a shift (port 0, beside every vpdpbusd) and an AND.
    __m512i hi = kType == GgmlType::Q4_K ? _mm512_and_si512(raw, _mm512_set1_epi8(static_cast<char>(0xf0)))
                                         : _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
    if constexpr (kType == GgmlType::Q5_K) {
      // Bit 2P -> bit 4 for the low elements, bit 2P + 1 -> bit 4 for the high ones.
      const __m512i h = load64(blk + layout::kHigh + k * 64), bit4 = _mm512_set1_epi8(0x10);
      lo = or_masked(lo, shift16<4 - 2 * P>(h), bit4);
      hi = or_masked(hi, shift16<3 - 2 * P>(h), bit4);
    } else if constexpr (kType == GgmlType::Q6_K) {
      // Bits 4 (P % 2) .. +1 -> bits 4..5 for the low elements, the next two for the high.
      const __m512i h = load64(blk + layout::kHigh + (8 * (P / 2) + k) * 64), bits45 = _mm512_set1_epi8(0x30);
      lo = or_masked(lo, shift16<4 - 4 * (P % 2)>(h), bits45);
      hi = or_masked(hi, shift16<2 - 4 * (P % 2)>(h), bits45);
    }
    for (int t = 0; t < T; ++t) {
      a0[t][k % C] = _mm512_dpbusd_epi32(a0[t][k % C], lo, bcst4(xq[t] + 64 * P + 4 * k));
      a1[t][k % C] = _mm512_dpbusd_epi32(a1[t][k % C], hi, bcst4(xq[t] + 64 * P + 32 + 4 * k));
    }
  }
  for (int t = 0; t < T; ++t) {
    s0[t] = a0[t][0];
    s1[t] = a1[t][0];
    if constexpr (C == 2) {
      s0[t] = _mm512_add_epi32(s0[t], a0[t][1]);
      s1[t] = _mm512_add_epi32(s1[t], a1[t][1]);
    }
  }
}

// Q4_K / Q5_K quarter P (sub-blocks 2P, 2P + 1): sumi += sc[2P] s0 + sc[2P + 1] s1.
template <GgmlType kType, int T, int P>
HEARTH_VNNI inline void quarter_k4(const uint8_t* blk, const uint8_t* scales, const uint8_t* const* xq,
                                   __m512i* sumi) {
  __m512i s0[T], s1[T];
  quarter_sums<kType, T, P, 0, 8>(blk, xq, s0, s1);
  const __m512i sc = _mm512_cvtepu8_epi16(load32(scales + 32 * P));
  const __m512i sc0 = even16(sc), sc1 = odd16(sc);
  for (int t = 0; t < T; ++t) {
    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(s0[t], sc0), _mm512_mullo_epi32(s1[t], sc1)));
  }
}

// Q4_K quarter P in floats: f += sc[2P] s0 + sc[2P + 1] s1 by fma. Exact: |s| <= 32 x 15 x
// 128 = 61,440 and sc <= 63, so a product is at most 3,870,720 and a sum of four (two
// quarters) at most 15,482,880 < 2^24, integers a float holds exactly, in any order; so
// fa + fb (quarters 0-1, 2-3) is float(sumi) rounded once, as to_float(sumi) rounds it.
// One conversion (and an fma, on either FMA port) per sum instead of vpmulld's two uops
// on port 0, the port every vpdpbusd needs. (Q5_K's sums are twice as large: not there.)
template <int T, int P>
HEARTH_VNNI inline void quarter_q4f(const uint8_t* blk, const uint8_t* scales, const uint8_t* const* xq, __m512* f) {
  __m512i s0[T], s1[T];
  quarter_sums<GgmlType::Q4_K, T, P, 0, 8>(blk, xq, s0, s1);
  const __m512i sc = _mm512_cvtepu8_epi16(load32(scales + 32 * P));
  // s1 is 16 times the high elements' sum (quarter_sums): sc1 / 16, exact, makes each
  // product the same integer.
  const __m512 sc0 = to_float(even16(sc)), sc1 = _mm512_mul_ps(to_float(odd16(sc)), _mm512_set1_ps(0.0625f));
  for (int t = 0; t < T; ++t) f[t] = _mm512_fmadd_ps(to_float(s1[t]), sc1, _mm512_fmadd_ps(to_float(s0[t]), sc0, f[t]));
}

// Q6_K quarter P (sub-blocks of 16: 4P, 4P + 1 low, 4P + 2, 4P + 3 high): the scaled
// sums of the unsigned values, and corr += sum of scale * bsum over those sub-blocks.
template <int T, int P>
HEARTH_VNNI inline void quarter_q6(const uint8_t* blk, const uint8_t* const* xq, const uint8_t* const* bsums,
                                   __m512i* sumi, __m512i* corr) {
  const __m512i sa = _mm512_cvtepi8_epi16(load32(blk + layout::kQ6Scales + 64 * P));       // 4P, 4P + 1
  const __m512i sb = _mm512_cvtepi8_epi16(load32(blk + layout::kQ6Scales + 64 * P + 32));  // 4P + 2, 4P + 3
  __m512i s0[T], s1[T];
  quarter_sums<GgmlType::Q6_K, T, P, 0, 4>(blk, xq, s0, s1);
  {
    const __m512i c0 = even16(sa), c1 = even16(sb);
    for (int t = 0; t < T; ++t) {
      sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(s0[t], c0), _mm512_mullo_epi32(s1[t], c1)));
    }
  }
  quarter_sums<GgmlType::Q6_K, T, P, 4, 8>(blk, xq, s0, s1);
  const __m512i c0 = odd16(sa), c1 = odd16(sb);
  for (int t = 0; t < T; ++t) {
    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(s0[t], c0), _mm512_mullo_epi32(s1[t], c1)));
    // bsums 4P, 4P + 1 and 4P + 2, 4P + 3 as int16 pairs, as the scales are paired.
    corr[t] = _mm512_dpwssd_epi32(corr[t], sa, bcst4(bsums[t] + 8 * P));
    corr[t] = _mm512_dpwssd_epi32(corr[t], sb, bcst4(bsums[t] + 8 * P + 4));
  }
}

// One group of 16 rows, tokens t0 .. t0 + T - 1 (T = 8 for prompts: each unpacked weight
// register meets eight tokens; measured 2-3 % faster prefill than 4 at 2 threads).
// ahead: the prefetch distance (prefetch.h), 0 for none.
template <GgmlType kType, int T>
HEARTH_VNNI void group_tokens(const PackedWeight& w, int64_t g, const PackedAct& a, int64_t t0, float* y,
                              int64_t ys, int64_t ahead) {
  constexpr bool kQ6 = kType == GgmlType::Q6_K;
  constexpr int kD = kQ6 ? layout::kQ6D : kType == GgmlType::Q5_K ? layout::kQ5D : layout::kQ4D;
  const int64_t nb = w.nb;
  const uint8_t* base = w.group(g);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + b * w.block_bytes;
    // The weights' lines 32 KiB ahead, into L2 (prefetch.h). Measured on the 2-core
    // machine, one thread, weights from memory (Packed.DISABLED_PackedSpeed, 32768 x 2048),
    // Q4_K / Q6_K GB/s for 1 and 4 tokens: one super-block ahead into L1 (before) 34 / 26
    // and 16 / 9; none 30-42 / 13 and 13 / 10; 16 KiB ahead into L2 46-48 / 34-39 and 22 / 19-23;
    // 32 KiB: the same there, 2-8 % shorter Qwen3.5-9B decode steps than 16 (BENCHMARKS).
    if (ahead > 0) {
      for (int64_t off = 0; off < w.block_bytes; off += 64) prefetch_l2(blk + ahead + off);
    }
    const uint8_t* xq[T];
    const uint8_t* bsums[T];
    __m512i sumi[T], aux[T];  // aux: the mins sum (Q4_K / Q5_K) or the Q6_K correction
    __m512 sumf[T];           // Q4_K / Q5_K: float(sumi)
    for (int t = 0; t < T; ++t) {
      const uint8_t* xb = a.xq + (t0 + t) * a.row_bytes + b * kQ8KBytes;
      xq[t] = xb + 4;
      bsums[t] = xb + kQ8KBsums;
      sumi[t] = aux[t] = _mm512_setzero_si512();
    }
    if constexpr (kQ6) {
      quarter_q6<T, 0>(blk, xq, bsums, sumi, aux);
      quarter_q6<T, 1>(blk, xq, bsums, sumi, aux);
      quarter_q6<T, 2>(blk, xq, bsums, sumi, aux);
      quarter_q6<T, 3>(blk, xq, bsums, sumi, aux);
    } else if constexpr (kType == GgmlType::Q4_K) {
      const uint8_t* scales = blk + kD + layout::kScales;
      __m512 fa[T], fb[T];
      for (int t = 0; t < T; ++t) fa[t] = fb[t] = _mm512_setzero_ps();
      quarter_q4f<T, 0>(blk, scales, xq, fa);
      quarter_q4f<T, 1>(blk, scales, xq, fa);
      quarter_q4f<T, 2>(blk, scales, xq, fb);
      quarter_q4f<T, 3>(blk, scales, xq, fb);
      for (int t = 0; t < T; ++t) sumf[t] = _mm512_add_ps(fa[t], fb[t]);
    } else {
      const uint8_t* scales = blk + kD + layout::kScales;
      quarter_k4<kType, T, 0>(blk, scales, xq, sumi);
      quarter_k4<kType, T, 1>(blk, scales, xq, sumi);
      quarter_k4<kType, T, 2>(blk, scales, xq, sumi);
      quarter_k4<kType, T, 3>(blk, scales, xq, sumi);
      for (int t = 0; t < T; ++t) sumf[t] = to_float(sumi[t]);
    }
    // vec_dot's expression, each product rounded (the build does not contract).
    const __m512 dw = load_half16(blk + kD);
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(a.d[(t0 + t) * nb + b]);
      if constexpr (!kQ6) {
        // summ = sum_j m[j] P(j): pairs of mins against the token's pairs of P (here, token
        // by token, so that no register holds it across the quarters).
        for (int i = 0; i < 4; ++i) {
          const __m512i m = _mm512_cvtepu8_epi16(load32(blk + kD + layout::kMins + 32 * i));
          aux[t] = _mm512_dpwssd_epi32(aux[t], m, _mm512_set1_epi32(a.corr[8 * ((t0 + t) * nb + b) + i]));
        }
      }
      if constexpr (kQ6) {
        const __m512i v = _mm512_sub_epi32(sumi[t], _mm512_maskz_slli_epi32(0xffff, aux[t], 5));
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(dw, dx), to_float(v)));
      } else {
        const __m512 dm = load_half16(blk + kD + layout::kDmin);
        const __m512 tw = _mm512_mul_ps(_mm512_mul_ps(dw, dx), sumf[t]);
        const __m512 tm = _mm512_mul_ps(_mm512_mul_ps(dm, dx), to_float(aux[t]));
        acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(tw, tm));
      }
    }
  }
  const int64_t row0 = g * kPackRows;
  const int64_t valid = std::min<int64_t>(kPackRows, w.n_rows - row0);
  const __mmask16 mask = valid >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << valid) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * ys + row0, mask, acc[t]);
}

// Tokens [t0, t1) against group g: tiles of eight (four), then the rest. Only the first
// tile prefetches the lines ahead (the next group's): the later tiles of the same group
// would ask for the same lines again, 37-53 prefetches a super-block that are already in
// L2 (measured on 64 tokens, one thread: Q4_K 2,373 -> 2,323 us, Q6_K 3,168 -> 3,010 us,
// DISABLED_PackedSpeed).
template <GgmlType kType>
HEARTH_VNNI void group_range(const PackedWeight& w, int64_t g, const PackedAct& a, int64_t t0, int64_t t1, bool wide,
                             int64_t ahead, float* y, int64_t ys) {
  if (wide) {
    for (; t0 + 8 <= t1; t0 += 8, ahead = 0) group_tokens<kType, 8>(w, g, a, t0, y, ys, ahead);
  }
  for (; t0 + 4 <= t1; t0 += 4, ahead = 0) group_tokens<kType, 4>(w, g, a, t0, y, ys, ahead);
  switch (t1 - t0) {
    case 3: group_tokens<kType, 3>(w, g, a, t0, y, ys, ahead); break;
    case 2: group_tokens<kType, 2>(w, g, a, t0, y, ys, ahead); break;
    case 1: group_tokens<kType, 1>(w, g, a, t0, y, ys, ahead); break;
    default: break;
  }
}

// Tokens per block of a long prompt (cpu.token_block, a multiple of 8; 0: none).
int64_t token_block() { return tuned_token_block(tune::kCpuTokenBlock); }

// A long prompt is taken in blocks of tokens, each block against every group of the
// range before the next: the block's quantized rows (128 tokens of a 6,144-column row:
// 0.8 MB) stay in the core's L2 across the groups instead of the whole prompt (3.6 MB)
// streaming through it once per group. The tiles start at the same tokens either way (a
// block is a multiple of eight), so every output keeps its bits.
template <GgmlType kType>
HEARTH_VNNI void packed_matmul(const PackedWeight& w, int64_t g0, int64_t g1, const PackedAct& a, int64_t n_tokens,
                               float* y, int64_t ys) {
  const bool wide = tune::on(tune::kCpuTile8);
  const int64_t ahead = prefetch_distance(w.block_bytes);
  const int64_t tb = token_block();
  if (tb == 0 || n_tokens <= tb || g1 - g0 < 2) {
    for (int64_t g = g0; g < g1; ++g) group_range<kType>(w, g, a, 0, n_tokens, wide, ahead, y, ys);
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += tb) {
    const int64_t t1 = std::min(n_tokens, t0 + tb);
    for (int64_t g = g0; g < g1; ++g) group_range<kType>(w, g, a, t0, t1, wide, ahead, y, ys);
  }
}

}  // namespace

PackedMatmulFn find_vnni(GgmlType type) {
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
PackedMatmulFn find_vnni(GgmlType) { return nullptr; }
}  // namespace hearth::cpu::kquant

#endif

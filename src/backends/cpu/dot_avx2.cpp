// AVX2 + FMA quantized dot products. Compiled for every x86-64 build through
// per-function target attributes and used only when CPUID and the OS report
// AVX2 and FMA (find_dot_kernel), so one binary runs on older CPUs too.
// Algorithm: unpack weight nibbles/6-bit values to bytes, multiply with the int8
// activations by maddubs (unsigned x signed -> int16 pairs), widen with madd
// (which also applies the per-sub-block scale for K-quants), and scale each
// block's integer sum in float. The K-quant kernels (Q4_K, Q5_K, Q6_K) scale each
// super-block with the reference's float expression and equal dot_ref.cpp bit for bit;
// the legacy ones (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) keep ggml's AVX2 order (8 float lanes
// accumulated by FMA, one horizontal sum) and equal dot_ref.cpp up to float rounding.
#include "backends/cpu/quant_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <array>
#include <cstring>

#include "quant/blocks.h"

#define HEARTH_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace hearth::cpu::avx2 {
namespace {

using namespace hearth::quant;

// f16 -> f32 in one instruction (F16C); the same value as the portable load_f16.
HEARTH_AVX2 inline float f16(const Half& h) { return _cvtsh_ss(load_f16_bits(h)); }

// Returns v as computed, rounded to float: the compiler may not fuse the multiply that
// produced it with a later add into one FMA (GCC contracts a * b + c by default in C++
// inside FMA-enabled functions). The K-quant kernels scale each super-block in float
// with the reference's expression; these barriers keep every rounding of it, so the
// results equal dot_ref.cpp (built without FMA) bit for bit.
HEARTH_AVX2 inline float rounded(float v) {
  __asm__("" : "+x"(v));
  return v;
}

HEARTH_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

HEARTH_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles first, then high nibbles.
HEARTH_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Sum of unsigned u8 x signed i8 products as 8 int32 lanes.
HEARTH_AVX2 inline __m256i dot_u8_i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Sum of signed i8 x signed i8 products as 8 int32 lanes (sign moved onto the second operand).
HEARTH_AVX2 inline __m256i dot_i8_i8(__m256i a, __m256i b) {
  return dot_u8_i8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

HEARTH_AVX2 inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

HEARTH_AVX2 float dot_q4_0_q8_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(w[b].qs), _mm256_set1_epi8(8));
    const __m256i p = dot_i8_i8(q, load32(x[b].qs));
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

HEARTH_AVX2 float dot_q4_1_q8_1(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_1*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i p = dot_u8_i8(unpack_nibbles(w[b].qs), load32(x[b].qs));
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    mins += f16(w[b].m) * f16(x[b].s);
  }
  return hsum(acc) + mins;
}

HEARTH_AVX2 float dot_q8_0_q8_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i p = dot_i8_i8(load32(w[b].qs), load32(x[b].qs));
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

// 32 bits -> 32 bytes: byte i is 0xff where bit i of bits is set, else 0. Each
// 128-bit half gets the 4 bytes of bits, byte i picks source byte i / 8 and tests
// bit i % 8 of it.
HEARTH_AVX2 inline __m256i bits_to_bytes(const uint8_t* qh) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(load_u32(qh)));
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, pick), bit), bit);
}

// Q5_0 x Q8_0, in the order of Q4_0 (and of ggml's AVX2 kernel): 8 int32 lanes of exact
// block products, acc += (dw * dx) * lanes. Values are q - 16 in [-16, 15]: the nibble
// with 0xf0 or-ed in where the fifth bit is clear (i.e. minus 16 as a signed byte).
HEARTH_AVX2 float dot_q5_0_q8_0(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  const auto* x = static_cast<const BlockQ8_0*>(xv);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i hi = _mm256_andnot_si256(bits_to_bytes(w[b].qh), _mm256_set1_epi8(static_cast<char>(0xf0)));
    const __m256i q = _mm256_or_si256(unpack_nibbles(w[b].qs), hi);
    const __m256i p = dot_i8_i8(q, load32(x[b].qs));
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

// Q5_1 x Q8_1, in the order of Q4_1: unsigned 5-bit values, mins summed apart.
HEARTH_AVX2 float dot_q5_1_q8_1(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_1*>(wv);
  const auto* x = static_cast<const BlockQ8_1*>(xv);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256i hi = _mm256_and_si256(bits_to_bytes(w[b].qh), _mm256_set1_epi8(0x10));
    const __m256i p = dot_u8_i8(_mm256_or_si256(unpack_nibbles(w[b].qs), hi), load32(x[b].qs));
    const __m256 d = _mm256_set1_ps(f16(w[b].d) * f16(x[b].d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    mins += f16(w[b].m) * f16(x[b].s);
  }
  return hsum(acc) + mins;
}

HEARTH_AVX2 float dot_q4_k_q8_k(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0.0f;
  const __m256i mask = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    __m256i acc = _mm256_setzero_si256();
    int summ = 0;
    for (int j = 0; j < 8; j += 2) {  // one 32-byte load feeds two sub-blocks
      uint8_t sc0 = 0, m0 = 0, sc1 = 0, m1 = 0;
      k4_scale_min(j, w[b].scales, &sc0, &m0);
      k4_scale_min(j + 1, w[b].scales, &sc1, &m1);
      const __m256i q = load32(w[b].qs + 16 * j);
      const __m256i lo = _mm256_and_si256(q, mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      const __m256i p0 = _mm256_maddubs_epi16(lo, load32(x[b].qs + 32 * j));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load32(x[b].qs + 32 * (j + 1)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16(sc0)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16(sc1)));
      const auto bsum = [&](int k) {
        return static_cast<int16_t>(x[b].bsums[2 * k] | (x[b].bsums[2 * k + 1] << 8));
      };
      summ += m0 * (bsum(2 * j) + bsum(2 * j + 1)) + m1 * (bsum(2 * j + 2) + bsum(2 * j + 3));
    }
    const float dx = load_f32(x[b].d);
    sum += rounded(f16(w[b].d) * dx * static_cast<float>(hsum_i32(acc))) -
           rounded(f16(w[b].dmin) * dx * static_cast<float>(summ));
  }
  return sum;
}

// The 8 6-bit scales and 8 mins of a Q4_K / Q5_K block (k4_scale_min for all j at once,
// on three little-endian words of the packed bytes).
inline void k4_scales_mins(const uint8_t* packed, uint8_t sc[8], uint8_t m[8]) {
  const uint32_t u0 = load_u32(packed), u1 = load_u32(packed + 4), u2 = load_u32(packed + 8);
  const uint32_t s_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
  const uint32_t s_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
  store_u32(sc, s_lo);
  store_u32(sc + 4, s_hi);
  store_u32(m, m_lo);
  store_u32(m + 4, m_hi);
}

// sum_j m[j] * (bsums[2j] + bsums[2j + 1]) of a Q8_K block: the mins term of Q4_K / Q5_K.
HEARTH_AVX2 inline int k4_mins_dot(const uint8_t m[8], const BlockQ8_K& xb) {
  const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.bsums));
  const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.bsums + 16));
  const __m128i pairs = _mm_hadd_epi16(b0, b1);  // |each| <= 2 * 16 * 127: no overflow
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
  __m128i s = _mm_madd_epi16(pairs, mins);
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Q5_K x Q8_K: integer sums as the Q4_K kernel plus the fifth bit (bit j of qh[i] for
// element i of sub-block j, moved to bit 4); the float scaling is the reference's
// expression per block, so the result equals ref::dot_q5_k_q8_k bit for bit.
HEARTH_AVX2 float dot_q5_k_q8_k(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ5_K*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0.0f;
  const __m256i mask = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t sc[8], m[8];
    k4_scales_mins(w[b].scales, sc, m);
    const __m256i qh = load32(w[b].qh);
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 8; j += 2) {  // one 32-byte load feeds two sub-blocks
      const __m256i q = load32(w[b].qs + 16 * j);
      // bit j -> bit 4 (16-bit shifts: the masked bit never crosses a byte for j <= 7)
      const __m256i h0 = j <= 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
      const __m256i h1 = j + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - j) : _mm256_srli_epi16(qh, j - 3);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask), _mm256_and_si256(h0, bit4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), _mm256_and_si256(h1, bit4));
      const __m256i p0 = _mm256_maddubs_epi16(lo, load32(x[b].qs + 32 * j));  // <= 2 * 31 * 127
      const __m256i p1 = _mm256_maddubs_epi16(hi, load32(x[b].qs + 32 * (j + 1)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[j])));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[j + 1])));
    }
    const int summ = k4_mins_dot(m, x[b]);
    const float dx = load_f32(x[b].d);
    sum += rounded(f16(w[b].d) * dx * static_cast<float>(hsum_i32(acc))) -
           rounded(f16(w[b].dmin) * dx * static_cast<float>(summ));
  }
  return sum;
}

HEARTH_AVX2 float dot_q6_k_q8_k(int64_t n, const void* wv, const void* xv) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* x = static_cast<const BlockQ8_K*>(xv);
  float sum = 0.0f;
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    __m256i acc = _mm256_setzero_si256();
    int corr = 0;  // sum of scale * 32 * bsum: the -32 offset of every value
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load32(w[b].ql + 64 * h), ql1 = load32(w[b].ql + 64 * h + 32);
      const __m256i qh = load32(w[b].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4)),
      };
      for (int g = 0; g < 4; ++g) {
        const int e0 = 128 * h + 32 * g;  // first element of this group of 32
        const int s0 = w[b].scales[e0 / 16], s1 = w[b].scales[e0 / 16 + 1];
        const __m256i p = _mm256_maddubs_epi16(q[g], load32(x[b].qs + e0));
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(s1)),
                                                _mm_set1_epi16(static_cast<int16_t>(s0)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scales));
        const auto bsum = [&](int k) {
          return static_cast<int16_t>(x[b].bsums[2 * k] | (x[b].bsums[2 * k + 1] << 8));
        };
        corr += 32 * (s0 * bsum(e0 / 16) + s1 * bsum(e0 / 16 + 1));
      }
    }
    sum += rounded(f16(w[b].d) * load_f32(x[b].d) * static_cast<float>(hsum_i32(acc) - corr));
  }
  return sum;
}

// Activation quantizers: the reference code (dot_ref.cpp) with the per-element work in
// vectors. max, the product x * id, round-to-nearest-even (nearbyint under the default
// rounding mode) and the integer sum are exact per element, so the blocks are
// byte-identical to ref::quantize_q8_0 / quantize_q8_1 (QuantizeAvx2EqualsRef).
HEARTH_AVX2 inline float block_amax(const float* xb) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < kQK; j += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + j), abs_mask), m);  // a NaN x is skipped, as by std::max
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Rounds xb[j] * id to int8 into qs; returns the sum of the 32 values.
HEARTH_AVX2 inline int block_round(const float* xb, float id, int8_t* qs) {
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int g = 0; g < 4; ++g) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * g), vid),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[g] = _mm256_cvtps_epi32(r);
  }
  const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  // packs work per 128-bit lane: fix the order with one permute.
  const __m256i a = _mm256_packs_epi32(q[0], q[1]), b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), bytes);
  return hsum_i32(sum);
}

HEARTH_AVX2 void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    const float amax = block_amax(xb);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    store_f16(y[b].d, d);
    block_round(xb, id, y[b].qs);
  }
}

HEARTH_AVX2 void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    const float amax = block_amax(xb);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int sum = block_round(xb, id, y[b].qs);
    store_f16(y[b].d, d);
    store_f16(y[b].s, static_cast<float>(sum) * d);
  }
}

// ref::quantize_q8_k in vectors: the largest |x| (a NaN skipped), the signed value at its
// first position, then per element nearbyint(x * iscale) capped at 127 and truncated to
// its low byte as the reference's casts do (only non-finite inputs reach below -127);
// bsums from the stored bytes by vpsadbw on the bytes biased by 128. Byte-identical to
// the reference (Avx2ActivationQuantizersEqualReferenceOnTies).
HEARTH_AVX2 void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i cap = _mm256_set1_epi32(127), low = _mm256_set1_epi32(0xff), bias = _mm256_set1_epi8(-128);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* xb = x + b * kQKK;
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xb + j), abs_mask), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0.0f;
    const __m256 va = _mm256_set1_ps(amax);
    for (int j = 0; j < kQKK; j += 8) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb + j), abs_mask);
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, va, _CMP_EQ_OQ));
      if (hit != 0) {
        max = xb[j + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    for (int c = 0; c < kQKK; c += 32) {
      __m256i q[4];
      for (int g = 0; g < 4; ++g) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + c + 8 * g), vs),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[g] = _mm256_and_si256(_mm256_min_epi32(_mm256_cvtps_epi32(r), cap), low);
      }
      // 0..255 pass both unsigned packs unchanged; one permute fixes the lanes' order.
      const __m256i a = _mm256_packus_epi32(q[0], q[1]), bb = _mm256_packus_epi32(q[2], q[3]);
      const __m256i bytes =
          _mm256_permutevar8x32_epi32(_mm256_packus_epi16(a, bb), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + c), bytes);
      // Four sums of eight bytes, each + 1024 for the bias; a bsum is two of them.
      const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(bytes, bias), _mm256_setzero_si256());
      alignas(32) int64_t s8[4];
      _mm256_store_si256(reinterpret_cast<__m256i*>(s8), sad);
      for (int k = 0; k < 2; ++k) {
        const int v = static_cast<int>(s8[2 * k] + s8[2 * k + 1]) - 2048;
        const int j = c / 16 + k;
        y[b].bsums[2 * j] = static_cast<uint8_t>(v & 0xff);
        y[b].bsums[2 * j + 1] = static_cast<uint8_t>((v >> 8) & 0xff);
      }
    }
    store_f32(y[b].d, 1.0f / iscale);
  }
}

constexpr std::array kKernels = {
    DotKernel{GgmlType::Q4_0, GgmlType::Q8_0, quantize_q8_0, dot_q4_0_q8_0, "avx2"},
    DotKernel{GgmlType::Q4_1, GgmlType::Q8_1, quantize_q8_1, dot_q4_1_q8_1, "avx2"},
    DotKernel{GgmlType::Q5_0, GgmlType::Q8_0, quantize_q8_0, dot_q5_0_q8_0, "avx2"},
    DotKernel{GgmlType::Q5_1, GgmlType::Q8_1, quantize_q8_1, dot_q5_1_q8_1, "avx2"},
    DotKernel{GgmlType::Q8_0, GgmlType::Q8_0, quantize_q8_0, dot_q8_0_q8_0, "avx2"},
    DotKernel{GgmlType::Q4_K, GgmlType::Q8_K, quantize_q8_k, dot_q4_k_q8_k, "avx2"},
    DotKernel{GgmlType::Q5_K, GgmlType::Q8_K, quantize_q8_k, dot_q5_k_q8_k, "avx2"},
    DotKernel{GgmlType::Q6_K, GgmlType::Q8_K, quantize_q8_k, dot_q6_k_q8_k, "avx2"},
};

}  // namespace

const DotKernel* find(GgmlType type) {
  for (const auto& k : kKernels) {
    if (k.weight_type == type) return &k;
  }
  return nullptr;
}

}  // namespace hearth::cpu::avx2

#else

namespace hearth::cpu::avx2 {
const DotKernel* find(GgmlType) { return nullptr; }
}  // namespace hearth::cpu::avx2

#endif

#include "engine/logit_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hearth::engine {
namespace {

constexpr size_t kBlock = 2048;  // a multiple of every vector width: the loops vectorise at -O2

// The block loops compiled twice on x86-64 (GCC), for AVX2 and for the baseline, picked
// at load time by the CPU. The same results: integer compares, and a polynomial whose
// roundings do not change (AVX2 does not bring FMA contraction).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HEARTH_SCAN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HEARTH_SCAN_CLONES
#endif

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Whether block b[0 .. kBlock) holds a NaN or an infinity (exponent bits all set).
HEARTH_SCAN_CLONES bool block_has_non_finite(const float* b) {
  uint32_t u[kBlock];
  std::memcpy(u, b, sizeof u);
  uint32_t any = 0;
  for (size_t i = 0; i < kBlock; ++i) any |= static_cast<uint32_t>((u[i] & 0x7f800000u) == 0x7f800000u);
  return any != 0;
}

// Finite floats as integers in the same order (-0 below +0): the block's largest key.
int32_t key_of(uint32_t u) {
  const auto s = static_cast<int32_t>(u);
  return s < 0 ? s ^ 0x7fffffff : s;
}
HEARTH_SCAN_CLONES int32_t block_max_key(const float* b) {
  uint32_t u[kBlock];
  std::memcpy(u, b, sizeof u);
  int32_t m = INT32_MIN;
  for (size_t i = 0; i < kBlock; ++i) {
    const auto s = static_cast<int32_t>(u[i]);
    const int32_t k = s < 0 ? s ^ 0x7fffffff : s;
    m = k > m ? k : m;
  }
  return m;
}

// exp(t) for t = (x - shift) * scale <= 0: Cody-Waite reduction t = n ln2 + r, a degree-7
// polynomial of r, 2^n from the exponent bits; t below -87 (and -inf) gives 0. The block
// form below vectorises; both round every step alike (no contraction: -ffp-contract=off).
constexpr uint32_t kLow = 0xc2ae0000u;  // the bits of -87.0f
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
inline float exp_poly(float v) {
  const float n = (v * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (v - n * 0.693145752f) - n * 1.42860677e-06f;
  float p = 1.98756912e-4f;
  p = p * r + 1.39819994e-3f;
  p = p * r + 8.33345205e-3f;
  p = p * r + 4.16657962e-2f;
  p = p * r + 1.66666657e-1f;
  p = p * r + 5.0e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  float scale2;
  std::memcpy(&scale2, &e, sizeof scale2);
  return p * scale2;
}

HEARTH_SCAN_CLONES void exp_block(const float* __restrict x, float shift, float scale, float* __restrict out) {
  float t[kBlock];
  uint32_t tb[kBlock], keep[kBlock];
  for (size_t i = 0; i < kBlock; ++i) t[i] = (x[i] - shift) * scale;
  std::memcpy(tb, t, sizeof t);
  // Negative floats order by their bits: below -87 means sign set and bits above kLow.
  for (size_t i = 0; i < kBlock; ++i) {
    const bool low = (tb[i] >> 31) != 0 && tb[i] > kLow;
    keep[i] = low ? 0u : 0xffffffffu;
    tb[i] = low ? kLow : tb[i];
  }
  std::memcpy(t, tb, sizeof t);
  for (size_t i = 0; i < kBlock; ++i) {
    const float y = exp_poly(t[i]);
    uint32_t yb;
    std::memcpy(&yb, &y, sizeof yb);
    yb &= keep[i];
    std::memcpy(&out[i], &yb, sizeof yb);
  }
}

}  // namespace

void exp_shifted(std::span<const float> x, float shift, float scale, float* out) {
  const size_t n = x.size();
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) exp_block(x.data() + i, shift, scale, out + i);
  if (i < n) {  // the tail through one padded block
    float in[kBlock], res[kBlock];
    std::fill(in, in + kBlock, shift);
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(i), x.end(), in);
    exp_block(in, shift, scale, res);
    std::copy(res, res + (n - i), out + i);
  }
}

float exp_shifted_one(float x, float shift, float scale) {
  const float t = (x - shift) * scale;
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  if ((tb >> 31) != 0 && tb > kLow) return 0.0f;
  return exp_poly(t);
}

int64_t first_non_finite(std::span<const float> v) {
  const size_t n = v.size();
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    if (block_has_non_finite(v.data() + i)) break;
  }
  for (; i < n; ++i) {
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t argmax_first(std::span<const float> v) {
  const size_t n = v.size();
  if (n == 0) return -1;
  // With a NaN or an infinity about, the plain loop's answer (NaN compares false).
  if (first_non_finite(v) >= 0) return std::max_element(v.begin(), v.end()) - v.begin();
  int32_t best = INT32_MIN;
  size_t best_block = 0;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const int32_t m = block_max_key(v.data() + i);
    if (m > best) {
      best = m;
      best_block = i;
    }
  }
  for (size_t j = i; j < n; ++j) {
    const int32_t k = key_of(bits_of(v[j]));
    if (k > best) {
      best = k;
      best_block = j;
    }
  }
  // The first value equal to the largest one (as floats): in the block that first reached
  // it, unless it is zero (-0 equals +0, and a -0 may come earlier with a smaller key).
  const int32_t s = best < 0 ? best ^ 0x7fffffff : best;
  float top;
  std::memcpy(&top, &s, sizeof top);
  for (size_t j = top == 0.0f ? 0 : best_block; j < n; ++j) {
    if (v[j] == top) return static_cast<int64_t>(j);
  }
  return static_cast<int64_t>(best_block);  // not reached
}

}  // namespace hearth::engine

#include "engine/logit_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hearth::engine {
namespace {

constexpr size_t kBlock = 2048;  // a multiple of every vector width: the loops vectorise at -O2

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Whether block b[0 .. kBlock) holds a NaN or an infinity (exponent bits all set).
bool block_has_non_finite(const float* b) {
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
int32_t block_max_key(const float* b) {
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

}  // namespace

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

// What the CUDA back-end's 8-bit activation products (q8_matvec) multiply with: x
// quantized per chunk of 32 values (d = max |x| / 127 in f32, q = round(x / d), ties
// to even), returned as the exact values d * q in double. Shared by the GPU tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

inline std::vector<double> q8_values(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t c0 = 0; c0 + 32 <= x.size(); c0 += 32) {
    float amax = 0.f;
    for (size_t i = c0; i < c0 + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.f;
    for (size_t i = c0; i < c0 + 32; ++i) {
      const float q = amax == 0.f ? 0.f : std::nearbyint(x[i] / d);
      out[i] = static_cast<double>(d) * static_cast<double>(q);
    }
  }
  return out;
}

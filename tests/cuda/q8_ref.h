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

// The same as ggml's Q8_K (the CPU back-end's quantize_q8_k): per 256 values, iscale =
// -127 / (the value of largest magnitude, the first on ties), q = min(127, round(iscale x)),
// value = q / iscale.
inline std::vector<double> q8k_values(const std::vector<float>& x) {
  std::vector<double> out(x.size());
  for (size_t c0 = 0; c0 + 256 <= x.size(); c0 += 256) {
    float amax = 0.f, mx = 0.f;
    for (size_t i = c0; i < c0 + 256; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        mx = x[i];
      }
    }
    if (amax == 0.f) continue;
    const float iscale = -127.f / mx, d = 1.f / iscale;
    for (size_t i = c0; i < c0 + 256; ++i) {
      const int q = std::min(127, static_cast<int>(std::nearbyint(iscale * x[i])));
      out[i] = static_cast<double>(d) * static_cast<double>(q);
    }
  }
  return out;
}

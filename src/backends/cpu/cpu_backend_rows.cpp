// CpuBackend row movement for routed experts: fill, gather and weighted
// scatter-add of activation rows (plain loops: memory-bound and small).
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"

namespace hearth::cpu {

void CpuBackend::fill(float* dst, float value, int64_t n) { std::fill(dst, dst + n, value); }

void CpuBackend::gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) {
  for (int64_t i = 0; i < n_ids; ++i) std::memcpy(dst + i * n, src + static_cast<int64_t>(ids[i]) * n, sizeof(float) * n);
}

void CpuBackend::scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights, int64_t n_ids,
                                  float* dst) {
  for (int64_t i = 0; i < n_ids; ++i) {
    float* d = dst + static_cast<int64_t>(ids[i]) * n;
    const float* s = src + i * n;
    const float w = weights[i];
    for (int64_t j = 0; j < n; ++j) d[j] += w * s[j];
  }
}

}  // namespace hearth::cpu

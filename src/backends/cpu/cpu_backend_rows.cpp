// CpuBackend row movement: fill, gather and weighted scatter-add of activation rows for
// routed experts (plain loops: memory-bound and small). The conversion of rows for an
// f16 KV cache is the kernel table's (kernel_table.h; F16C: cpu_backend_rows_x86.cpp).
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/half.h"

namespace hearth::cpu {

void CpuBackend::fill(float* dst, float value, int64_t n) {
  const OpScope timer(op_times_.get(), "fill");
  std::fill(dst, dst + n, value);
}

void CpuBackend::gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) {
  const OpScope timer(op_times_.get(), "gather_rows");
  for (int64_t i = 0; i < n_ids; ++i) std::memcpy(dst + i * n, src + static_cast<int64_t>(ids[i]) * n, sizeof(float) * n);
}

void CpuBackend::scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights, int64_t n_ids,
                                  float* dst) {
  const OpScope timer(op_times_.get(), "scatter_add_rows");
  for (int64_t i = 0; i < n_ids; ++i) {
    float* d = dst + static_cast<int64_t>(ids[i]) * n;
    const float* s = src + i * n;
    const float w = weights[i];
    for (int64_t j = 0; j < n; ++j) d[j] += w * s[j];
  }
}

}  // namespace hearth::cpu

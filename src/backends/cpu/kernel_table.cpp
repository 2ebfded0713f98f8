// The plain kernel table and the choice of a table for this CPU (kernel_table.h).
#include "backends/cpu/kernel_table.h"

#include "backends/cpu/kernels_ref.h"
#include "backends/cpu/matmul_f32.h"
#include "core/half.h"

namespace hearth::cpu {

void rope_heads_plain(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, const ops::RopeParams& p) {
  for (int64_t h = 0; h < n_heads; ++h) ref::rope_rotate(x + h * head_dim, cos_sin, p);
}

void rms_norm_rows_plain(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) ref::rms_norm_row(x + r * n, w, n, eps, y + r * n);
}

namespace {

const KernelTable kPlain{
    "plain",       f16_to_f32_row,      f32_to_f16_row, attend_rows_plain, 0,          nullptr,
    swiglu_plain,  silu_row_plain,      gdn_recurrent_plain, nullptr,      gelu_plain, full_items_plain,
    dot_rows_f32_plain, rope_heads_plain, rms_norm_rows_plain};

}  // namespace

const KernelTable& plain_kernels() { return kPlain; }

const KernelTable& cpu_kernels(bool reference) {
  if (reference) return kPlain;
  const KernelTable* k = arch_kernels(cpu_features());
  return k != nullptr ? *k : kPlain;
}

#if !defined(__x86_64__) && !defined(__aarch64__)
// No instruction-set kernels for this architecture (kernels_x86.cpp, kernels_neon.cpp
// make the others' tables): the plain table, and subnormals as the CPU treats them.
const KernelTable* arch_kernels(const CpuFeatures&) { return nullptr; }
uint64_t FlushSubnormals::flush_subnormals_begin() { return 0; }
void FlushSubnormals::flush_subnormals_end(uint64_t) {}
#endif

}  // namespace hearth::cpu

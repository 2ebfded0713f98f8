// The NEON builds of the kernel table's entries (kernel_table.h), declared for
// kernels_neon.cpp, which makes the aarch64 table of them. aarch64 files only.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/kernel_table.h"

namespace hearth::cpu {

// f16 <-> f32 rows (f16_rows_neon.cpp).
void f16_to_f32_row_neon(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row_neon(const float* src, uint16_t* dst, int64_t n);
// Attention (attention_neon.cpp).
void attend_rows_neon(const AttendArgs& a, int64_t begin, int64_t end);
// SwiGLU and SiLU (activations_neon.cpp).
void swiglu_neon(const float* g, const float* u, int64_t n, float* out);
void silu_row_neon(float* x, int64_t n);
// The Gated DeltaNet prompt kernel (gdn_neon.cpp).
void chunked_head_neon(const gdn::HeadTask& t, int64_t y0, int64_t y1, std::vector<float>& buf);

}  // namespace hearth::cpu

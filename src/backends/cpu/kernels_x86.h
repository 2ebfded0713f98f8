// The x86-64 builds of the kernel table's entries (kernel_table.h), declared for
// kernels_x86.cpp, which makes the AVX2 and AVX-512 tables of them. x86-64 files only.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/kernel_table.h"

namespace hearth::cpu {

// f16 <-> f32 rows with F16C (attention_x86.cpp, cpu_backend_rows_x86.cpp).
void f16_to_f32_row_f16c(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row_f16c(const float* src, uint16_t* dst, int64_t n);
// Attention (attention_x86.cpp; the blocked AVX-512 kernel: attention_avx512.h).
void attend_rows_avx2(const AttendArgs& a, int64_t begin, int64_t end);
void attend_rows_avx512(const AttendArgs& a, int64_t begin, int64_t end);
// SwiGLU and SiLU (activations_x86.cpp).
void swiglu_avx2(const float* g, const float* u, int64_t n, float* out);
void swiglu_avx512(const float* g, const float* u, int64_t n, float* out);
void silu_row_avx2(float* x, int64_t n);
void silu_row_avx512(float* x, int64_t n);
// The Gated DeltaNet recurrence (gdn_x86.cpp).
void gdn_recurrent_avx2(const gdn::HeadTask& t, std::vector<float>& tmp);
void chunked_head_avx2(const gdn::HeadTask& t, int64_t y0, int64_t y1, std::vector<float>& buf);
void chunked_head_avx512(const gdn::HeadTask& t, int64_t y0, int64_t y1, std::vector<float>& buf);
// Rotary embedding of a token's heads (rope_norm_x86.cpp).
void rope_heads_avx2(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, const ops::RopeParams& p);
// RMS norm, eight rows at a time (rope_norm_x86.cpp).
void rms_norm_rows_avx512(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y);
// The vision tower (vision_x86.cpp).
void gelu_avx2(float* x, int64_t n, bool tanh_approx);
void full_items_avx2(const vision::FullArgs& a, const FullAttnItem* items, int64_t begin, int64_t end);
void full_items_avx512(const vision::FullArgs& a, const FullAttnItem* items, int64_t begin, int64_t end);

}  // namespace hearth::cpu

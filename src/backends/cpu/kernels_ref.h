// Plain reference implementations of every back-end operation: single-threaded,
// no SIMD, written for clarity. They are the oracle the fast CPU kernels (and
// later the CUDA kernels) are tested against. Shapes as in ops/backend.h.
#pragma once

#include <cstdint>

#include "ops/backend.h"

namespace hearth::cpu::ref {

void get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out);
void matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y);
void add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens);
// One row of rms_norm with the weights as floats; rms_scale: its 1 / sqrt(sum / n + eps).
void rms_norm_row(const float* xr, const float* w, int64_t n, float eps, float* yr);
float rms_scale(double sum, int64_t n, float eps);
void rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps, float* y);
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const ops::RopeParams& p);
void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
              const ops::KvLayer& cache);
void attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void add(float* x, const float* y, int64_t n);

// Vision-tower operations (ops::Backend::layer_norm, gelu, attention_full): the
// formulas of backend.h in float, with sums in double.
void layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias, int64_t n_rows, int64_t n,
                float eps, float* y);
float gelu_one(float x, bool tanh_approx);
void gelu(float* x, int64_t n, bool tanh_approx);
void attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs, int64_t n_segs,
                    int64_t n_head, int64_t head_dim, float scale, float* out);

// Single row helpers shared by the fast kernels.
void dequantize_row(const ops::WeightView& w, int64_t row, float* out);  // out: [w.n_cols]
// Float dot product in four interleaved partial sums ((s0 + s1) + (s2 + s3)): the
// reference attention_full's scores.
float dot(const float* a, const float* b, int64_t n);
// Float dot product in tinyBLAS's order (ggml_order::dot_order_b): one 16-lane fma
// accumulator over steps of 16 (element i in lane i % 16), the last partial step padded
// with zeros (fma(0, 0, s) as a masked vector load gives), finished by ggml_order::sum16.
// The CPU back-end's product for weight types without a quantized one (f32, f16, bf16,
// ...): one fused multiply-add per element, in the order its vector tiles keep
// (matmul_f32.h) for any batch.
float dot16(const float* a, const float* b, int64_t n);
float silu(float x);
// RoPE angles of one position: cos_sin[2i], cos_sin[2i + 1] for i < p.n_rot / 2.
void rope_angles(float pos, const ops::RopeParams& p, float* cos_sin);
// The axis (0 time, 1 height, 2 width) whose position turns pair i under kInterleaved.
inline int rope_axis(int64_t i, const ops::RopeParams& p) {
  if (i % 3 == 1 && i < 3 * p.sections[1]) return 1;
  if (i % 3 == 2 && i < 3 * p.sections[2]) return 2;
  return 0;
}
// Multi-axis RoPE angles (p.multi != kNone) of one token from its three positions
// pos3[0..2], laid out as rope_angles'. Each axis' angle runs by the same repeated
// multiplication as rope_angles, so equal positions under kInterleaved give its bits.
void rope_angles_multi(const int32_t* pos3, const ops::RopeParams& p, float* cos_sin);
// Rotates one head v: [head_dim] in place with angles from rope_angles.
void rope_rotate(float* v, const float* cos_sin, const ops::RopeParams& p);

}  // namespace hearth::cpu::ref

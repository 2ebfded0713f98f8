// Float math in the exact operation order of llama.cpp's CPU back-end (ggml, as
// built for AVX-512 machines), so that Hearth's logits equal llama.cpp's bit for bit.
//
// Why this matters: small models such as SmolLM2-135M carry outlier activations
// (|x| ~ 2e4) and every matmul quantizes its input to 8 bits. One ulp of difference
// in an attention output or a SiLU value can flip one 8-bit rounding, and on such a
// model that flip grows to ~0.5 in the logits a few layers later: ordinary float
// reordering is not "noise" here, it changes greedy continuations. So the reductions
// below follow ggml's order (as read from ggml's source, re-derived here):
//   - dot_order_a: 4 accumulators x 16 lanes over steps of 64 elements (ggml_vec_dot_f32),
//     leftover elements added in double;
//   - dot_order_b: one 16-lane accumulator over steps of 16 (llamafile's tinyBLAS sgemm);
//   - sum16: the halving tree of _mm512_reduce_add_ps;
//   - exp_approx: the range reduction and degree-5 polynomial of ARM's optimized-routines
//     expf that ggml vectorises (max error about 1.5 ulp), used by softmax and SiLU.
// All of these are plain scalar code with explicit std::fma (the build never contracts
// a*b+c on its own), so the results are the same on every CPU; compiled inside an
// AVX2+FMA function the compiler vectorises them without changing a single rounding.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace hearth::cpu::ggml_order {

// Sum of 16 lanes as _mm512_reduce_add_ps adds them: halves 8+8, 4+4, then pairs.
inline float sum16(const float* v) {
  float h8[8], h4[4];
  for (int i = 0; i < 8; ++i) h8[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) h4[i] = h8[i] + h8[i + 4];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// x . y in ggml_vec_dot_f32's order (4 x 16 lanes, steps of 64; the rest in double).
inline float dot_order_a(const float* x, const float* y, int64_t n) {
  float acc[4][16] = {};
  const int64_t n64 = n & ~int64_t{63};
  for (int64_t i = 0; i < n64; i += 64) {
    for (int a = 0; a < 4; ++a) {
      for (int l = 0; l < 16; ++l) acc[a][l] = std::fma(x[i + 16 * a + l], y[i + 16 * a + l], acc[a][l]);
    }
  }
  for (int l = 0; l < 16; ++l) acc[0][l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  double s = sum16(acc[0]);
  for (int64_t i = n64; i < n; ++i) s += static_cast<double>(x[i] * y[i]);
  return static_cast<float>(s);
}

// x . y in tinyBLAS's order (one 16-lane accumulator over steps of 16), finished by
// sum16; n must be a multiple of 16.
inline float dot_order_b(const float* x, const float* y, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
  }
  return sum16(acc);
}

// e^x with ggml's vectorised approximation (exact at 0; 0 below about -133, inf above about 133).
inline float exp_approx(float x) {
  const float shift = 0x1.8p23f;  // adding it rounds to an integer in the low mantissa bits
  const float n = std::fma(x, 0x1.715476p+0f, shift) - shift;  // round(x / ln 2)
  if (!(std::fabs(n) <= 192.0f)) return n > 0.0f ? INFINITY : 0.0f;
  // r = x - n ln2 with ln2 split in two parts, then the polynomial 1 + r + c2 r^2 + ...
  const float r = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float r2 = r * r;
  const float hi = std::fma(std::fma(0x1.0e4020p-7f, r, 0x1.573e2ep-5f), r2, std::fma(0x1.555e66p-3f, r, 0x1.fffdb6p-2f));
  const float p = std::fma(hi, r2, std::fma(0x1.ffffecp-1f, r, 1.0f));
  const int e = static_cast<int>(n);
  if (e >= -126 && e <= 127) return p * std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return std::ldexp(p, e);  // exact scaling into the subnormal or overflow range
}

// silu(x) = x / (1 + e^-x) with ggml's vectorised exp (what llama.cpp's SiLU uses).
inline float silu_one(float x) { return x / (1.0f + exp_approx(-x)); }

// silu(g) * u as ggml's SwiGLU computes it.
inline float swiglu_one(float g, float u) { return (g / (1.0f + exp_approx(-g))) * u; }

// Causal attention of one query head against n_keys cached keys, in llama.cpp's order
// (non-flash path): scores by dot_order_a; softmax with exp_approx and a double sum of
// 16-key partial sums; then out = sum_j p_j v_j over the keys, in the order of the
// matrix product llama.cpp picks: tinyBLAS (dot_order_b) for a prompt batch, ggml's
// vector dot (dot_order_a) for a single query. Masked keys count as zeros, which is
// what llama.cpp's padded cache adds.
// q: [head_dim]; krow(j, tmp) / vrow(j, tmp) give key / value j as head_dim floats
// (a pointer into the cache, or tmp after converting an f16 row);
// scores: scratch of n_keys rounded up to 64; acc: scratch of 64 * head_dim;
// tmp: scratch of head_dim.
template <class KRows, class VRows>
inline void attend_one(const float* q, const KRows& krow, const VRows& vrow, int64_t n_keys, int64_t head_dim,
                       float scale, bool single_query, float* scores, float* acc, float* tmp, float* out) {
  float max_s = -INFINITY;
  for (int64_t j = 0; j < n_keys; ++j) {
    scores[j] = dot_order_a(krow(j, tmp), q, head_dim) * scale;
    max_s = std::fmax(max_s, scores[j]);
  }
  const int64_t n_pad = (n_keys + 15) & ~int64_t{15};
  for (int64_t j = 0; j < n_keys; ++j) scores[j] = exp_approx(scores[j] - max_s);
  for (int64_t j = n_keys; j < n_pad; ++j) scores[j] = 0.0f;
  double sum = 0.0;
  for (int64_t j = 0; j < n_pad; j += 16) sum += sum16(scores + j);
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n_keys; ++j) scores[j] *= inv;
  // Key j goes to lane j % n_lanes; each lane accumulates its keys in order.
  const int64_t n_lanes = single_query ? 64 : 16;
  for (int64_t i = 0; i < n_lanes * head_dim; ++i) acc[i] = 0.0f;
  for (int64_t j = 0; j < n_keys; ++j) {
    float* a = acc + (j % n_lanes) * head_dim;
    const float* vj = vrow(j, tmp);
    const float p = scores[j];
    for (int64_t d = 0; d < head_dim; ++d) a[d] = std::fma(vj[d], p, a[d]);
  }
  for (int64_t d = 0; d < head_dim; ++d) {
    float lanes[16];
    for (int l = 0; l < 16; ++l) {
      const float* a = acc + l * head_dim + d;
      lanes[l] = single_query ? (a[0] + a[32 * head_dim]) + (a[16 * head_dim] + a[48 * head_dim]) : a[0];
    }
    out[d] = sum16(lanes);
  }
}

}  // namespace hearth::cpu::ggml_order

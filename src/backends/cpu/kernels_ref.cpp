// Reference kernels: the straightforward math, in float, with the summation orders
// and the exp approximation of llama.cpp's CPU back-end where they change results
// (ggml_order.h explains why that matters on small quantized models).
#include "backends/cpu/kernels_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/ggml_order.h"
#include "backends/cpu/kv_rows.h"
#include "quant/dequant_ref.h"

namespace hearth::cpu::ref {

float dot(const float* a, const float* b, int64_t n) {
  // Four partial sums let the compiler vectorise without -ffast-math.
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

float dot16(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(a[i + l], b[i + l], acc[l]);
  }
  if (i < n) {
    for (int l = 0; l < 16; ++l) acc[l] = i + l < n ? std::fma(a[i + l], b[i + l], acc[l]) : std::fma(0.0f, 0.0f, acc[l]);
  }
  return ggml_order::sum16(acc);
}

void dequantize_row(const ops::WeightView& w, int64_t row, float* out) {
  const auto* src = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(row) * w.row_bytes;
  dequantize_row_ref(w.type, src, out, w.n_cols);
}

float silu(float x) { return x / (1.0f + ggml_order::exp_approx(-x)); }

void get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) {
  for (int64_t i = 0; i < n_ids; ++i) dequantize_row(table, ids[i], out + i * table.n_cols);
}

void matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) {
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  for (int64_t r = 0; r < w.n_rows; ++r) {
    dequantize_row(w, r, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.n_cols;
      float sum = 0.0f;
      for (int64_t i = 0; i < w.n_cols; ++i) sum += row[i] * xt[i];
      y[t * w.n_rows + r] = sum;
    }
  }
}

void add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens) {
  std::vector<float> b(static_cast<size_t>(bias.n_cols));
  dequantize_row(bias, 0, b.data());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < bias.n_cols; ++i) x[t * bias.n_cols + i] += b[i];
  }
}

float rms_scale(double sum, int64_t n, float eps) { return 1.0f / std::sqrt(static_cast<float>(sum / n) + eps); }

void rms_norm_row(const float* xr, const float* w, int64_t n, float eps, float* yr) {
  double sum = 0.0;
  // Squares rounded to float, summed in double: ggml's order, so that the scale
  // (and the 8-bit activations quantized from y) match llama.cpp bit for bit.
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
  const float scale = rms_scale(sum, n, eps);
  for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
}

void rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps, float* y) {
  std::vector<float> w(static_cast<size_t>(n));
  dequantize_row(weight, 0, w.data());
  for (int64_t r = 0; r < n_rows; ++r) rms_norm_row(x + r * n, w.data(), n, eps, y + r * n);
}

void rope_angles(float pos, const ops::RopeParams& p, float* cos_sin) {
  // theta_i = pos * base^(-2i/n_rot), computed as llama.cpp (ggml) does: by repeated
  // multiplication in float. pow() per i gives angles a few ulp apart, and on small
  // models with outlier activations those ulps flip 8-bit activation roundings later on.
  const float step = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta = pos;
  for (int64_t i = 0; i < p.n_rot / 2; ++i) {
    const float t = p.freq_scale * theta;
    cos_sin[2 * i] = std::cos(t);
    cos_sin[2 * i + 1] = std::sin(t);
    theta *= step;
  }
}

void rope_angles_multi(const int32_t* pos3, const ops::RopeParams& p, float* cos_sin) {
  const int64_t half = p.n_rot / 2;
  if (p.multi == ops::RopeMulti::kVision) {
    // Two sections (rows: axis 1, then columns: axis 2), each its own frequency ladder
    // base^(-j / s), j = 0 .. s - 1.
    int64_t i = 0;
    for (int sec = 0; sec < 2; ++sec) {
      const int64_t s = p.sections[sec];
      const float step = std::pow(p.freq_base, -1.0f / static_cast<float>(s));
      float theta = static_cast<float>(pos3[sec + 1]);
      for (int64_t j = 0; j < s && i < half; ++j, ++i) {
        const float t = p.freq_scale * theta;
        cos_sin[2 * i] = std::cos(t);
        cos_sin[2 * i + 1] = std::sin(t);
        theta *= step;
      }
    }
    return;
  }
  // kInterleaved: one ladder per axis, all stepped together; pair i takes its axis'.
  const float step = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta[3] = {static_cast<float>(pos3[0]), static_cast<float>(pos3[1]), static_cast<float>(pos3[2])};
  for (int64_t i = 0; i < half; ++i) {
    const int axis = rope_axis(i, p);
    const float t = p.freq_scale * theta[axis];
    cos_sin[2 * i] = std::cos(t);
    cos_sin[2 * i + 1] = std::sin(t);
    for (float& th : theta) th *= step;
  }
}

void rope_rotate(float* v, const float* cos_sin, const ops::RopeParams& p) {
  const int64_t half = p.n_rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const int64_t a = p.neox ? i : 2 * i;
    const int64_t b = p.neox ? i + half : 2 * i + 1;
    const float x0 = v[a], x1 = v[b];
    // The fused multiply-adds are the ones ggml's compiled rotation performs; with
    // them the rotated values equal llama.cpp's bit for bit.
    v[a] = std::fma(x0, c, -(x1 * s));
    v[b] = std::fma(x0, s, x1 * c);
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const ops::RopeParams& p) {
  std::vector<float> cos_sin(static_cast<size_t>(p.n_rot));
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (p.multi != ops::RopeMulti::kNone) {
      rope_angles_multi(p.pos3 + 3 * t, p, cos_sin.data());
    } else {
      rope_angles(static_cast<float>(positions[t]), p, cos_sin.data());
    }
    for (int64_t h = 0; h < n_heads; ++h) rope_rotate(x + (t * n_heads + h) * head_dim, cos_sin.data(), p);
  }
}

void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
              const ops::KvLayer& cache) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t row = slots[t];
    if (cache.type == ops::KvType::Q8_0) {
      const int64_t rb = ops::kv_row_bytes(ops::KvType::Q8_0, n_kv_dim);
      quantize_row_q8_0(k + t * n_kv_dim, static_cast<uint8_t*>(cache.k) + row * rb, n_kv_dim);
      quantize_row_q8_0(v + t * n_kv_dim, static_cast<uint8_t*>(cache.v) + row * rb, n_kv_dim);
    } else if (cache.type == ops::KvType::F16) {
      f32_to_f16_row(k + t * n_kv_dim, static_cast<uint16_t*>(cache.k) + row * n_kv_dim, n_kv_dim);
      f32_to_f16_row(v + t * n_kv_dim, static_cast<uint16_t*>(cache.v) + row * n_kv_dim, n_kv_dim);
    } else {
      std::memcpy(static_cast<float*>(cache.k) + row * n_kv_dim, k + t * n_kv_dim, sizeof(float) * n_kv_dim);
      std::memcpy(static_cast<float*>(cache.v) + row * n_kv_dim, v + t * n_kv_dim, sizeof(float) * n_kv_dim);
    }
  }
}

void attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  const int64_t group = n_head / n_head_kv;
  const int64_t kv_stride = n_head_kv * head_dim;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const ops::AttentionSeq& sq = seqs[s];
    const BlockMap map(sq.block_table, cache.block_size);
    std::vector<float> scores(static_cast<size_t>(sq.pos0 + sq.n_tokens + 64));
    std::vector<float> acc(static_cast<size_t>(64 * head_dim)), tmp(static_cast<size_t>(head_dim));
    for (int64_t t = 0; t < sq.n_tokens; ++t) {
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t kv_off = (h / group) * head_dim, item = (sq.first_row + t) * n_head + h;
        const int64_t n_keys = sq.pos0 + t + 1;
        const bool single = sq.n_tokens == 1;
        if (cache.type == ops::KvType::Q8_0) {
          // q8_0: the key and value rows dequantized one at a time (kv_q8.h), then the
          // f32 math.
          const int64_t off = ops::kv_row_bytes(cache.type, kv_off), stride = ops::kv_row_bytes(cache.type, kv_stride);
          const KvRowsQ8<CvtPlain> kr{static_cast<const uint8_t*>(cache.k) + off, stride, map, head_dim};
          const KvRowsQ8<CvtPlain> vr{static_cast<const uint8_t*>(cache.v) + off, stride, map, head_dim};
          ggml_order::attend_one(q + item * head_dim, kr, vr, n_keys, head_dim, scale, single, scores.data(),
                                 acc.data(), tmp.data(), out + item * head_dim);
        } else if (cache.type == ops::KvType::F16) {
          const KvRowsF16<CvtPlain> kr{static_cast<const uint16_t*>(cache.k) + kv_off, kv_stride, map, head_dim};
          const KvRowsF16<CvtPlain> vr{static_cast<const uint16_t*>(cache.v) + kv_off, kv_stride, map, head_dim};
          ggml_order::attend_one(q + item * head_dim, kr, vr, n_keys, head_dim, scale, single, scores.data(),
                                 acc.data(), tmp.data(), out + item * head_dim);
        } else {
          const KvRowsF32 kr{static_cast<const float*>(cache.k) + kv_off, kv_stride, map};
          const KvRowsF32 vr{static_cast<const float*>(cache.v) + kv_off, kv_stride, map};
          ggml_order::attend_one(q + item * head_dim, kr, vr, n_keys, head_dim, scale, single, scores.data(),
                                 acc.data(), tmp.data(), out + item * head_dim);
        }
      }
    }
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ggml_order::swiglu_one(gate[i], up[i]);
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias, int64_t n_rows, int64_t n,
                float eps, float* y) {
  std::vector<float> w(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  dequantize_row(weight, 0, w.data());
  dequantize_row(bias, 0, b.data());
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const auto m = static_cast<float>(mean);
    const auto inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] - m) * inv * w[i] + b[i];
  }
}

float gelu_one(float x, bool tanh_approx) {
  if (tanh_approx) {
    const float c = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
  }
  return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
}

void gelu(float* x, int64_t n, bool tanh_approx) {
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_one(x[i], tanh_approx);
}

void attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs, int64_t n_segs,
                    int64_t n_head, int64_t head_dim, float scale, float* out) {
  const int64_t stride = n_head * head_dim;
  std::vector<float> scores;
  std::vector<double> acc(static_cast<size_t>(head_dim));
  for (int64_t s = 0; s < n_segs; ++s) {
    const ops::FullAttentionSeg& sg = segs[s];
    scores.resize(static_cast<size_t>(sg.n_rows));
    for (int64_t r = sg.first_row; r < sg.first_row + sg.n_rows; ++r) {
      for (int64_t h = 0; h < n_head; ++h) {
        const float* qr = q + r * stride + h * head_dim;
        float max_s = -INFINITY;
        for (int64_t j = 0; j < sg.n_rows; ++j) {
          scores[j] = dot(qr, k + (sg.first_row + j) * stride + h * head_dim, head_dim) * scale;
          max_s = std::max(max_s, scores[j]);
        }
        double total = 0.0;
        for (int64_t j = 0; j < sg.n_rows; ++j) {
          scores[j] = std::exp(scores[j] - max_s);
          total += scores[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < sg.n_rows; ++j) {
          const float* vj = v + (sg.first_row + j) * stride + h * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) acc[d] += static_cast<double>(scores[j]) * vj[d];
        }
        for (int64_t d = 0; d < head_dim; ++d) out[r * stride + h * head_dim + d] = static_cast<float>(acc[d] / total);
      }
    }
  }
}

}  // namespace hearth::cpu::ref

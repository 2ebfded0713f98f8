// Tiny random-weight Llama-family models built in memory with the GGUF writer
// (tests only), and an independent plain double-precision forward pass over the
// same (dequantized) weights, written from the textbook formulas without any of
// the engine's code: the oracle that catches layout bugs (RoPE pairs, biases,
// per-head q/k norms, GQA head mapping) that a fast-vs-reference comparison of
// the engine against itself cannot see.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"

namespace tiny {

using hearth::GgmlType;

struct Spec {
  std::string name;    // label in test names
  std::string arch;    // general.architecture: llama, qwen2, qwen3
  int64_t n_embd = 256, n_head = 4, n_head_kv = 2, head_dim = 64, n_ff = 512, n_layer = 2, n_vocab = 320;
  int64_t n_rot = 0;   // rope.dimension_count written when > 0 (else = head_dim)
  bool write_key_length = false;  // attention.key_length/value_length (needed when head_dim != n_embd / n_head)
  bool neox = false;   // the RoPE layout the architecture implies (for the float forward only)
  bool biases = false;  // attn_q/k/v.bias (qwen2)
  bool qk_norm = false;  // attn_q_norm/attn_k_norm (qwen3)
  float rms_eps = 1e-6f, freq_base = 10000.0f;
  GgmlType t_embd = GgmlType::F32, t_output = GgmlType::F32;
  bool tied = false;   // no output.weight: the output reuses token_embd
  GgmlType t_q = GgmlType::F32, t_k = GgmlType::F32, t_v = GgmlType::F32, t_o = GgmlType::F32;
  GgmlType t_gate = GgmlType::F32, t_up = GgmlType::F32, t_down = GgmlType::F32;
  // Routed experts (qwen3moe) when n_expert > 0: ffn_{gate,up,down}_exps of n_ff_exp rows
  // replace the dense FFN; the router is F32.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  uint64_t seed = 1;
  // Malformations for the error tests.
  std::string omit_tensor;                              // not written
  std::map<std::string, std::vector<uint64_t>> shape_override;  // written with this shape

  friend void PrintTo(const Spec& s, std::ostream* os) { *os << s.name; }  // gtest's name for a parameter

  int64_t n_q() const { return n_head * head_dim; }
  int64_t n_kv() const { return n_head_kv * head_dim; }
  int64_t rot() const { return n_rot > 0 ? n_rot : head_dim; }
  bool quantized() const {
    for (GgmlType t : {t_embd, t_output, t_q, t_k, t_v, t_o, t_gate, t_up, t_down}) {
      if (t != GgmlType::F32 && t != GgmlType::F16) return true;
    }
    return false;
  }
};

// splitmix64: the same numbers from every standard library (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53);
  }

 private:
  uint64_t s_;
};

inline std::vector<uint8_t> encode(GgmlType type, const std::vector<float>& values, int64_t n_cols) {
  const auto row = hearth::ggml_row_bytes(type, static_cast<uint64_t>(n_cols));
  if (!row) throw std::runtime_error("bad row length for type");
  const int64_t n_rows = static_cast<int64_t>(values.size()) / n_cols;
  std::vector<uint8_t> out(*row * static_cast<uint64_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    hearth::quantize_row_ref(type, values.data() + r * n_cols, out.data() + *row * static_cast<uint64_t>(r), n_cols);
  }
  return out;
}

// The model as a GGUF writer, so that tests can still change metadata before to_bytes().
inline hearth::gguf::Writer build_writer(const Spec& s) {
  hearth::gguf::Writer w;
  Rng rng(s.seed);
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "tiny-" + s.name);
  w.set_u32(a + "context_length", 128);
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  if (s.write_key_length) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + "rope.freq_base", s.freq_base);
  if (s.n_rot > 0) w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.n_rot));
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
  }

  // gain scales a weight so that a product with a unit-RMS input has about unit RMS
  // (times gain): uniform(-b, b) has RMS b / sqrt(3).
  auto add = [&](const std::string& name, GgmlType type, int64_t n_cols, int64_t n_rows, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(n_cols * n_rows));
    for (float& x : v) x = rng.uniform(lo, hi);
    if (name == s.omit_tensor) return;
    std::vector<uint64_t> shape = {static_cast<uint64_t>(n_cols), static_cast<uint64_t>(n_rows)};
    if (n_rows == 1) shape.pop_back();
    if (auto it = s.shape_override.find(name); it != s.shape_override.end()) {
      shape = it->second;
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      v.resize(n, 0.5f);
      n_cols = static_cast<int64_t>(shape[0]);
    }
    const std::vector<uint8_t> bytes = encode(type, v, n_cols);
    w.add_tensor(name, type, shape, bytes);
  };
  auto matrix = [&](const std::string& name, GgmlType type, int64_t n_cols, int64_t n_rows, float gain) {
    const float b = gain * std::sqrt(3.0f / static_cast<float>(n_cols));
    add(name, type, n_cols, n_rows, -b, b);
  };
  // A 3-D expert tensor [n_cols, n_rows, n_expert]: expert e's matrix follows expert e-1's.
  auto experts = [&](const std::string& name, GgmlType type, int64_t n_cols, int64_t n_rows, float gain) {
    const float b = gain * std::sqrt(3.0f / static_cast<float>(n_cols));
    std::vector<float> v(static_cast<size_t>(n_cols * n_rows * s.n_expert));
    for (float& x : v) x = rng.uniform(-b, b);
    if (name == s.omit_tensor) return;
    w.add_tensor(name, type,
                 {static_cast<uint64_t>(n_cols), static_cast<uint64_t>(n_rows), static_cast<uint64_t>(s.n_expert)},
                 encode(type, v, n_cols));
  };
  const int64_t E = s.n_embd, Q = s.n_q(), KV = s.n_kv(), F = s.n_ff, D = s.head_dim;
  add("token_embd.weight", s.t_embd, E, s.n_vocab, -1.0f, 1.0f);
  add("output_norm.weight", GgmlType::F32, E, 1, 0.7f, 1.3f);
  // Logits of RMS ~3: top-2 gaps are then large against the engine's rounding noise.
  if (!s.tied) matrix("output.weight", s.t_output, E, s.n_vocab, 3.0f);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", GgmlType::F32, E, 1, 0.7f, 1.3f);
    matrix(p + "attn_q.weight", s.t_q, E, Q, 1.0f);
    matrix(p + "attn_k.weight", s.t_k, E, KV, 1.0f);
    matrix(p + "attn_v.weight", s.t_v, E, KV, 1.0f);
    if (s.biases) {
      add(p + "attn_q.bias", GgmlType::F32, Q, 1, -0.6f, 0.6f);
      add(p + "attn_k.bias", GgmlType::F32, KV, 1, -0.6f, 0.6f);
      add(p + "attn_v.bias", GgmlType::F32, KV, 1, -0.6f, 0.6f);
    }
    if (s.qk_norm) {
      add(p + "attn_q_norm.weight", GgmlType::F32, D, 1, 0.4f, 1.6f);
      add(p + "attn_k_norm.weight", GgmlType::F32, D, 1, 0.4f, 1.6f);
    }
    matrix(p + "attn_output.weight", s.t_o, Q, E, 1.0f);
    add(p + "ffn_norm.weight", GgmlType::F32, E, 1, 0.7f, 1.3f);
    if (s.n_expert > 0) {
      // Router with spread-out logits so the top-k choice is far from ties.
      matrix(p + "ffn_gate_inp.weight", GgmlType::F32, E, s.n_expert, 4.0f);
      experts(p + "ffn_gate_exps.weight", s.t_gate, E, s.n_ff_exp, 1.5f);
      experts(p + "ffn_up_exps.weight", s.t_up, E, s.n_ff_exp, 1.0f);
      experts(p + "ffn_down_exps.weight", s.t_down, s.n_ff_exp, E, 1.0f);
      continue;
    }
    matrix(p + "ffn_gate.weight", s.t_gate, E, F, 1.5f);
    matrix(p + "ffn_up.weight", s.t_up, E, F, 1.0f);
    matrix(p + "ffn_down.weight", s.t_down, F, E, 1.0f);
  }
  return w;
}

// A parsed model and the bytes it lives in.
struct Built {
  std::vector<uint8_t> bytes;
  std::optional<hearth::gguf::File> file;
};

inline std::unique_ptr<Built> parse(const hearth::gguf::Writer& w, const std::string& name) {
  auto b = std::make_unique<Built>();
  b->bytes = w.to_bytes();
  b->file.emplace(hearth::gguf::File::parse(b->bytes.data(), b->bytes.size(), name));
  return b;
}

// The independent forward pass: every weight dequantized to float once (the same
// values the engine multiplies), then all math in double, one position at a time,
// straight from the definitions. Hyper-parameters come from the Spec, not from the
// engine's reader.
class FloatForward {
 public:
  FloatForward(const hearth::gguf::File& f, const Spec& s) : s_(s) {
    embd_ = load(f, "token_embd.weight");
    out_norm_ = load(f, "output_norm.weight");
    output_ = s.tied ? embd_ : load(f, "output.weight");
    for (int64_t l = 0; l < s.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      Layer L;
      L.attn_norm = load(f, p + "attn_norm.weight");
      L.wq = load(f, p + "attn_q.weight");
      L.wk = load(f, p + "attn_k.weight");
      L.wv = load(f, p + "attn_v.weight");
      L.wo = load(f, p + "attn_output.weight");
      if (s.biases) {
        L.bq = load(f, p + "attn_q.bias");
        L.bk = load(f, p + "attn_k.bias");
        L.bv = load(f, p + "attn_v.bias");
      }
      if (s.qk_norm) {
        L.q_norm = load(f, p + "attn_q_norm.weight");
        L.k_norm = load(f, p + "attn_k_norm.weight");
      }
      L.ffn_norm = load(f, p + "ffn_norm.weight");
      if (s.n_expert > 0) {
        L.router = load(f, p + "ffn_gate_inp.weight");
        L.gate_exps = load_experts(f, p + "ffn_gate_exps.weight");
        L.up_exps = load_experts(f, p + "ffn_up_exps.weight");
        L.down_exps = load_experts(f, p + "ffn_down_exps.weight");
        layers_.push_back(std::move(L));
        continue;
      }
      L.gate = load(f, p + "ffn_gate.weight");
      L.up = load(f, p + "ffn_up.weight");
      L.down = load(f, p + "ffn_down.weight");
      layers_.push_back(std::move(L));
    }
  }

  // Logits at every position of `tokens` (causal: position t sees tokens 0..t).
  std::vector<std::vector<double>> logits(const std::vector<int32_t>& tokens) const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t D = s_.head_dim, H = s_.n_head, HKV = s_.n_head_kv;
    std::vector<Vec> x(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) x[t] = row(embd_, tokens[t]);
    for (const Layer& L : layers_) {
      std::vector<Vec> q(n), k(n), v(n);
      for (int64_t t = 0; t < n; ++t) {
        const Vec h = mul(rms_norm(x[t]), L.attn_norm);
        q[t] = matvec(L.wq, h);
        k[t] = matvec(L.wk, h);
        v[t] = matvec(L.wv, h);
        if (s_.biases) {
          q[t] = add(q[t], L.bq.v);
          k[t] = add(k[t], L.bk.v);
          v[t] = add(v[t], L.bv.v);
        }
        for (int64_t hd = 0; hd < H; ++hd) head_norm_rope(q[t], hd, L.q_norm, t);
        for (int64_t hd = 0; hd < HKV; ++hd) head_norm_rope(k[t], hd, L.k_norm, t);
      }
      for (int64_t t = 0; t < n; ++t) {
        Vec attn(static_cast<size_t>(H * D), 0.0);
        for (int64_t hd = 0; hd < H; ++hd) {
          const int64_t kvh = hd / (H / HKV);  // GQA: consecutive query heads share a kv head
          std::vector<double> p(static_cast<size_t>(t + 1));
          double mx = -INFINITY;
          for (int64_t j = 0; j <= t; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += q[t][hd * D + d] * k[j][kvh * D + d];
            p[j] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, p[j]);
          }
          double sum = 0;
          for (double& e : p) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j <= t; ++j) {
            for (int64_t d = 0; d < D; ++d) attn[hd * D + d] += p[j] / sum * v[j][kvh * D + d];
          }
        }
        x[t] = add(x[t], matvec(L.wo, attn));
        const Vec h = mul(rms_norm(x[t]), L.ffn_norm);
        if (s_.n_expert > 0) {
          x[t] = add(x[t], routed_ffn(L, h));
          continue;
        }
        x[t] = add(x[t], swiglu_ffn(L.gate, L.up, L.down, h));
      }
    }
    std::vector<std::vector<double>> out(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) out[t] = matvec(output_, mul(rms_norm(x[t]), out_norm_));
    return out;
  }

 private:
  using Vec = std::vector<double>;
  struct Mat {
    int64_t rows = 0, cols = 0;
    Vec v;  // row-major [rows][cols]
  };
  struct Layer {
    Mat attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm, ffn_norm, gate, up, down;
    Mat router;
    std::vector<Mat> gate_exps, up_exps, down_exps;
  };

  static Vec swiglu_ffn(const Mat& gate, const Mat& up, const Mat& down, const Vec& h) {
    const Vec g = matvec(gate, h), u = matvec(up, h);
    Vec a(g.size());
    for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return matvec(down, a);
  }
  // Softmax router, the n_expert_used most probable experts, their probabilities
  // renormalised to sum to 1 (qwen3moe), and the weighted sum of those experts' FFNs.
  Vec routed_ffn(const Layer& L, const Vec& h) const {
    Vec logits = matvec(L.router, h);
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double& e : logits) sum += (e = std::exp(e - mx));
    std::vector<int64_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    double chosen = 0;
    for (int64_t k = 0; k < s_.n_expert_used; ++k) chosen += logits[order[k]] / sum;
    Vec out(h.size(), 0.0);
    for (int64_t k = 0; k < s_.n_expert_used; ++k) {
      const int64_t e = order[k];
      const double weight = logits[e] / sum / chosen;
      const Vec y = swiglu_ffn(L.gate_exps[e], L.up_exps[e], L.down_exps[e], h);
      for (size_t i = 0; i < out.size(); ++i) out[i] += weight * y[i];
    }
    return out;
  }
  static std::vector<Mat> load_experts(const hearth::gguf::File& f, const std::string& name) {
    const hearth::gguf::TensorInfo* t = f.find_tensor(name);
    if (t == nullptr || t->shape.size() != 3) throw std::runtime_error("tiny: no 3-D tensor " + name);
    const auto cols = static_cast<int64_t>(t->shape[0]), rows = static_cast<int64_t>(t->shape[1]);
    std::vector<float> tmp(static_cast<size_t>(cols * rows * static_cast<int64_t>(t->shape[2])));
    hearth::dequantize_row_ref(t->type, t->data, tmp.data(), static_cast<int64_t>(tmp.size()));
    std::vector<Mat> out;
    for (uint64_t e = 0; e < t->shape[2]; ++e) {
      Mat m;
      m.rows = rows;
      m.cols = cols;
      m.v.assign(tmp.begin() + static_cast<int64_t>(e) * rows * cols,
                 tmp.begin() + static_cast<int64_t>(e + 1) * rows * cols);
      out.push_back(std::move(m));
    }
    return out;
  }

  static Mat load(const hearth::gguf::File& f, const std::string& name) {
    const hearth::gguf::TensorInfo* t = f.find_tensor(name);
    if (t == nullptr) throw std::runtime_error("tiny: no tensor " + name);
    Mat m;
    m.cols = static_cast<int64_t>(t->shape[0]);
    m.rows = t->shape.size() > 1 ? static_cast<int64_t>(t->shape[1]) : 1;
    std::vector<float> tmp(static_cast<size_t>(m.rows * m.cols));
    hearth::dequantize_row_ref(t->type, t->data, tmp.data(), m.rows * m.cols);
    m.v.assign(tmp.begin(), tmp.end());
    return m;
  }
  static Vec row(const Mat& m, int64_t r) { return Vec(m.v.begin() + r * m.cols, m.v.begin() + (r + 1) * m.cols); }
  static Vec matvec(const Mat& m, const Vec& x) {
    Vec y(static_cast<size_t>(m.rows));
    for (int64_t r = 0; r < m.rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < m.cols; ++c) s += m.v[r * m.cols + c] * x[c];
      y[r] = s;
    }
    return y;
  }
  static Vec add(Vec a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  }
  static Vec mul(Vec a, const Mat& w) {
    for (size_t i = 0; i < a.size(); ++i) a[i] *= w.v[i];
    return a;
  }
  Vec rms_norm(const Vec& x) const {
    double ss = 0;
    for (double e : x) ss += e * e;
    const double k = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + s_.rms_eps);
    Vec y(x);
    for (double& e : y) e *= k;
    return y;
  }
  // Head `h` of vec (heads of head_dim, contiguous): per-head RMSNorm with weight `norm`
  // (qwen3; skipped when empty), then rotary embedding at position pos: pair i of the
  // n_rot rotated dims is (2i, 2i+1) in the normal layout, (i, i + n_rot/2) in NeoX; its
  // angle is pos * freq_base^(-2i/n_rot).
  void head_norm_rope(Vec& vec, int64_t h, const Mat& norm, int64_t pos) const {
    const int64_t D = s_.head_dim, R = s_.rot();
    double* v = vec.data() + h * D;
    if (!norm.v.empty()) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += v[d] * v[d];
      const double k = 1.0 / std::sqrt(ss / static_cast<double>(D) + s_.rms_eps);
      for (int64_t d = 0; d < D; ++d) v[d] = v[d] * k * norm.v[d];
    }
    for (int64_t i = 0; i < R / 2; ++i) {
      const double theta = static_cast<double>(pos) * std::pow(static_cast<double>(s_.freq_base),
                                                               -2.0 * static_cast<double>(i) / static_cast<double>(R));
      const int64_t a = s_.neox ? i : 2 * i, b = s_.neox ? i + R / 2 : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
      v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
  }

  Spec s_;
  Mat embd_, out_norm_, output_;
  std::vector<Layer> layers_;
};

}  // namespace tiny

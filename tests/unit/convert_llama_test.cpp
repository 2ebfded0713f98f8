// A tiny llama-family HF folder written by the test (config.json + model.safetensors with
// random f32 values): converted names, llama.cpp's q/k row permutation for `llama` (none
// for qwen2), and the logits of the converted model run through LlamaModel on the CPU
// back-end against a plain double forward computed here from the safetensors values with
// Hugging Face's semantics (rotate-half RoPE on the unpermuted weights).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "format/gguf.h"
#include "model/llama_model.h"
#include "quant/dequant_ref.h"

namespace fs = std::filesystem;
using namespace hearth;

namespace {

constexpr int kH = 32, kHeads = 4, kKv = 2, kHd = 8, kFf = 48, kVocab = 40, kLayers = 2;
using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

void write_safetensors(const std::string& path, const Tensors& ts) {
  nlohmann::json h = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : ts) {
    h[name] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {off, off + t.second.size() * 4}}};
    off += t.second.size() * 4;
  }
  const std::string hdr = h.dump();
  std::ofstream o(path, std::ios::binary);
  const uint64_t n = hdr.size();
  o.write(reinterpret_cast<const char*>(&n), 8);
  o << hdr;
  for (const auto& [name, t] : ts) o.write(reinterpret_cast<const char*>(t.second.data()), t.second.size() * 4);
}

Tensors make_folder(const std::string& dir, const std::string& model_type) {
  fs::create_directories(dir);
  nlohmann::json cfg = {{"model_type", model_type}, {"hidden_size", kH}, {"num_hidden_layers", kLayers},
                        {"num_attention_heads", kHeads}, {"num_key_value_heads", kKv}, {"intermediate_size", kFf},
                        {"vocab_size", kVocab}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
                        {"max_position_embeddings", 128}, {"tie_word_embeddings", false}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 0.3f);
  Tensors ts;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, float base = 0.f) {
    int64_t c = 1;
    for (auto s : shape) c *= s;
    std::vector<float> v(static_cast<size_t>(c));
    for (auto& x : v) x = base + nd(rng);
    ts[n] = {shape, v};
  };
  add("model.embed_tokens.weight", {kVocab, kH});
  add("model.norm.weight", {kH}, 1.f);
  add("lm_head.weight", {kVocab, kH});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {kH}, 1.f);
    add(p + "post_attention_layernorm.weight", {kH}, 1.f);
    add(p + "self_attn.q_proj.weight", {kHeads * kHd, kH});
    add(p + "self_attn.k_proj.weight", {kKv * kHd, kH});
    add(p + "self_attn.v_proj.weight", {kKv * kHd, kH});
    add(p + "self_attn.o_proj.weight", {kH, kHeads * kHd});
    if (model_type == "qwen2") {
      add(p + "self_attn.q_proj.bias", {kHeads * kHd});
      add(p + "self_attn.k_proj.bias", {kKv * kHd});
      add(p + "self_attn.v_proj.bias", {kKv * kHd});
    }
    add(p + "mlp.gate_proj.weight", {kFf, kH});
    add(p + "mlp.up_proj.weight", {kFf, kH});
    add(p + "mlp.down_proj.weight", {kH, kFf});
  }
  write_safetensors(dir + "/model.safetensors", ts);
  return ts;
}

using Vec = std::vector<double>;
Vec matvec(const std::vector<float>& w, int rows, int cols, const Vec& x) {
  Vec y(rows, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) y[r] += double(w[r * cols + c]) * x[c];
  return y;
}
Vec rms(const Vec& x, const std::vector<float>& w) {
  double s = 0;
  for (double v : x) s += v * v;
  const double k = 1.0 / std::sqrt(s / x.size() + 1e-5);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * k * w[i];
  return y;
}
void rope_half(Vec& v, int n_heads, int pos) {  // HF rotate_half
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < kHd / 2; ++i) {
      const double f = std::pow(10000.0, -2.0 * i / kHd), a = pos * f;
      double& x0 = v[h * kHd + i];
      double& x1 = v[h * kHd + i + kHd / 2];
      const double y0 = x0 * std::cos(a) - x1 * std::sin(a), y1 = x1 * std::cos(a) + x0 * std::sin(a);
      x0 = y0, x1 = y1;
    }
}

// Logits of every position, HF semantics, in double.
std::vector<Vec> reference(Tensors& ts, const std::vector<int32_t>& toks, bool bias) {
  auto W = [&](const std::string& n) -> std::vector<float>& { return ts.at(n).second; };
  const int T = static_cast<int>(toks.size());
  std::vector<Vec> x(T, Vec(kH));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < kH; ++i) x[t][i] = W("model.embed_tokens.weight")[toks[t] * kH + i];
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<Vec> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      Vec h = rms(x[t], W(p + "input_layernorm.weight"));
      q[t] = matvec(W(p + "self_attn.q_proj.weight"), kHeads * kHd, kH, h);
      k[t] = matvec(W(p + "self_attn.k_proj.weight"), kKv * kHd, kH, h);
      v[t] = matvec(W(p + "self_attn.v_proj.weight"), kKv * kHd, kH, h);
      if (bias) {
        for (int i = 0; i < kHeads * kHd; ++i) q[t][i] += W(p + "self_attn.q_proj.bias")[i];
        for (int i = 0; i < kKv * kHd; ++i) k[t][i] += W(p + "self_attn.k_proj.bias")[i], v[t][i] += W(p + "self_attn.v_proj.bias")[i];
      }
      rope_half(q[t], kHeads, t);
      rope_half(k[t], kKv, t);
    }
    for (int t = 0; t < T; ++t) {
      Vec att(kHeads * kHd, 0.0);
      for (int h = 0; h < kHeads; ++h) {
        const int g = h / (kHeads / kKv);
        std::vector<double> s(t + 1);
        double mx = -1e300, sum = 0;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int i = 0; i < kHd; ++i) d += q[t][h * kHd + i] * k[u][g * kHd + i];
          s[u] = d / std::sqrt(double(kHd));
          mx = std::max(mx, s[u]);
        }
        for (int u = 0; u <= t; ++u) sum += s[u] = std::exp(s[u] - mx);
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < kHd; ++i) att[h * kHd + i] += s[u] / sum * v[u][g * kHd + i];
      }
      Vec o = matvec(W(p + "self_attn.o_proj.weight"), kH, kHeads * kHd, att);
      for (int i = 0; i < kH; ++i) x[t][i] += o[i];
      Vec h2 = rms(x[t], W(p + "post_attention_layernorm.weight"));
      Vec g = matvec(W(p + "mlp.gate_proj.weight"), kFf, kH, h2), u = matvec(W(p + "mlp.up_proj.weight"), kFf, kH, h2);
      for (int i = 0; i < kFf; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      Vec d = matvec(W(p + "mlp.down_proj.weight"), kH, kFf, g);
      for (int i = 0; i < kH; ++i) x[t][i] += d[i];
    }
  }
  std::vector<Vec> out;
  for (int t = 0; t < T; ++t) out.push_back(matvec(W("lm_head.weight"), kVocab, kH, rms(x[t], W("model.norm.weight"))));
  return out;
}

class ConvertLlama : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ConvertLlama, NamesPermutationAndLogitsMatchADoubleReference) {
  const std::string mt = GetParam();
  const std::string dir = (fs::temp_directory_path() / ("hearth_convert_" + mt)).string();
  fs::remove_all(dir);
  Tensors ts = make_folder(dir, mt);
  gguf::File f = convert::open_model(dir);
  EXPECT_EQ(f.get_string("general.architecture"), mt);
  for (const char* n : {"token_embd.weight", "output.weight", "output_norm.weight", "blk.1.attn_q.weight", "blk.1.attn_k.weight",
                        "blk.1.attn_v.weight", "blk.1.attn_output.weight", "blk.1.attn_norm.weight", "blk.1.ffn_norm.weight",
                        "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight"})
    EXPECT_NE(f.find_tensor(n), nullptr) << n;
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias") != nullptr, mt == "qwen2");
  // q rows: llama permutes (row h*hd + 2i + j <- h*hd + j*hd/2 + i), qwen2 does not.
  const auto* q = f.find_tensor("blk.0.attn_q.weight");
  std::vector<float> gq(q->n_elements());
  dequantize_row_ref(q->type, q->data, gq.data(), static_cast<int64_t>(gq.size()));
  const auto& hq = ts.at("model.layers.0.self_attn.q_proj.weight").second;
  for (int h = 0; h < kHeads; ++h)
    for (int i = 0; i < kHd / 2; ++i)
      for (int j = 0; j < 2; ++j) {
        const int dst = h * kHd + 2 * i + j, src = mt == "llama" ? h * kHd + j * kHd / 2 + i : dst;
        ASSERT_EQ(gq[dst * kH + 3], hq[src * kH + 3]) << h << " " << i << " " << j;
      }

  cpu::CpuBackend be(1);
  model::LlamaModel m(f, be);
  model::KvCache cache(m.backend(), m.hparams(), 64);
  const std::vector<int32_t> toks = {3, 17, 0, 39, 8, 8, 21};
  const auto got = m.forward(cache, toks, true);
  const auto want = reference(ts, toks, mt == "qwen2");
  double max_diff = 0, max_abs = 0;
  for (size_t t = 0; t < toks.size(); ++t)
    for (int i = 0; i < kVocab; ++i) {
      max_diff = std::max(max_diff, std::fabs(got[t * kVocab + i] - want[t][i]));
      max_abs = std::max(max_abs, std::fabs(want[t][i]));
    }
  std::cout << mt << ": max |logit diff| " << max_diff << " (max |logit| " << max_abs << ")\n";
  EXPECT_LT(max_diff, 1e-3 * std::max(1.0, max_abs));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, ConvertLlama, ::testing::Values("llama", "qwen2"));

// Qwen3.5's multi-token-prediction block (model/hybrid_mtp.cpp), on the dense Qwen3.5
// fixture (tests/data/qwen35/dense) with a random MTP block added the way llama.cpp lays it
// out in GGUF (block_count + 1, {arch}.nextn_predict_layers = 1, blk.8.nextn.* beside a
// full-attention decoder layer blk.8.*):
//   - with the block the file is the same model: its logits equal the file's without it,
//     bit for bit, and its KV pool gains a layer only once the block is on;
//   - forward_mtp equals a plain f32 reference of the block written here from the file's
//     tensors (the norms, fc over [embedding of the next token, hidden state], gated
//     attention with q / k norms and partial NeoX RoPE over the block's own KV, SwiGLU,
//     the head norm and the tied output), fed the model's own final hidden states
//     (copy_hidden): a first pass of several rows, a later pass that attends to it, and a
//     chained draft on the block's own output state;
//   - enable_mtp on a file without the block fails naming the file;
//   - on the MoE fixture (the block's FFN routed and shared experts) the model is the same
//     with the block on, and its passes give finite logits that follow their inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/causal_lm.h"
#include "model/kv_cache.h"

namespace model = hearth::model;
namespace gguf = hearth::gguf;
using hearth::GgmlType;

namespace {

// A row-major f32 matrix of the file ([rows][cols]; GGUF shape {cols, rows}).
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  const float* row(int64_t r) const { return v.data() + r * cols; }
};

Mat tensor(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr || t->type != GgmlType::F32) throw std::runtime_error("no f32 tensor " + name);
  Mat m;
  m.cols = static_cast<int64_t>(t->shape[0]);
  m.rows = t->shape.size() > 1 ? static_cast<int64_t>(t->shape[1]) : 1;
  const auto* p = reinterpret_cast<const float*>(t->data);
  m.v.assign(p, p + m.rows * m.cols);
  return m;
}

// A fixture (tests/data/qwen35/NAME) plus a random MTP block: blk.{n_layer} holds a decoder
// layer shaped as the fixture's first full-attention layer (blk.3: dense FFN, or experts and
// a shared expert) and the nextn tensors; values normal * 0.3, norms 1 + normal * 0.3.
struct WithMtp {
  gguf::File base;
  std::shared_ptr<const std::vector<uint8_t>> bytes;
  std::unique_ptr<gguf::File> file;

  explicit WithMtp(const std::string& name = "dense")
      : base(hearth::convert::open_model(std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/" + name)) {
    const std::string a = base.get_string("general.architecture") + ".";
    const int64_t n_layer = base.get_int(a + "block_count");
    const auto e = static_cast<uint64_t>(base.get_int(a + "embedding_length"));
    gguf::Writer w;
    for (const gguf::KeyValue& kv : base.metadata()) w.set_value(kv.key, kv.value);
    w.remove(a + "block_count");
    w.set_u32(a + "block_count", static_cast<uint32_t>(n_layer + 1));
    w.set_u32(a + "nextn_predict_layers", 1);
    for (const gguf::TensorInfo& t : base.tensors()) w.add_tensor(t.name, t.type, t.shape, {t.data, t.n_bytes});
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.3f);
    auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
      const bool norm = name.find("norm") != std::string::npos;
      uint64_t n = 1;
      for (uint64_t s : shape) n *= s;
      std::vector<float> v(n);
      for (float& x : v) x = (norm ? 1.0f : 0.0f) + nd(rng);
      w.add_tensor_f32(name, shape, v);
    };
    const std::string p = "blk." + std::to_string(n_layer) + ".";
    for (const gguf::TensorInfo& t : base.tensors()) {
      if (t.name.rfind("blk.3.", 0) == 0) add(p + t.name.substr(6), t.shape);
    }
    add(p + "nextn.eh_proj.weight", {2 * e, e});
    add(p + "nextn.enorm.weight", {e});
    add(p + "nextn.hnorm.weight", {e});
    add(p + "nextn.shared_head_norm.weight", {e});
    bytes = std::make_shared<const std::vector<uint8_t>>(std::move(w).take_bytes());
    file = std::make_unique<gguf::File>(gguf::File::parse_owned(bytes, name + "+mtp"));
  }
};

std::vector<float> matvec(const Mat& m, const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < m.cols; ++c) s += static_cast<double>(m.row(r)[c]) * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = static_cast<float>(s);
  }
  return y;
}

std::vector<float> rms(const float* x, int64_t n, const float* w, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = static_cast<float>(x[i] * inv * w[i]);
  return y;
}

// The MTP block by the book, one position at a time, keeping its own K and V.
struct Reference {
  const model::Hparams& hp;
  Mat embd, fc, enorm, hnorm, head_norm, attn_norm, post_norm, wq, wk, wv, wo, qn, kn, gate, up, down;
  std::vector<std::vector<float>> K, V;  // per position, [n_head_kv * head_dim]
  std::vector<float> h_out;              // the last position's head-normed state

  Reference(const gguf::File& f, const model::Hparams& h) : hp(h) {
    const std::string p = "blk." + std::to_string(hp.n_layer) + ".";
    embd = tensor(f, "token_embd.weight");
    fc = tensor(f, p + "nextn.eh_proj.weight");
    enorm = tensor(f, p + "nextn.enorm.weight");
    hnorm = tensor(f, p + "nextn.hnorm.weight");
    head_norm = tensor(f, p + "nextn.shared_head_norm.weight");
    attn_norm = tensor(f, p + "attn_norm.weight");
    post_norm = tensor(f, p + "post_attention_norm.weight");
    wq = tensor(f, p + "attn_q.weight");
    wk = tensor(f, p + "attn_k.weight");
    wv = tensor(f, p + "attn_v.weight");
    wo = tensor(f, p + "attn_output.weight");
    qn = tensor(f, p + "attn_q_norm.weight");
    kn = tensor(f, p + "attn_k_norm.weight");
    gate = tensor(f, p + "ffn_gate.weight");
    up = tensor(f, p + "ffn_up.weight");
    down = tensor(f, p + "ffn_down.weight");
  }

  void rope(float* x, int64_t pos) const {
    const int64_t half = hp.n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double th = static_cast<double>(pos) * std::pow(static_cast<double>(hp.rope_freq_base),
                                                            -2.0 * static_cast<double>(i) / static_cast<double>(hp.n_rot));
      const double c = std::cos(th), s = std::sin(th), a = x[i], b = x[i + half];
      x[i] = static_cast<float>(a * c - b * s);
      x[i + half] = static_cast<float>(a * s + b * c);
    }
  }

  // Position pos (== the positions seen so far), the token after it and its hidden state:
  // the logits of the token after that.
  std::vector<float> step(int64_t pos, int32_t token, const float* h) {
    const int64_t E = hp.n_embd, D = hp.head_dim, NH = hp.n_head, NKV = hp.n_head_kv;
    const float eps = hp.rms_eps;
    EXPECT_EQ(static_cast<int64_t>(K.size()), pos);
    std::vector<float> cat = rms(embd.row(token), E, enorm.v.data(), eps);
    const std::vector<float> hh = rms(h, E, hnorm.v.data(), eps);
    cat.insert(cat.end(), hh.begin(), hh.end());
    std::vector<float> x = matvec(fc, cat);
    const std::vector<float> a = rms(x.data(), E, attn_norm.v.data(), eps);
    const std::vector<float> qg = matvec(wq, a);
    std::vector<float> k = matvec(wk, a), v = matvec(wv, a);
    for (int64_t g = 0; g < NKV; ++g) {
      const std::vector<float> kk = rms(k.data() + g * D, D, kn.v.data(), eps);
      std::copy(kk.begin(), kk.end(), k.begin() + g * D);
      rope(k.data() + g * D, pos);
    }
    K.push_back(k);
    V.push_back(v);
    std::vector<float> att(static_cast<size_t>(NH * D));
    for (int64_t hd = 0; hd < NH; ++hd) {
      std::vector<float> q = rms(qg.data() + hd * 2 * D, D, qn.v.data(), eps);
      rope(q.data(), pos);
      const int64_t g = hd / (NH / NKV);
      std::vector<double> w(static_cast<size_t>(pos + 1));
      double mx = -1e300, sum = 0;
      for (int64_t t = 0; t <= pos; ++t) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += static_cast<double>(q[d]) * K[t][g * D + d];
        w[t] = s / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, w[t]);
      }
      for (double& s : w) sum += (s = std::exp(s - mx));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t t = 0; t <= pos; ++t) o += w[t] / sum * V[t][g * D + d];
        const double gt = qg[hd * 2 * D + D + d];
        att[hd * D + d] = static_cast<float>(o / (1.0 + std::exp(-gt)));
      }
    }
    const std::vector<float> o = matvec(wo, att);
    for (int64_t i = 0; i < E; ++i) x[i] += o[i];
    const std::vector<float> f = rms(x.data(), E, post_norm.v.data(), eps);
    std::vector<float> g = matvec(gate, f), u = matvec(up, f);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(g[i] / (1.0 + std::exp(-g[i])) * u[i]);
    const std::vector<float> dn = matvec(down, g);
    for (int64_t i = 0; i < E; ++i) x[i] += dn[i];
    h_out = rms(x.data(), E, head_norm.v.data(), eps);
    return matvec(embd, h_out);  // tied output
  }
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0, worst = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  EXPECT_LE(worst, 1e-4 * scale + 1e-5) << what << ": largest difference " << worst << " of values up to " << scale;
}

}  // namespace

TEST(ModelMtp, FileWithTheBlockIsTheSameModel) {
  WithMtp f;
  hearth::cpu::CpuBackend be(2);
  const auto plain = model::load_causal_lm(f.base, be);
  const auto with = model::load_causal_lm(*f.file, be);
  EXPECT_FALSE(plain->has_mtp());
  EXPECT_TRUE(with->has_mtp());
  EXPECT_EQ(with->hparams().n_layer, plain->hparams().n_layer);
  EXPECT_EQ(with->hparams().n_nextn, 1);
  const std::vector<int32_t> prompt = {5, 17, 200, 42, 9, 100, 7};
  model::KvCache c1(be, plain->hparams(), 32), c2(be, with->hparams(), 32);
  const auto a = plain->forward(c1, prompt, true), b = with->forward(c2, prompt, true);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  const int64_t kv = with->hparams().n_kv_layers();
  with->enable_mtp();
  EXPECT_EQ(with->hparams().n_kv_layers(), kv + 1);
  try {
    plain->enable_mtp();
    ADD_FAILURE() << "enable_mtp on a file without the block";
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no multi-token-prediction block"), std::string::npos) << e.what();
  }
}

TEST(ModelMtp, PassesEqualThePlainReference) {
  WithMtp f;
  hearth::cpu::CpuBackend be(2);
  const auto m = model::load_causal_lm(*f.file, be);
  m->enable_mtp();
  const model::Hparams& hp = m->hparams();
  const int64_t E = hp.n_embd;
  const std::vector<int32_t> prompt = {5, 17, 200, 42, 9, 100, 7, 64};
  model::KvCache cache(be, hp, 32, hearth::ops::KvType::F32);
  m->forward(cache, prompt, false);
  std::vector<float> h(static_cast<size_t>(8 * E));
  m->copy_hidden(model::MtpSeq::From::kMain, 0, 8, h.data());
  Reference ref(*f.file, hp);
  std::vector<float> want;
  for (int64_t p = 0; p < 5; ++p) want = ref.step(p, prompt[p + 1], h.data() + p * E);
  std::vector<float> got;
  // Positions 0 .. 4 in one pass (their next tokens, the model's states), the last row's logits.
  using From = model::MtpSeq::From;
  m->forward_mtp(cache.pool(), {{&cache.seq(), 0, prompt.data() + 1, 5, From::kMain, 0, true, false}}, got);
  expect_close(got, want, "first pass, position 4");
  // Positions 5 and 6: attending to the first pass's keys.
  for (int64_t p = 5; p < 7; ++p) want = ref.step(p, prompt[p + 1], h.data() + p * E);
  m->forward_mtp(cache.pool(), {{&cache.seq(), 5, prompt.data() + 6, 2, From::kMain, 5, true, false}}, got);
  expect_close(got, want, "second pass, position 6");
  std::vector<float> state(static_cast<size_t>(E));
  m->copy_hidden(From::kMtp, 1, 1, state.data());
  expect_close(state, ref.h_out, "the block's output state at position 6");
  // A chained draft: position 7, a token, the block's own state at position 6; first only
  // its argmax (as a draft asks for it), then (the second pass again: its states) the logits.
  const int32_t drafted = 123;
  want = ref.step(7, drafted, ref.h_out.data());
  const int32_t best = static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
  m->forward_mtp(cache.pool(), {{&cache.seq(), 7, &drafted, 1, From::kMtp, 1, true, true}}, got);
  if (!m->picks().empty()) {
    EXPECT_EQ(m->picks()[0].argmax, best);
  } else {
    EXPECT_EQ(static_cast<int32_t>(std::max_element(got.begin(), got.end()) - got.begin()), best);
  }
  m->forward_mtp(cache.pool(), {{&cache.seq(), 5, prompt.data() + 6, 2, From::kMain, 5, false, false}}, got);
  m->forward_mtp(cache.pool(), {{&cache.seq(), 7, &drafted, 1, From::kMtp, 1, true, false}}, got);
  expect_close(got, want, "chained draft, position 7");
}

TEST(ModelMtp, MoeBlockRunsBesideTheSameModel) {
  // A Qwen3.5-MoE fixture's MTP block (routed and shared experts in its FFN): the model is the
  // same with it, and its passes give finite logits that follow its inputs.
  WithMtp f("moe");
  hearth::cpu::CpuBackend be(2);
  const auto plain = model::load_causal_lm(f.base, be);
  const auto m = model::load_causal_lm(*f.file, be);
  const std::vector<int32_t> prompt = {5, 17, 200, 42, 9, 100};
  model::KvCache c1(be, plain->hparams(), 32);
  const auto a = plain->forward(c1, prompt, true);
  m->enable_mtp();
  model::KvCache c2(be, m->hparams(), 32, hearth::ops::KvType::F32);
  std::vector<float> b;
  m->forward(c2, prompt, true, b);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  using From = model::MtpSeq::From;
  std::vector<float> x, y;
  m->forward_mtp(c2.pool(), {{&c2.seq(), 0, prompt.data() + 1, 5, From::kMain, 0, true, false}}, x);
  ASSERT_EQ(static_cast<int64_t>(x.size()), m->hparams().n_vocab);
  for (float v : x) ASSERT_TRUE(std::isfinite(v));
  const int32_t other = 77;
  m->forward_mtp(c2.pool(), {{&c2.seq(), 4, &other, 1, From::kMain, 4, true, false}}, y);
  EXPECT_NE(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
}

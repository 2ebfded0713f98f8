#include "model/llama_model.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/batch_layout.h"
#include "model/weights.h"

namespace hearth::model {
ops::WeightView LlamaModel::bind(const std::string& name, std::vector<uint64_t> expect, bool optional_ok,
                                 bool* found) {
  return bind_tensor(file_, backend_, name, expect, optional_ok, found);
}

LlamaModel::LlamaModel(const gguf::File& file, ops::Backend& backend)
    : file_(file), backend_(backend), hp_(read_hparams(file)) {
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() < 2) {
    fail(ErrorKind::kInvalidInput, "model", file.name() + ": tensor 'token_embd.weight' is missing or not 2-D");
  }
  hp_.n_vocab = static_cast<int64_t>(embd->shape[1]);
  const auto E = static_cast<uint64_t>(hp_.n_embd), V = static_cast<uint64_t>(hp_.n_vocab);
  const auto Q = static_cast<uint64_t>(hp_.n_embd_q()), KV = static_cast<uint64_t>(hp_.n_embd_kv());
  const auto D = static_cast<uint64_t>(hp_.head_dim);
  tok_embd_ = bind("token_embd.weight", {E, V});
  output_norm_ = bind("output_norm.weight", {E});
  bool has_output = false;
  output_ = bind("output.weight", {E, V}, true, &has_output);
  if (!has_output) output_ = tok_embd_;  // tied embeddings
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = bind(p + "attn_norm.weight", {E});
    w.wq = bind(p + "attn_q.weight", {E, Q});
    w.wk = bind(p + "attn_k.weight", {E, KV});
    w.wv = bind(p + "attn_v.weight", {E, KV});
    w.wo = bind(p + "attn_output.weight", {Q, E});
    bool found = false;
    if (auto b = bind(p + "attn_q.bias", {Q}, true, &found); found) w.bq = b;
    if (auto b = bind(p + "attn_k.bias", {KV}, true, &found); found) w.bk = b;
    if (auto b = bind(p + "attn_v.bias", {KV}, true, &found); found) w.bv = b;
    if (hp_.arch.qk_norm) {
      w.q_norm = bind(p + "attn_q_norm.weight", {D});
      w.k_norm = bind(p + "attn_k_norm.weight", {D});
    }
    w.ffn_norm = bind(p + "ffn_norm.weight", {E});
    if (hp_.arch.moe) {
      w.moe = bind_moe(file, backend_, p, moe_params());
      layers_.push_back(std::move(w));
      continue;
    }
    const gguf::TensorInfo* gate = file.find_tensor(p + "ffn_gate.weight");
    if (hp_.n_ff == 0 && gate != nullptr && gate->shape.size() >= 2) hp_.n_ff = static_cast<int64_t>(gate->shape[1]);
    const auto F = static_cast<uint64_t>(hp_.n_ff);
    w.ffn_gate = bind(p + "ffn_gate.weight", {E, F});
    w.ffn_up = bind(p + "ffn_up.weight", {E, F});
    w.ffn_down = bind(p + "ffn_down.weight", {F, E});
    layers_.push_back(std::move(w));
  }
}

MoeParams LlamaModel::moe_params() const {
  return MoeParams{hp_.n_expert, hp_.n_expert_used, hp_.n_embd, hp_.n_ff_exp, hp_.expert_weights_norm};
}

void LlamaModel::reserve_scratch(int64_t n, int64_t logits_rows) {
  Scratch& s = scratch_;
  ops::Backend& be = backend_;
  if (n > s.n_tokens) {
    const int64_t E = hp_.n_embd, Q = hp_.n_embd_q(), KV = hp_.n_embd_kv(), F = hp_.n_ff;
    // Free the old buffers first so that peak memory does not hold both sizes.
    for (auto* b : {&s.x, &s.cur, &s.q, &s.k, &s.v, &s.attn, &s.gate, &s.up, &s.moe_out}) b->reset();
    s.x = be.alloc(n * E);
    s.cur = be.alloc(n * E);
    s.q = be.alloc(n * Q);
    s.k = be.alloc(n * KV);
    s.v = be.alloc(n * KV);
    s.attn = be.alloc(n * Q);
    if (F > 0) {
      s.gate = be.alloc(n * F);
      s.up = be.alloc(n * F);
    }
    if (hp_.arch.moe) s.moe_out = be.alloc(n * E);
    s.n_tokens = n;
  }
  reserve_logits(be, s.logits, s.logits_rows, logits_rows, hp_.n_vocab);
}

void LlamaModel::run(KvPool& pool, std::vector<float>& out) {
  Scratch& s = scratch_;
  const BatchLayout& lay = lay_;
  const auto n = lay.n_tokens();
  const auto rows = static_cast<int64_t>(lay.out_rows.size());
  const int64_t E = hp_.n_embd;
  ops::Backend& be = backend_;
  reserve_scratch(n, rows);
  ops::Buffer *x = s.x.get(), *cur = s.cur.get(), *q = s.q.get(), *k = s.k.get(), *v = s.v.get(),
              *attn = s.attn.get(), *gate = s.gate.get(), *up = s.up.get(), *moe_out = s.moe_out.get();
  const ops::RopeParams rope{hp_.n_rot, hp_.rope_freq_base, hp_.rope_freq_scale, hp_.arch.rope_neox};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
  const int64_t n_seqs = lay.desc.n_seqs();

  be.get_rows(tok_embd_, lay.desc.tokens(), n, x->data());
  be.rms_norm(x->data(), layers_[0].attn_norm, n, E, hp_.rms_eps, cur->data());
  // The residual add ending a layer and the next layer's first norm in one op.
  auto add_then_next_norm = [&](int64_t l, const float* y) {
    if (l + 1 < hp_.n_layer) {
      be.add_rms_norm(x->data(), y, layers_[l + 1].attn_norm, n, E, hp_.rms_eps, cur->data());
    } else {
      be.add(x->data(), y, n * E);
    }
  };
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const LayerWeights& w = layers_[l];
    const ops::KvLayer kv = pool.layer(l);
    {
      const ops::WeightView* ws[] = {&w.wq, &w.wk, &w.wv};
      float* ys[] = {q->data(), k->data(), v->data()};
      be.matmul_multi(ws, 3, cur->data(), n, ys);
    }
    if (w.bq) be.add_bias(q->data(), *w.bq, n);
    if (w.bk) be.add_bias(k->data(), *w.bk, n);
    if (w.bv) be.add_bias(v->data(), *w.bv, n);
    if (w.q_norm) be.rms_norm(q->data(), *w.q_norm, n * hp_.n_head, hp_.head_dim, hp_.rms_eps, q->data());
    if (w.k_norm) be.rms_norm(k->data(), *w.k_norm, n * hp_.n_head_kv, hp_.head_dim, hp_.rms_eps, k->data());
    be.rope_store_kv(q->data(), k->data(), v->data(), n, hp_.n_head, hp_.n_head_kv, hp_.head_dim,
                     lay.desc.positions(), rope, lay.desc.slots(), kv);
    be.attention(q->data(), kv, lay.desc.attn_seqs(), n_seqs, hp_.n_head, hp_.n_head_kv, hp_.head_dim, scale,
                 attn->data());
    be.matmul(w.wo, attn->data(), n, cur->data());
    be.add_rms_norm(x->data(), cur->data(), w.ffn_norm, n, E, hp_.rms_eps, cur->data());
    if (w.moe) {
      moe_ffn(be, *w.moe, moe_params(), cur->data(), n, moe_out->data());
      add_then_next_norm(l, moe_out->data());
      continue;
    }
    be.matmul_swiglu(w.ffn_gate, w.ffn_up, cur->data(), n, gate->data(), up->data());
    be.matmul(w.ffn_down, gate->data(), n, cur->data());
    add_then_next_norm(l, cur->data());
  }
  output_logits(be, lay_, x->data(), cur->data(), output_norm_, output_, hp_.rms_eps, E, hp_.n_vocab, s.logits.get(), out);
}

}  // namespace hearth::model

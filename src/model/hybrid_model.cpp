#include "model/hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"

namespace hearth::model {

using U = std::vector<uint64_t>;

HybridModel::HybridModel(const gguf::File& file, ops::Backend& backend)
    : file_(file), backend_(backend), hp_(read_hparams(file)) {
  lay_.set_embd_width(hp_.n_embd);
  const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr || embd->shape.size() < 2) {
    fail(ErrorKind::kInvalidInput, "model", file.name() + ": tensor 'token_embd.weight' is missing or not 2-D");
  }
  hp_.n_vocab = static_cast<int64_t>(embd->shape[1]);
  const auto E = static_cast<uint64_t>(hp_.n_embd), V = static_cast<uint64_t>(hp_.n_vocab);
  tok_embd_ = bind_tensor(file, backend, "token_embd.weight", {E, V});
  output_norm_ = owned_.f32(file, backend, "output_norm.weight", {E});
  bool has_output = false;
  output_ = bind_tensor(file, backend, "output.weight", {E, V}, true, &has_output);
  if (!has_output) output_ = tok_embd_;
  int64_t kv = 0, rec = 0;
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer L;
    L.attn_norm = owned_.f32(file, backend, p + "attn_norm.weight", {E});
    L.post_norm = owned_.f32(file, backend, p + "post_attention_norm.weight", {E});
    L.recurrent = hp_.is_recurrent(l);
    L.index = L.recurrent ? rec++ : kv++;
    if (L.recurrent) {
      bind_gdn(p, L.gdn);
    } else {
      bind_attn(p, L.attn);
    }
    bind_ffn(p, L.ffn);
    layers_.push_back(std::move(L));
  }
}

void HybridModel::bind_gdn(const std::string& p, Gdn& g) {
  const ops::GdnShape& sh = hp_.gdn;
  const auto E = static_cast<uint64_t>(hp_.n_embd), C = static_cast<uint64_t>(sh.conv_channels()),
             VD = static_cast<uint64_t>(sh.value_dim()), HV = static_cast<uint64_t>(sh.n_v_heads),
             K = static_cast<uint64_t>(sh.conv_kernel), DV = static_cast<uint64_t>(sh.d_v);
  ops::Backend& be = backend_;
  g.qkv = bind_tensor(file_, be, p + "attn_qkv.weight", {E, C});
  g.z = bind_tensor(file_, be, p + "attn_gate.weight", {E, VD});
  bool fused = false;
  const ops::WeightView ba = tensor_view(file_, p + "ssm_ba.weight", {E, 2 * HV}, true, &fused);
  if (fused) {
    // qwen3next: rows per key head g are [b (r rows), a (r rows)].
    const int64_t r = sh.n_v_heads / sh.n_k_heads;
    std::vector<int64_t> rb, ra;
    for (int64_t kh = 0; kh < sh.n_k_heads; ++kh) {
      for (int64_t t = 0; t < r; ++t) {
        rb.push_back(kh * 2 * r + t);
        ra.push_back(kh * 2 * r + r + t);
      }
    }
    g.beta = owned_.rows(be, ba, rb, p + "ssm_ba.weight[beta]");
    g.alpha = owned_.rows(be, ba, ra, p + "ssm_ba.weight[alpha]");
    release_mapped_pages(ba.data, static_cast<size_t>(ba.n_rows) * ba.row_bytes);
  } else {
    g.beta = bind_tensor(file_, be, p + "ssm_beta.weight", {E, HV});
    g.alpha = bind_tensor(file_, be, p + "ssm_alpha.weight", {E, HV});
  }
  g.out = bind_tensor(file_, be, p + "ssm_out.weight", {VD, E});
  g.conv = owned_.f32(file_, be, p + "ssm_conv1d.weight", {K, C});
  g.dt = owned_.f32(file_, be, p + "ssm_dt.bias", {HV});
  g.a = owned_.f32(file_, be, p + "ssm_a", {HV});
  g.norm = owned_.f32(file_, be, p + "ssm_norm.weight", {DV});
}

void HybridModel::bind_attn(const std::string& p, Attn& a) {
  const auto E = static_cast<uint64_t>(hp_.n_embd), Q = static_cast<uint64_t>(hp_.n_embd_q()),
             KV = static_cast<uint64_t>(hp_.n_embd_kv()), D = static_cast<uint64_t>(hp_.head_dim);
  ops::Backend& be = backend_;
  // The q projection holds, per head, head_dim query rows then head_dim gate rows.
  const ops::WeightView qg = tensor_view(file_, p + "attn_q.weight", {E, 2 * Q});
  std::vector<int64_t> rq, rg;
  for (int64_t h = 0; h < hp_.n_head; ++h) {
    for (int64_t i = 0; i < hp_.head_dim; ++i) {
      rq.push_back(h * 2 * hp_.head_dim + i);
      rg.push_back(h * 2 * hp_.head_dim + hp_.head_dim + i);
    }
  }
  a.wq = owned_.rows(be, qg, rq, p + "attn_q.weight[query]");
  a.wgate = owned_.rows(be, qg, rg, p + "attn_q.weight[gate]");
  release_mapped_pages(qg.data, static_cast<size_t>(qg.n_rows) * qg.row_bytes);  // only the copies are read
  a.wk = bind_tensor(file_, be, p + "attn_k.weight", {E, KV});
  a.wv = bind_tensor(file_, be, p + "attn_v.weight", {E, KV});
  a.wo = bind_tensor(file_, be, p + "attn_output.weight", {Q, E});
  a.q_norm = owned_.f32(file_, be, p + "attn_q_norm.weight", {D});
  a.k_norm = owned_.f32(file_, be, p + "attn_k_norm.weight", {D});
}

void HybridModel::bind_ffn(const std::string& p, Ffn& f) {
  const auto E = static_cast<uint64_t>(hp_.n_embd);
  ops::Backend& be = backend_;
  if (!hp_.arch.moe) {
    const gguf::TensorInfo* gate = file_.find_tensor(p + "ffn_gate.weight");
    if (hp_.n_ff == 0 && gate != nullptr && gate->shape.size() >= 2) hp_.n_ff = static_cast<int64_t>(gate->shape[1]);
    const auto F = static_cast<uint64_t>(hp_.n_ff);
    f.gate = bind_tensor(file_, be, p + "ffn_gate.weight", {E, F});
    f.up = bind_tensor(file_, be, p + "ffn_up.weight", {E, F});
    f.down = bind_tensor(file_, be, p + "ffn_down.weight", {F, E});
    n_ff_max_ = std::max(n_ff_max_, hp_.n_ff);
    return;
  }
  f.moe = bind_moe(file_, be, p, moe_params());
  bool found = false;
  if (hp_.n_ff_shexp == 0) {
    if (const gguf::TensorInfo* t = file_.find_tensor(p + "ffn_gate_shexp.weight"); t && t->shape.size() >= 2) {
      hp_.n_ff_shexp = static_cast<int64_t>(t->shape[1]);
    }
  }
  if (hp_.n_ff_shexp > 0) {
    const auto FS = static_cast<uint64_t>(hp_.n_ff_shexp);
    f.gate = bind_tensor(file_, be, p + "ffn_gate_shexp.weight", {E, FS});
    f.up = bind_tensor(file_, be, p + "ffn_up_shexp.weight", {E, FS});
    f.down = bind_tensor(file_, be, p + "ffn_down_shexp.weight", {FS, E}, false, &found);
    n_ff_max_ = std::max(n_ff_max_, hp_.n_ff_shexp);
    if (file_.find_tensor(p + "ffn_gate_inp_shexp.weight") != nullptr) {
      // One row: its product is one value per token, which scales that token's row.
      f.shexp_gate = owned_.f32(file_, be, p + "ffn_gate_inp_shexp.weight", {E});
    }
  }
}

SharedExpert HybridModel::shared_expert(const Ffn& f) const {
  return SharedExpert{&f.gate, &f.up, &f.down, f.shexp_gate ? &*f.shexp_gate : nullptr, hp_.n_ff_shexp};
}

MoeParams HybridModel::moe_params() const {
  return MoeParams{hp_.n_expert, hp_.n_expert_used, hp_.n_embd, hp_.n_ff_exp, hp_.expert_weights_norm};
}

void HybridModel::reserve(int64_t n, int64_t logits_rows) {
  ops::Backend& be = backend_;
  if (n > s_.n) {
    const int64_t E = hp_.n_embd, C = hp_.gdn.conv_channels(), VD = hp_.gdn.value_dim(), HV = hp_.gdn.n_v_heads,
                  Q = hp_.n_embd_q(), KV = hp_.n_embd_kv(), F = std::max<int64_t>(1, n_ff_max_);
    for (auto* b : {&s_.x, &s_.cur, &s_.mixed, &s_.conv, &s_.z, &s_.o, &s_.a, &s_.b, &s_.q, &s_.qg, &s_.k, &s_.v,
                    &s_.attn, &s_.gate, &s_.up, &s_.moe, &s_.sg}) {
      b->reset();
    }
    s_.x = be.alloc(n * E);
    s_.cur = be.alloc(n * E);
    s_.mixed = be.alloc(n * std::max<int64_t>(1, C));
    s_.conv = be.alloc(n * std::max<int64_t>(1, C));
    s_.z = be.alloc(n * std::max<int64_t>(1, VD));
    s_.o = be.alloc(n * std::max<int64_t>(1, VD));
    s_.a = be.alloc(n * std::max<int64_t>(1, HV));
    s_.b = be.alloc(n * std::max<int64_t>(1, HV));
    s_.q = be.alloc(n * Q);
    s_.qg = be.alloc(n * Q);
    s_.k = be.alloc(n * KV);
    s_.v = be.alloc(n * KV);
    s_.attn = be.alloc(n * Q);
    s_.gate = be.alloc(n * F);
    s_.up = be.alloc(n * F);
    s_.moe = be.alloc(n * E);
    s_.sg = be.alloc(n * E);
    s_.n = n;
  }
  reserve_logits(be, s_.logits, s_.logits_rows, logits_rows, hp_.n_vocab);
}

void HybridModel::run(KvPool& pool, std::vector<float>& out) {
  const BatchLayout& lay = lay_;
  const int64_t n = lay.n_tokens(), E = hp_.n_embd;
  for (const BatchLayout::RecSeq& r : lay.rec) {
    const int32_t slot = r.slot;
    if (slot < 0 || slot >= pool.n_state_slots()) {
      fail(ErrorKind::kInternal, "model", "a sequence of a hybrid model has no recurrent state slot (slot " +
                                              std::to_string(slot) + " of " + std::to_string(pool.n_state_slots()) +
                                              ")");
    }
  }
  reserve(n, static_cast<int64_t>(lay.out_rows.size()));
  ops::Backend& be = backend_;
  be.get_rows(tok_embd_, lay.desc.tokens(), n, s_.x->data());
  for (const BatchLayout::EmbdRows& er : lay.embd_rows) be.copy_from_host(er.data, er.n * E, *s_.x, er.row * E);
  be.rms_norm(s_.x->data(), layers_.front().attn_norm, n, E, hp_.rms_eps, s_.cur->data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    if (L.recurrent) {
      run_gdn(L, pool, n);
    } else {
      run_attn(L, pool, n);
    }
    // Residual adds fused with the norm after them (the next layer's first one).
    be.add_rms_norm(s_.x->data(), s_.cur->data(), L.post_norm, n, E, hp_.rms_eps, s_.cur->data());
    const ops::WeightView* next_norm = l + 1 < layers_.size() ? &layers_[l + 1].attn_norm : nullptr;
    const float* y = run_ffn(L, n, next_norm);
    if (y == nullptr) continue;  // (the experts' op did the residual add and the next norm)
    if (next_norm != nullptr) {
      be.add_rms_norm(s_.x->data(), y, *next_norm, n, E, hp_.rms_eps, s_.cur->data());
    } else {
      be.add(s_.x->data(), y, n * E);
    }
  }
  if (hp_.mtp_kv) {  // every row's final hidden state, for the MTP block's next pass
    reserve_rows(hid_, hid_cap_, n);
    be.rms_norm(s_.x->data(), output_norm_, n, E, hp_.rms_eps, hid_->data());
    hid_rows_ = n;
  }
  output_logits(be, lay_, s_.x->data(), s_.cur->data(), output_norm_, output_, hp_.rms_eps, E, hp_.n_vocab,
                s_.logits.get(), out);
}

void HybridModel::run_gdn(const Layer& L, KvPool& pool, int64_t n) {
  ops::Backend& be = backend_;
  const Gdn& g = L.gdn;
  const ops::GdnShape& sh = hp_.gdn;
  float* cur = s_.cur->data();
  {
    const ops::WeightView* ws[] = {&g.qkv, &g.z, &g.beta, &g.alpha};
    float* ys[] = {s_.mixed->data(), s_.z->data(), s_.b->data(), s_.a->data()};
    be.matmul_multi(ws, 4, cur, n, ys);
  }
  const BatchLayout& lay = lay_;
  // The recurrence runs in passes when a sequence snapshots its state inside the step
  // and the back-end cannot write the snapshots itself: pass k takes each sequence's rows
  // up to its k-th snapshot point (from the one before), then the states of the sequences
  // that snapshot there are copied. Every other op of the layer runs once over all rows.
  const bool in_call = lay.has_snaps && be.gdn_snapshots();
  size_t n_passes = 1;
  if (lay.has_snaps && !in_call) {
    for (const auto& r : lay.rec) n_passes = std::max(n_passes, r.snaps.size() + 1);
  }
  // One pass (every step without snapshots): the sequences' rows and state slots as the
  // step description holds them (on the device where the back-end uploaded it; a
  // recorded step reads the slots of whichever sequences run). Snapshots written by the
  // back-end, or several passes: their own.
  ops::GdnStates states = pool.gdn_states(L.index);
  if (in_call) {
    s_.gdn_seqs.clear();
    s_.gdn_snaps.clear();
    for (const BatchLayout::RecSeq& r : lay.rec) {
      const auto seq = static_cast<int32_t>(s_.gdn_seqs.size());
      s_.gdn_seqs.push_back({static_cast<int32_t>(r.first_row), static_cast<int32_t>(r.n_tokens), r.slot});
      for (const StateSnap& sn : r.snaps) s_.gdn_snaps.push_back({seq, sn.after, sn.slot});
    }
    states.snaps = s_.gdn_snaps.data();
    states.n_snaps = static_cast<int64_t>(s_.gdn_snaps.size());
    const auto ns = static_cast<int64_t>(s_.gdn_seqs.size());
    be.ssm_conv_silu(s_.mixed->data(), sh.conv_channels(), g.conv, states, s_.gdn_seqs.data(), ns, s_.conv->data());
    be.gated_delta_net(s_.conv->data(), s_.a->data(), s_.b->data(), g.a, g.dt, sh, states, s_.gdn_seqs.data(), ns,
                       s_.o->data());
  }
  for (size_t pass = 0; pass < n_passes && !in_call; ++pass) {
    const ops::GdnSeq* seqs = lay.desc.gdn_seqs();
    auto ns = static_cast<int64_t>(lay.attn_seqs.size());
    if (n_passes > 1) {
      s_.gdn_seqs.clear();
      for (const BatchLayout::RecSeq& r : lay.rec) {
        const std::vector<StateSnap>& sn = r.snaps;
        const size_t k = sn.size();
        if (pass > k) continue;  // done in an earlier pass
        const int64_t from = pass == 0 ? 0 : sn[pass - 1].after;
        const int64_t to = pass < k ? sn[pass].after : r.n_tokens;
        s_.gdn_seqs.push_back({static_cast<int32_t>(r.first_row + from), static_cast<int32_t>(to - from), r.slot});
      }
      seqs = s_.gdn_seqs.data();
      ns = static_cast<int64_t>(s_.gdn_seqs.size());
    }
    be.ssm_conv_silu(s_.mixed->data(), sh.conv_channels(), g.conv, states, seqs, ns, s_.conv->data());
    be.gated_delta_net(s_.conv->data(), s_.a->data(), s_.b->data(), g.a, g.dt, sh, states, seqs, ns, s_.o->data());
    if (pass + 1 == n_passes) break;
    for (const BatchLayout::RecSeq& r : lay.rec) {
      if (pass < r.snaps.size()) pool.copy_layer_state(r.slot, r.snaps[pass].slot, L.index);
    }
  }
  be.gated_rms_norm(s_.o->data(), s_.z->data(), g.norm, n * sh.n_v_heads, sh.d_v, hp_.rms_eps, sh.n_v_heads);
  be.matmul(g.out, s_.o->data(), n, cur);
}

void HybridModel::run_attn(const Layer& L, KvPool& pool, int64_t n) {
  ops::Backend& be = backend_;
  const Attn& a = L.attn;
  const BatchLayout& lay = lay_;
  float *cur = s_.cur->data(), *q = s_.q->data(), *k = s_.k->data(), *v = s_.v->data();
  {
    const ops::WeightView* ws[] = {&a.wq, &a.wgate, &a.wk, &a.wv};
    float* ys[] = {q, s_.qg->data(), k, v};
    be.matmul_multi(ws, 4, cur, n, ys);
  }
  be.rms_norm(q, a.q_norm, n * hp_.n_head, hp_.head_dim, hp_.rms_eps, q);
  be.rms_norm(k, a.k_norm, n * hp_.n_head_kv, hp_.head_dim, hp_.rms_eps, k);
  ops::RopeParams rope{hp_.n_rot, hp_.rope_freq_base, hp_.rope_freq_scale, true};
  if (!lay.pos3.empty()) {  // a step with image rows: interleaved mRoPE over (t, h, w)
    rope.multi = ops::RopeMulti::kInterleaved;
    for (int a = 0; a < 3; ++a) rope.sections[a] = hp_.rope_sections[a];
    rope.pos3 = lay.desc.pos3();
  }
  const ops::KvLayer kv = pool.layer(L.index);
  be.rope_store_kv(q, k, v, n, hp_.n_head, hp_.n_head_kv, hp_.head_dim, lay.desc.positions(), rope, lay.desc.slots(),
                   kv);
  be.attention(q, kv, lay.desc.attn_seqs(), static_cast<int64_t>(lay.attn_seqs.size()), hp_.n_head, hp_.n_head_kv,
               hp_.head_dim, 1.0f / std::sqrt(static_cast<float>(hp_.head_dim)), s_.attn->data());
  be.sigmoid_mul(s_.attn->data(), s_.qg->data(), n * hp_.n_embd_q());
  be.matmul(a.wo, s_.attn->data(), n, cur);
}

float* HybridModel::run_ffn(const Layer& L, int64_t n, const ops::WeightView* next_norm) {
  ops::Backend& be = backend_;
  const Ffn& f = L.ffn;
  const int64_t E = hp_.n_embd;
  float *cur = s_.cur->data(), *gate = s_.gate->data(), *up = s_.up->data();
  if (!f.moe) {
    be.matmul_swiglu(f.gate, f.up, cur, n, gate, up);
    be.matmul(f.down, gate, n, cur);
    return cur;
  }
  // Routed and shared experts in one op where the back-end takes both; then also the
  // residual add and the next layer's norm (MoeNormAfter), so that the back-end may fuse
  // the experts' weighted sum with them.
  const SharedExpert shared = shared_expert(f);
  const bool one_op = hp_.n_ff_shexp == 0 || moe_takes_shared(be, *f.moe, moe_params(), shared, n);
  if (one_op) {
    const SharedExpert* sh = hp_.n_ff_shexp > 0 ? &shared : nullptr;
    if (next_norm != nullptr) {
      const MoeNormAfter after{s_.x->data(), next_norm, hp_.rms_eps, cur};
      moe_ffn(be, *f.moe, moe_params(), cur, n, s_.moe->data(), sh, &after);
      return nullptr;
    }
    moe_ffn(be, *f.moe, moe_params(), cur, n, s_.moe->data(), sh);
    return s_.moe->data();
  }
  moe_ffn(be, *f.moe, moe_params(), cur, n, s_.moe->data());
  // Shared expert, scaled by sigmoid(its gate . x), plus the routed experts (its gate's
  // dot product shares x with gate / up: one matmul_multi).
  const ops::WeightView* shared_in[] = {&f.gate, &f.up, f.shexp_gate ? &*f.shexp_gate : nullptr};
  float* shared_out[] = {gate, up, s_.sg->data()};
  be.matmul_multi(shared_in, f.shexp_gate ? 3 : 2, cur, n, shared_out);
  be.swiglu(gate, up, n * hp_.n_ff_shexp, gate);
  be.matmul(f.down, gate, n, cur);
  if (f.shexp_gate) be.sigmoid_scale_rows(cur, s_.sg->data(), n, E);
  be.add(cur, s_.moe->data(), n * E);
  return cur;
}

}  // namespace hearth::model

#include "model/llama_model.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace hearth::model {
namespace {

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

ops::WeightView LlamaModel::bind(const std::string& name, std::vector<uint64_t> expect, bool optional_ok,
                                 bool* found) {
  const gguf::TensorInfo* t = file_.find_tensor(name);
  if (found != nullptr) *found = t != nullptr;
  if (t == nullptr) {
    if (optional_ok) return {};
    fail(ErrorKind::kInvalidInput, "model", file_.name() + ": tensor '" + name + "' is missing");
  }
  std::vector<uint64_t> shape = t->shape;
  while (shape.size() > expect.size() && shape.back() == 1) shape.pop_back();
  if (shape != expect) {
    fail(ErrorKind::kInvalidInput, "model", file_.name() + ": tensor '" + name + "' has shape " +
                                                shape_str(t->shape) + ", expected " + shape_str(expect));
  }
  ops::WeightView w;
  w.name = name;
  w.type = t->type;
  w.data = t->data;
  w.n_cols = static_cast<int64_t>(expect[0]);
  w.n_rows = expect.size() > 1 ? static_cast<int64_t>(expect[1]) : 1;
  w.row_bytes = t->n_bytes / static_cast<uint64_t>(w.n_rows);
  return backend_.prepare_weight(w);
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
  if (logits_rows > s.logits_rows) {
    s.logits.reset();
    s.logits = be.alloc(logits_rows * hp_.n_vocab);
    s.logits_rows = logits_rows;
  }
}

std::vector<float> LlamaModel::forward(KvCache& cache, const std::vector<int32_t>& tokens, bool all_logits) {
  std::vector<float> out;
  forward(cache, tokens, all_logits, out);
  return out;
}

void LlamaModel::forward(KvCache& cache, const std::vector<int32_t>& tokens, bool all_logits,
                         std::vector<float>& out) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) {
    out.clear();
    return;
  }
  SeqKv& seq = cache.seq();
  if (seq.n_past + n > cache.n_ctx()) {
    fail(ErrorKind::kResource, "model", "context is full: " + std::to_string(seq.n_past) + " + " +
                                            std::to_string(n) + " tokens exceed the context size " +
                                            std::to_string(cache.n_ctx()));
  }
  Scratch& s = scratch_;
  s.tokens.assign(tokens.begin(), tokens.end());
  s.attn_seqs.assign(1, ops::AttentionSeq{0, n, seq.n_past, seq.blocks.data()});
  s.positions.resize(static_cast<size_t>(n));
  s.slots.resize(static_cast<size_t>(n));
  const BlockMapHost map{seq.blocks.data(), cache.pool().block_size()};
  for (int64_t i = 0; i < n; ++i) {
    s.positions[i] = static_cast<int32_t>(seq.n_past + i);
    s.slots[i] = map.slot(seq.n_past + i);
  }
  s.out_rows.clear();
  for (int64_t i = all_logits ? 0 : n - 1; i < n; ++i) s.out_rows.push_back(static_cast<int32_t>(i));
  run_batch(cache.pool(), out);
  seq.n_past += n;
}

void LlamaModel::forward_batch(KvPool& pool, const std::vector<BatchSeq>& seqs, std::vector<float>& out) {
  Scratch& s = scratch_;
  s.tokens.clear();
  s.positions.clear();
  s.slots.clear();
  s.out_rows.clear();
  s.attn_seqs.clear();
  for (const BatchSeq& b : seqs) {
    if (b.n_tokens <= 0) continue;
    SeqKv& kv = *b.kv;
    if (kv.n_past + b.n_tokens > kv.capacity(pool.block_size())) {
      fail(ErrorKind::kInternal, "model", "a sequence of the batch has " + std::to_string(kv.blocks.size()) +
                                              " KV blocks, too few for " +
                                              std::to_string(kv.n_past + b.n_tokens) + " positions");
    }
    const auto first = static_cast<int64_t>(s.tokens.size());
    s.attn_seqs.push_back(ops::AttentionSeq{first, b.n_tokens, kv.n_past, kv.blocks.data()});
    const BlockMapHost map{kv.blocks.data(), pool.block_size()};
    for (int64_t i = 0; i < b.n_tokens; ++i) {
      s.tokens.push_back(b.tokens[i]);
      s.positions.push_back(static_cast<int32_t>(kv.n_past + i));
      s.slots.push_back(map.slot(kv.n_past + i));
    }
    if (b.logits) s.out_rows.push_back(static_cast<int32_t>(first + b.n_tokens - 1));
  }
  if (s.tokens.empty()) {
    out.clear();
    return;
  }
  run_batch(pool, out);
  for (const BatchSeq& b : seqs) {
    if (b.n_tokens > 0) b.kv->n_past += b.n_tokens;
  }
}

void LlamaModel::run_batch(KvPool& pool, std::vector<float>& out) {
  Scratch& s = scratch_;
  const auto n = static_cast<int64_t>(s.tokens.size());
  const auto rows = static_cast<int64_t>(s.out_rows.size());
  const int64_t E = hp_.n_embd, KV = hp_.n_embd_kv(), F = hp_.n_ff;
  ops::Backend& be = backend_;
  reserve_scratch(n, rows);
  ops::Buffer *x = s.x.get(), *cur = s.cur.get(), *q = s.q.get(), *k = s.k.get(), *v = s.v.get(),
              *attn = s.attn.get(), *gate = s.gate.get(), *up = s.up.get(), *moe_out = s.moe_out.get();
  const ops::RopeParams rope{hp_.n_rot, hp_.rope_freq_base, hp_.rope_freq_scale, hp_.arch.rope_neox};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
  const auto n_seqs = static_cast<int64_t>(s.attn_seqs.size());

  be.get_rows(tok_embd_, s.tokens.data(), n, x->data());
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const LayerWeights& w = layers_[l];
    const ops::KvLayer kv = pool.layer(l);
    be.rms_norm(x->data(), w.attn_norm, n, E, hp_.rms_eps, cur->data());
    be.matmul(w.wq, cur->data(), n, q->data());
    be.matmul(w.wk, cur->data(), n, k->data());
    be.matmul(w.wv, cur->data(), n, v->data());
    if (w.bq) be.add_bias(q->data(), *w.bq, n);
    if (w.bk) be.add_bias(k->data(), *w.bk, n);
    if (w.bv) be.add_bias(v->data(), *w.bv, n);
    if (w.q_norm) be.rms_norm(q->data(), *w.q_norm, n * hp_.n_head, hp_.head_dim, hp_.rms_eps, q->data());
    if (w.k_norm) be.rms_norm(k->data(), *w.k_norm, n * hp_.n_head_kv, hp_.head_dim, hp_.rms_eps, k->data());
    be.rope(q->data(), n, hp_.n_head, hp_.head_dim, s.positions.data(), rope);
    be.rope(k->data(), n, hp_.n_head_kv, hp_.head_dim, s.positions.data(), rope);
    be.store_kv(k->data(), v->data(), n, KV, s.slots.data(), kv);
    be.attention(q->data(), kv, s.attn_seqs.data(), n_seqs, hp_.n_head, hp_.n_head_kv, hp_.head_dim, scale,
                 attn->data());
    be.matmul(w.wo, attn->data(), n, cur->data());
    be.add(x->data(), cur->data(), n * E);
    be.rms_norm(x->data(), w.ffn_norm, n, E, hp_.rms_eps, cur->data());
    if (w.moe) {
      moe_ffn(be, *w.moe, moe_params(), cur->data(), n, moe_out->data());
      be.add(x->data(), moe_out->data(), n * E);
      continue;
    }
    be.matmul(w.ffn_gate, cur->data(), n, gate->data());
    be.matmul(w.ffn_up, cur->data(), n, up->data());
    be.swiglu(gate->data(), up->data(), n * F, gate->data());
    be.matmul(w.ffn_down, gate->data(), n, cur->data());
    be.add(x->data(), cur->data(), n * E);
  }
  if (rows == 0) {
    out.clear();
    return;
  }
  // The output rows, gathered (a contiguous tail, the common case, needs no gather).
  const float* last = x->data();
  const bool contiguous = s.out_rows.back() - s.out_rows.front() + 1 == rows;
  if (contiguous) {
    last = x->data() + static_cast<int64_t>(s.out_rows.front()) * E;
  } else {
    be.gather_rows(x->data(), E, s.out_rows.data(), rows, cur->data());
    last = cur->data();  // rms_norm may work in place
  }
  be.rms_norm(last, output_norm_, rows, E, hp_.rms_eps, cur->data());
  ops::Buffer& logits = *s.logits;
  be.matmul(output_, cur->data(), rows, logits.data());
  out.resize(static_cast<size_t>(rows * hp_.n_vocab));
  be.copy_to_host(logits, 0, rows * hp_.n_vocab, out.data());
}

}  // namespace hearth::model

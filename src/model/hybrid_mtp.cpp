// Qwen3.5's multi-token-prediction block (HybridModel::run_mtp), as llama.cpp lays it out in
// GGUF (blk.{n_layer}.nextn.*, docs/qwen35_gguf_layout.md) and as vLLM and llama.cpp run it:
// for the hidden state h_t that the output head sees at position t (after the final norm)
// and the token x_{t+1} that followed it,
//   x = fc([enorm(embed(x_{t+1})), hnorm(h_t)])      (fc: 2 n_embd -> n_embd)
//   x = the decoder layer (gated full attention over the block's own KV at position t, then
//       the layer's FFN: dense, or routed + shared experts), residuals as the model's layers
//   logits = head(head_norm(x))                         (head: the model's output unless the
//                                                        file has nextn.shared_head_head)
// which predicts x_{t+2}; head_norm(x) is also the h of the next draft when drafts chain.
#include <string>

#include "core/error.h"
#include "model/hybrid_model.h"

namespace hearth::model {

bool HybridModel::has_mtp() const {
  return hp_.n_nextn > 0 && file_.find_tensor("blk." + std::to_string(hp_.n_layer) + ".nextn.eh_proj.weight") != nullptr;
}

void HybridModel::enable_mtp() {
  if (mtp_) return;
  if (!has_mtp()) {
    fail(ErrorKind::kUnsupported, "model",
         file_.name() + ": no multi-token-prediction block (" + hp_.arch.name + ".nextn_predict_layers and blk." +
             std::to_string(hp_.n_layer) + ".nextn.*; a GGUF converted without them, e.g. llama.cpp's --no-mtp)");
  }
  const auto E = static_cast<uint64_t>(hp_.n_embd), V = static_cast<uint64_t>(hp_.n_vocab);
  const std::string p = "blk." + std::to_string(hp_.n_layer) + ".";
  ops::Backend& be = backend_;
  auto m = std::make_unique<Mtp>();
  m->enorm = owned_.f32(file_, be, p + "nextn.enorm.weight", {E});
  m->hnorm = owned_.f32(file_, be, p + "nextn.hnorm.weight", {E});
  const ops::WeightView fc = tensor_view(file_, p + "nextn.eh_proj.weight", {2 * E, E});
  m->fc_e = owned_.cols(be, fc, 0, hp_.n_embd, p + "nextn.eh_proj.weight[embedding]");
  m->fc_h = owned_.cols(be, fc, hp_.n_embd, hp_.n_embd, p + "nextn.eh_proj.weight[hidden]");
  m->head_norm = file_.find_tensor(p + "nextn.shared_head_norm.weight") != nullptr
                     ? owned_.f32(file_, be, p + "nextn.shared_head_norm.weight", {E})
                     : output_norm_;
  bool found = false;
  m->head = bind_tensor(file_, be, p + "nextn.shared_head_head.weight", {E, V}, true, &found);
  if (!found) m->head = output_;
  m->embd = bind_tensor(file_, be, p + "nextn.embed_tokens.weight", {E, V}, true, &found);
  if (!found) m->embd = tok_embd_;
  Layer& L = m->block;
  L.attn_norm = owned_.f32(file_, be, p + "attn_norm.weight", {E});
  L.post_norm = owned_.f32(file_, be, p + "post_attention_norm.weight", {E});
  L.recurrent = false;
  bind_attn(p, L.attn);
  bind_ffn(p, L.ffn);
  hp_.mtp_kv = true;
  L.index = hp_.n_kv_layers() - 1;  // its KV layer: the pools' last
  mtp_ = std::move(m);
}

void HybridModel::copy_hidden(MtpSeq::From from, int64_t row0, int64_t n, float* out) {
  const bool main = from == MtpSeq::From::kMain;
  const int64_t have = main ? hid_rows_ : mtp_hid_rows_;
  if (!mtp_ || row0 < 0 || n < 0 || row0 + n > have) {
    fail(ErrorKind::kInternal, "model", "hidden rows " + std::to_string(row0) + " .. " + std::to_string(row0 + n) +
                                            " of " + std::to_string(have) + " kept");
  }
  backend_.copy_to_host(*(main ? hid_ : mtp_hid_), row0 * hp_.n_embd, n * hp_.n_embd, out);
}

void HybridModel::reserve_rows(std::unique_ptr<ops::Buffer>& b, int64_t& rows, int64_t n) {
  if (n <= rows) return;
  b.reset();
  b = backend_.alloc(n * hp_.n_embd);
  rows = n;
}

void HybridModel::run_mtp(KvPool& pool, const std::vector<MtpSeq>& seqs, std::vector<float>& out) {
  if (!mtp_) fail(ErrorKind::kInternal, "model", "forward_mtp before enable_mtp");
  const Mtp& m = *mtp_;
  const int64_t n = lay_.n_tokens(), E = hp_.n_embd;
  const float eps = hp_.rms_eps;
  reserve(n, static_cast<int64_t>(lay_.out_rows.size()));
  ops::Backend& be = backend_;
  float *x = s_.x->data(), *cur = s_.cur->data();
  // Each row's hidden state, from the model's last step or this block's last pass.
  int64_t row = 0;
  for (const MtpSeq& q : seqs) {
    if (q.n <= 0) continue;
    const bool main = q.from == MtpSeq::From::kMain;
    const int64_t have = main ? hid_rows_ : mtp_hid_rows_;
    if (q.hid_row0 < 0 || q.hid_row0 + q.n > have) {
      fail(ErrorKind::kInternal, "model", "an MTP row's hidden state " + std::to_string(q.hid_row0 + q.n - 1) +
                                              " is not among the " + std::to_string(have) + " rows kept");
    }
    be.copy((main ? hid_ : mtp_hid_)->data() + q.hid_row0 * E, q.n * E, cur + row * E);
    row += q.n;
  }
  be.rms_norm(cur, m.hnorm, n, E, eps, cur);
  be.get_rows(m.embd, lay_.desc.tokens(), n, x);
  be.rms_norm(x, m.enorm, n, E, eps, x);
  be.matmul(m.fc_e, x, n, s_.moe->data());
  be.matmul(m.fc_h, cur, n, x);
  be.add(x, s_.moe->data(), n * E);
  be.rms_norm(x, m.block.attn_norm, n, E, eps, cur);
  run_attn(m.block, pool, n);
  be.add_rms_norm(x, cur, m.block.post_norm, n, E, eps, cur);
  const float* y = run_ffn(m.block, n, nullptr);
  be.add(x, y, n * E);
  reserve_rows(mtp_hid_, mtp_hid_cap_, n);
  be.rms_norm(x, m.head_norm, n, E, eps, mtp_hid_->data());
  mtp_hid_rows_ = n;
  output_logits(be, lay_, x, cur, m.head_norm, m.head, eps, E, hp_.n_vocab, s_.logits.get(), out);
}

}  // namespace hearth::model

// Hybrid Gated DeltaNet models (GGUF architectures qwen35, qwen35moe, qwen3next, in
// llama.cpp's tensor layout; docs/qwen35_gguf_layout.md): most layers are Gated
// DeltaNet linear attention with a fixed-size recurrent state per sequence (conv
// state + delta-rule state, in the pool's state slots), every few layers one gated
// full-attention layer with a paged KV cache (per-head q/k RMSNorm, partial NeoX
// RoPE, output times sigmoid of a per-head gate from the q projection); FFNs dense
// (qwen35) or routed experts plus a sigmoid-gated shared expert. Norm weights come
// with the +1 already added (llama.cpp's convention), so plain RMSNorm applies.
// The math runs through ops::Backend; prompts use the chunked delta rule (linear in
// their length), single decode tokens the recurrent step.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "format/gguf.h"
#include "model/batch_layout.h"
#include "model/causal_lm.h"
#include "model/moe_ffn.h"
#include "model/weights.h"

namespace hearth::model {

class HybridModel final : public CausalLm {
 public:
  HybridModel(const gguf::File& file, ops::Backend& backend);

  const Hparams& hparams() const override { return hp_; }
  ops::Backend& backend() override { return backend_; }
  bool takes_images() const override { return true; }
  bool has_mtp() const override;
  void enable_mtp() override;
  void copy_hidden(MtpSeq::From from, int64_t row0, int64_t n, float* out) override;

 private:
  struct Gdn {
    ops::WeightView qkv, z, beta, alpha, out;      // projections
    ops::WeightView conv, dt, a, norm;             // F32
  };
  struct Attn {
    ops::WeightView wq, wgate, wk, wv, wo, q_norm, k_norm;
  };
  struct Ffn {
    ops::WeightView gate, up, down;                // dense, or the shared expert
    std::optional<MoeWeights> moe;
    std::optional<ops::WeightView> shexp_gate;     // [n_embd]: one row
  };
  struct Layer {
    ops::WeightView attn_norm, post_norm;
    bool recurrent = false;
    int64_t index = 0;  // KV layer index, or recurrent layer index
    Gdn gdn;
    Attn attn;
    Ffn ffn;
  };
  void bind_gdn(const std::string& p, Gdn& g);
  void bind_attn(const std::string& p, Attn& a);
  void bind_ffn(const std::string& p, Ffn& f);
  MoeParams moe_params() const;
  void reserve(int64_t n, int64_t logits_rows);
  void run(KvPool& pool, std::vector<float>& out) override;
  void run_gdn(const Layer& L, KvPool& pool, int64_t n);
  void run_attn(const Layer& L, KvPool& pool, int64_t n);
  // The feed-forward of s_.cur; returns the buffer holding its output (s_.cur or s_.moe).
  // next_norm: the next layer's first norm, which the experts' op may apply itself (after
  // the residual add, into s_.cur): then it returns null.
  float* run_ffn(const Layer& L, int64_t n, const ops::WeightView* next_norm);
  SharedExpert shared_expert(const Ffn& f) const;
  // The MTP block (hybrid_mtp.cpp): llama.cpp's blk.{n_layer}.nextn.* and the full-attention
  // decoder layer beside them. x = fc([enorm(embed(token)), hnorm(h)]) as two products
  // (fc's column halves), the layer, then the shared head: head_norm and the output.
  struct Mtp {
    ops::WeightView enorm, hnorm, fc_e, fc_h, head_norm, head, embd;
    Layer block;
  };
  void run_mtp(KvPool& pool, const std::vector<MtpSeq>& seqs, std::vector<float>& out) override;
  // Grows b (kept across reserve(): it holds rows between passes) to n rows of n_embd.
  void reserve_rows(std::unique_ptr<ops::Buffer>& b, int64_t& rows, int64_t n);

  const gguf::File& file_;
  ops::Backend& backend_;
  Hparams hp_;
  OwnedWeights owned_;
  ops::WeightView tok_embd_, output_norm_, output_;
  std::vector<Layer> layers_;
  int64_t n_ff_max_ = 0;
  std::unique_ptr<Mtp> mtp_;
  // MTP on: the final hidden state of every row of the last forward (hid) and of the last
  // forward_mtp (mtp_hid), and how many rows each holds.
  std::unique_ptr<ops::Buffer> hid_, mtp_hid_;
  int64_t hid_cap_ = 0, mtp_hid_cap_ = 0, hid_rows_ = 0, mtp_hid_rows_ = 0;

  struct Scratch {
    int64_t n = 0;
    std::unique_ptr<ops::Buffer> x, cur, mixed, conv, z, o, a, b, q, qg, k, v, attn, gate, up, moe, sg;
    int64_t logits_rows = 0;
    std::unique_ptr<ops::Buffer> logits;
    std::vector<ops::GdnSeq> gdn_seqs;
    std::vector<ops::GdnSnap> gdn_snaps;
  } s_;
};

}  // namespace hearth::model

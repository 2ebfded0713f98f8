// Hyper-parameters of a Llama-family model, read from GGUF metadata through a
// table of per-architecture traits (no per-model code paths).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "ops/backend.h"

namespace hearth::model {

// What differs between the Llama-family architectures GGUF names.
struct ArchTraits {
  const char* name;  // general.architecture
  bool rope_neox;    // NeoX rotary layout (qwen*) vs the normal interleaved one (llama)
  bool qk_norm;      // per-head RMSNorm of q and k before RoPE (qwen3)
  bool moe;          // routed experts
  bool hybrid;       // Gated DeltaNet layers + gated full attention (qwen35, qwen35moe, qwen3next)
};

// Traits of a supported architecture, or nullptr.
const ArchTraits* find_arch(const std::string& name);

struct Hparams {
  ArchTraits arch{};
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_rot = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  // Qwen-VL interleaved mRoPE ({arch}.rope.dimension_sections: t, h, w pairs); all 0
  // for models without it (their image-free text equals plain RoPE either way).
  int32_t rope_sections[3] = {0, 0, 0};
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;          // rows of each expert's gate/up matrices
  bool expert_weights_norm = true;  // renormalise the chosen experts' router probabilities
  int64_t n_ff_shexp = 0;           // shared expert (hybrid MoE), 0 when none

  // Hybrid models: which layers are Gated DeltaNet layers (no KV cache, a recurrent
  // state instead) and their shape. Empty / unused for the Llama family.
  std::vector<uint8_t> recurrent;  // per layer, 1 = Gated DeltaNet
  ops::GdnShape gdn;

  // Multi-token-prediction blocks ({arch}.nextn_predict_layers, llama.cpp's layout): the
  // file's block_count counts them after the n_layer layers of the model itself
  // (blk.{n_layer}.nextn.*). mtp_kv: the KV pool also holds the MTP block's attention
  // (one more KV layer, the last), set by the model when its MTP drafter is used.
  int64_t n_nextn = 0;
  bool mtp_kv = false;

  bool is_recurrent(int64_t l) const { return !recurrent.empty() && recurrent[static_cast<size_t>(l)] != 0; }
  // Layers with a KV cache (the MTP block's with mtp_kv), and the KV-cache index of layer
  // l (-1 for a recurrent one).
  int64_t n_kv_layers() const;
  int64_t kv_index(int64_t l) const;
  int64_t n_recurrent_layers() const;

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Reads and validates the hyper-parameters. Throws Error naming the file and key
// (kUnsupported for an architecture or RoPE scaling Hearth does not run).
Hparams read_hparams(const gguf::File& file);

}  // namespace hearth::model

// Hyper-parameters of a Llama-family model, read from GGUF metadata through a
// table of per-architecture traits (no per-model code paths).
#pragma once

#include <cstdint>
#include <string>

#include "format/gguf.h"

namespace hearth::model {

// What differs between the Llama-family architectures GGUF names.
struct ArchTraits {
  const char* name;  // general.architecture
  bool rope_neox;    // NeoX rotary layout (qwen*) vs the normal interleaved one (llama)
  bool qk_norm;      // per-head RMSNorm of q and k before RoPE (qwen3)
  bool moe;          // routed experts
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
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;          // rows of each expert's gate/up matrices
  bool expert_weights_norm = true;  // renormalise the chosen experts' router probabilities

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Reads and validates the hyper-parameters. Throws Error naming the file and key
// (kUnsupported for an architecture or RoPE scaling Hearth does not run).
Hparams read_hparams(const gguf::File& file);

}  // namespace hearth::model

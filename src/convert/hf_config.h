// config.json of a Hugging Face checkpoint folder, read into what the converter needs:
// the llama.cpp architecture it becomes, its dimensions, and which layers are linear
// attention. Also writes the llama.cpp `{arch}.*` metadata keys for it (see
// docs/qwen35_gguf_layout.md). Errors name config.json and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf_writer.h"

namespace hearth::convert {

enum class Family { kLlama, kQwen2, kQwen3, kQwen35, kQwen35Moe, kQwen3Next };

struct HfConfig {
  std::string path;        // .../config.json, for messages
  std::string model_type;  // as written in config.json
  std::string arch;        // llama.cpp general.architecture
  Family family = Family::kLlama;
  bool has_vision = false;  // a vision_config is present (its tensors are skipped)
  nlohmann::json text;      // the text config (text_config merged over the top level)

  int64_t hidden = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, vocab = 0;
  int64_t ff = 0;  // intermediate_size (0 when absent)
  int64_t n_ctx = 0;
  double rms_eps = 1e-6, rope_theta = 10000.0, partial_rotary = 1.0;
  bool tied = false;
  // Hybrid (Gated DeltaNet) dimensions.
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 0;
  std::vector<bool> recurrent;  // per layer: true = linear attention
  int64_t full_attention_interval = 0;
  bool recurrent_is_interval = true;  // recurrent[] equals the interval pattern
  std::vector<int32_t> mrope_sections;  // qwen35*: padded to 4
  // MoE.
  int64_t n_expert = 0, n_expert_used = 0, expert_ff = 0, shared_ff = 0;
  // Multi-token-prediction blocks the checkpoint holds (mtp.layers.N.*; hybrid families):
  // written after the model's layers as blk.{n_layer + i}, llama.cpp's nextn layout.
  int64_t n_mtp = 0;

  bool hybrid() const { return family == Family::kQwen35 || family == Family::kQwen35Moe || family == Family::kQwen3Next; }
  bool moe() const { return family == Family::kQwen35Moe || family == Family::kQwen3Next; }
};

// Reads DIR/config.json. Throws Error(kNotFound) when it is missing, kInvalidInput on a
// malformed or inconsistent field, kUnsupported on an unknown model_type.
HfConfig read_hf_config(const std::string& dir);

// Writes general.architecture and the `{arch}.*` hyper-parameter keys.
void write_hparams(const HfConfig& c, gguf::Writer& w);

}  // namespace hearth::convert

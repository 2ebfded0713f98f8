// Hugging Face checkpoint folders -> GGUF, in memory or on disk.
//
// Design note. The output is the GGUF llama.cpp's convert_hf_to_gguf.py writes for the
// folder: llama.cpp's architecture names (llama, qwen2, qwen3, qwen35, qwen35moe,
// qwen3next), its `{arch}.*` metadata keys, tensor names (token_embd, blk.N.attn_q, ...,
// ssm_conv1d, ffn_gate_exps, ...) and transforms, so that a converted file loads in
// llama.cpp and a llama.cpp-converted file loads in Hearth through the same code:
//   - every `*norm.weight` of qwen35/qwen35moe/qwen3next gets +1 (zero-centred RMSNorm),
//     except the GDN output norm `linear_attn.norm.weight` (-> ssm_norm);
//   - A_log -> ssm_a = -exp(A_log); dt_bias -> ssm_dt.bias; conv1d [C,1,K] -> [K, C] (ggml);
//   - qwen35/qwen35moe with Hk != Hv: the V side is reordered from HF's grouped order
//     (v-head g*r+t uses k-head g) to llama.cpp's tiled order (GGUF v-head t*Hk+g, which
//     uses k-head h % Hk): in_proj_qkv's V rows, in_proj_z rows, in_proj_b / in_proj_a
//     rows, dt_bias, A_log, conv1d's V channels and out_proj's columns;
//   - qwen3next keeps grouped order; its fused in_proj_qkvz is split into attn_qkv
//     ([Q|K|V]) + attn_gate (Z) as llama.cpp's current converter does, in_proj_ba is
//     written unchanged as ssm_ba;
//   - MoE experts (per-expert or fused gate_up_proj/down_proj) are stacked into
//     ffn_{gate,up,down}_exps; llama's q_proj/k_proj rows get llama.cpp's rope permutation.
// Layer kinds: `{arch}.full_attention_interval`, plus llama.cpp's own per-layer override
// `{arch}.attention.recurrent_layers` (bool array, true = linear attention) only when
// config.json's layer_types is not the plain interval pattern. MTP and the vision tower
// are skipped. docs/qwen35_gguf_layout.md lists every tensor with its ggml shape.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace hearth::convert {

struct ConvertOptions {
  // Type of the 2-D/3-D weight matrices: F32, F16, BF16, Q8_0, Q4_K or Q6_K. nullopt:
  // keep each tensor's storage dtype (F32/F16/BF16; BF16 becomes F32 when the CPU
  // back-end cannot read it). Norms, biases, ssm_a/ssm_dt/ssm_conv1d, the routers and
  // every 1-D tensor stay F32 (as llama.cpp writes them).
  std::optional<GgmlType> type;
  bool quiet = false;  // no log lines on stderr
};

// What a conversion wrote (for the CLI's summary line).
struct ConvertSummary {
  size_t n_tensors = 0;
  uint64_t tensor_bytes = 0;
  std::map<std::string, size_t> type_counts;  // ggml type name -> tensors
  size_t n_fallback = 0;                      // tensors that could not take the asked type
};

// True when `path` is a directory with config.json.
bool is_hf_folder(const std::string& path);

// The GGUF llama.cpp's converter would write for this folder (metadata + tensors).
gguf::Writer hf_folder_to_gguf(const std::string& dir, const ConvertOptions& opt, ConvertSummary* summary = nullptr);

// Opens a model path: a GGUF file (mapped) or an HF folder (converted in memory).
gguf::File open_model(const std::string& path);

// "f32" / "f16" / "bf16" / "q8_0" / "q4_k" / "q6_k" -> the type; throws Error(kInvalidInput).
GgmlType parse_output_type(const std::string& name);

}  // namespace hearth::convert

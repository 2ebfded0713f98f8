// One model found in a store (or given as a path): what `-m` opens and what `hearth
// list` describes. Nothing is copied: paths point where the files lie.
#pragma once

#include <string>
#include <vector>

namespace hearth::store {

inline constexpr const char* kStorePath = "path";
inline constexpr const char* kStoreHf = "huggingface";
inline constexpr const char* kStoreLmStudio = "lmstudio";
inline constexpr const char* kStoreOllama = "ollama";

struct ModelEntry {
  std::string name;                 // the reference -m accepts (ORG/NAME:Q4_K_M, qwen3:8b, ...)
  std::string store;                // kStorePath / kStoreHf / kStoreLmStudio / kStoreOllama
  std::string path;                 // the GGUF (first shard of a split one) or the HF folder
  std::vector<std::string> shards;  // every file of a split GGUF, in order; empty otherwise
  std::string quant_tag;            // from the file name or the Ollama tag ("" when none)
  std::string mmproj;               // the vision projector beside it ("" when none)
  bool hf_folder = false;           // path is a Hugging Face folder (config.json + safetensors)
  std::string error;                // listing only: why this entry cannot be opened
};

}  // namespace hearth::store

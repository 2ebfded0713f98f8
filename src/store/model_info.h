// What `hearth list` shows of a model: read from the GGUF header (metadata and tensor
// table; no tensor data is touched) or from an HF folder's config.json and safetensors
// headers. A file that cannot be read gives an info with `error` set, never a throw.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "store/model_entry.h"

namespace hearth::store {

struct ModelInfo {
  ModelEntry entry;
  std::string architecture;
  uint64_t parameters = 0;
  std::string
      quantization;         // general.file_type's name, else the dominant tensor type; dtype for HF
  uint64_t size_bytes = 0;  // on disk, every shard (or every file of the folder)
  int64_t context_length = 0;
  std::string error;  // why it could not be read ("" when fine)
};

ModelInfo describe_model(const ModelEntry& entry);

// llama.cpp's general.file_type (LLAMA_FTYPE_*) as its usual name ("Q4_K_M"); "" if unknown.
std::string file_type_name(int64_t file_type);

// {"name", "store", "architecture", "parameters", "quantization", "size_bytes",
//  "context_length", "path", "shards"?, "mmproj"?, "error"?}
nlohmann::json to_json(const ModelInfo& info);

}  // namespace hearth::store

// The models inside one folder of a store (an HF snapshot, an LM Studio PUBLISHER/REPO
// folder): its GGUFs grouped into models (split files `-00001-of-00003` are one model,
// `mmproj*` files are projectors, never models), or a Hugging Face folder
// (config.json + *.safetensors). Picking one by quant tag lives here too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/model_entry.h"

namespace hearth::store {

// The quant tag in a GGUF file name, upper-cased ("qwen-7b-q4_k_m.gguf" -> "Q4_K_M",
// "x.UD-Q4_K_XL-00001-of-00002.gguf" -> "UD-Q4_K_XL", "m-bf16.gguf" -> "BF16"); "" when none.
std::string quant_tag_of(const std::string& file_name);

struct SplitName {
  std::string base;  // the name without "-0000i-of-0000n.gguf"
  int index = 0;     // 1-based
  int count = 0;
};
// "name-00002-of-00003.gguf" -> {name, 2, 3}; nullopt for a file that is not a shard.
std::optional<SplitName> parse_split_name(const std::string& file_name);

// True for a vision projector file (its name starts with or holds "mmproj").
bool is_projector(const std::string& file_name);

struct GgufModel {
  std::string tag;                 // quant tag ("" when the name has none)
  std::string label;               // the tag, else the file stem: what :QUANT matches
  std::vector<std::string> files;  // absolute paths; the shards in order for a split model
  int split_count = 0;             // 0 for one file
  std::string problem;             // a missing shard, a dangling link: why it cannot be opened
};

struct FolderScan {
  std::string dir;
  std::vector<GgufModel> models;        // sorted by label
  std::vector<std::string> projectors;  // mmproj files, sorted
  bool hf_folder = false;               // config.json and at least one .safetensors
};

// Walks `dir` (and its sub-folders); throws Error(kIo) naming the folder when it cannot be read.
FolderScan scan_folder(const std::string& dir);

// The model `quant` names (case-insensitive tag or file stem), or the only one when
// `quant` is empty. Throws Error naming `what` (the reference) and listing the quants found
// when none or several match. Also throws on a model with a problem (missing shard, ...).
const GgufModel& pick_gguf(const FolderScan& scan, const std::string& quant,
                           const std::string& what);

// The entry for one picked GGUF model (path = first file, shards when split, projector).
ModelEntry gguf_entry(const FolderScan& scan, const GgufModel& m, std::string name,
                      std::string store);

// Every model in the folder as entries named `base` (one model, or an HF folder) or
// `base:LABEL` (several); problems become the entries' error.
std::vector<ModelEntry> folder_entries(const FolderScan& scan, const std::string& base,
                                       const std::string& store);

// Throws Error(kNotFound) naming `path` when it is a dangling symbolic link (a blob of
// the HF cache that is missing) or does not exist; `what` starts the message.
void check_readable(const std::string& path, const std::string& what);

// Lower-cased copy (ASCII).
std::string lower(std::string s);

}  // namespace hearth::store

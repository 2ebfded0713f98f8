// The Hugging Face hub cache (the layout huggingface_hub writes):
//   HUB/models--ORG--NAME/refs/main           a commit hash
//   HUB/models--ORG--NAME/snapshots/<hash>/... symbolic links into ../../blobs/
// A repo with GGUFs resolves to one of them (by :QUANT); a repo with config.json and
// safetensors resolves to the snapshot folder (an HF folder).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/model_entry.h"

namespace hearth::store {

struct HfRef {
  std::string org, name;
  std::string quant;     // "" when not given
  std::string revision;  // "main" unless @REV was given
};

// "ORG/NAME", "ORG/NAME:QUANT", "ORG/NAME@REV[:QUANT]", with an optional "hf.co/" or
// "huggingface.co/" in front; nullopt for anything else.
std::optional<HfRef> parse_hf_ref(const std::string& ref);

// nullopt when the cache has no such repo; throws Error naming the file for a repo that
// is there but unusable (refs/main missing or naming a missing snapshot, no such quant,
// several quants and none asked for, a dangling blob link).
std::optional<ModelEntry> hf_resolve(const std::string& hub, const HfRef& ref);

// Every model of the cache at refs/main (one entry per GGUF quant); repos that cannot be
// read are entries with an error.
std::vector<ModelEntry> hf_list(const std::string& hub);

}  // namespace hearth::store

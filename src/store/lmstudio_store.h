// LM Studio's models folders: ROOT/PUBLISHER/REPO/*.gguf (the layout LM Studio keeps for
// downloads from the Hugging Face hub; ~/.lmstudio/models, older ~/.cache/lm-studio/models).
// A reference is PUBLISHER/REPO[:QUANT], picked like a hub cache repo.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/hf_cache.h"
#include "store/model_entry.h"

namespace hearth::store {

// nullopt when no root has PUBLISHER/REPO; throws Error when the folder is there but the
// quant is missing or ambiguous (listing the quants found).
std::optional<ModelEntry> lmstudio_resolve(const std::vector<std::string>& roots, const HfRef& ref);

// Every model in the roots (PUBLISHER/REPO folders holding GGUFs or an HF folder).
std::vector<ModelEntry> lmstudio_list(const std::vector<std::string>& roots);

}  // namespace hearth::store

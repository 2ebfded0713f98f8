// `-m MODEL` in one place: an existing file or folder is used as it is; otherwise the
// reference is looked up in the Hugging Face hub cache, LM Studio's folders and Ollama's
// store, in that order. A name two stores hold resolves to the first, with a note saying
// where the other copy is; a name none holds is an Error listing where it looked and the
// stores' names that contain its last part.
#pragma once

#include <string>
#include <vector>

#include "store/locations.h"
#include "store/model_entry.h"

namespace hearth::store {

struct Resolution {
  ModelEntry entry;
  std::vector<std::string> notes;  // lines for stderr (the other stores holding the name)
};

Resolution resolve_model(const std::string& ref, const Locations& loc);

// True when `ref` is written as a path (absolute, ./ ../ ~/, or a .gguf/.json/.jinja
// name): such a reference is never looked up in the stores.
bool looks_like_path(const std::string& ref);

// Every model of every store, in store order (hub cache, LM Studio, Ollama).
std::vector<ModelEntry> list_store_models(const Locations& loc);

}  // namespace hearth::store

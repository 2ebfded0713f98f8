// Ollama's model store: OLLAMA/manifests/<registry>/<namespace>/<name>/<tag> is a JSON
// manifest whose layer of mediaType application/vnd.ollama.image.model names the GGUF
// blob OLLAMA/blobs/sha256-<hex> (a GGUF without extension); a layer of mediaType
// application/vnd.ollama.image.projector is the vision projector.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/model_entry.h"

namespace hearth::store {

inline constexpr const char* kOllamaRegistry = "registry.ollama.ai";

struct OllamaRef {
  std::string registry = kOllamaRegistry;
  std::string ns = "library";
  std::string name;
  std::string tag = "latest";
};

// "NAME", "NAME:TAG", "NS/NAME[:TAG]", "REGISTRY/NS/NAME[:TAG]"; nullopt for anything else.
std::optional<OllamaRef> parse_ollama_ref(const std::string& ref);

// The short name Ollama shows: "qwen3:8b", "NS/NAME:TAG", "REGISTRY/NS/NAME:TAG".
std::string ollama_name(const OllamaRef& ref);

// nullopt when there is no such manifest; throws Error naming the manifest when it is
// not valid JSON, has no model layer, or its blob is missing.
std::optional<ModelEntry> ollama_resolve(const std::string& root, const OllamaRef& ref);

// Every manifest of the store; a broken one is an entry with an error.
std::vector<ModelEntry> ollama_list(const std::string& root);

}  // namespace hearth::store

// Where the model stores lie: the Hugging Face hub cache, LM Studio's models folders and
// Ollama's store. The only place the store code reads the environment; everything else
// takes a Locations, so tests point it at temporary folders.
#pragma once

#include <string>
#include <vector>

namespace hearth::store {

struct Locations {
  std::string hf_hub;                 // the hub cache: holds models--ORG--NAME folders
  std::vector<std::string> lmstudio;  // LM Studio models folders: PUBLISHER/REPO/*.gguf
  std::string ollama;                 // Ollama's models folder: manifests/ and blobs/
};

// The Hugging Face hub for `hearth pull`: $HF_ENDPOINT (a mirror), else
// https://huggingface.co; $HF_TOKEN (gated repos), else none.
struct HubSettings {
  std::string endpoint;
  std::string token;
};
HubSettings hub_settings_from_env();

// From the environment: hub cache $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub; LM Studio $LMSTUDIO_MODELS_DIR (Hearth's own override), else
// ~/.lmstudio/models and the older ~/.cache/lm-studio/models; Ollama $OLLAMA_MODELS, else
// ~/.ollama/models. Folders that do not exist are kept (they simply hold nothing).
Locations locations_from_env();

}  // namespace hearth::store

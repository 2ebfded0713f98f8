#include "store/locations.h"

#include <cstdlib>

namespace hearth::store {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

Locations locations_from_env() {
  Locations loc;
  const std::string home = env("HOME");
  if (const std::string hub = env("HF_HUB_CACHE"); !hub.empty()) {
    loc.hf_hub = hub;
  } else if (const std::string hf_home = env("HF_HOME"); !hf_home.empty()) {
    loc.hf_hub = hf_home + "/hub";
  } else if (!home.empty()) {
    loc.hf_hub = home + "/.cache/huggingface/hub";
  }
  if (const std::string lms = env("LMSTUDIO_MODELS_DIR"); !lms.empty()) {
    loc.lmstudio.push_back(lms);
  } else if (!home.empty()) {
    loc.lmstudio.push_back(home + "/.lmstudio/models");
    loc.lmstudio.push_back(home + "/.cache/lm-studio/models");
  }
  if (const std::string ollama = env("OLLAMA_MODELS"); !ollama.empty()) {
    loc.ollama = ollama;
  } else if (!home.empty()) {
    loc.ollama = home + "/.ollama/models";
  }
  return loc;
}

HubSettings hub_settings_from_env() {
  HubSettings s;
  s.endpoint = env("HF_ENDPOINT");
  if (s.endpoint.empty()) s.endpoint = "https://huggingface.co";
  while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
  s.token = env("HF_TOKEN");
  return s;
}

}  // namespace hearth::store

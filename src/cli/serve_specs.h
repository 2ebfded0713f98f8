// The models `hearth serve` serves when given several: `--model NAME=REF` (repeatable),
// `--models-dir DIR` (every model found there, named by file stem or folder name) and
// `--config FILE` (server/model_config.h), in that order of precedence for the listing.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/serve_model.h"
#include "server/model_registry.h"

namespace hearth::cli {

// "NAME=REF" -> {NAME, REF}; nullopt for a plain reference (no '=', or a '/' before it:
// a path that holds '=').
std::optional<std::pair<std::string, std::string>> split_named_model(const std::string& value);

// A model's name when none is given: the file's stem or the folder's name for a path,
// else the reference as typed (a store name: ORG/NAME:Q4_K_M, qwen3:8b).
std::string default_model_name(const std::string& ref);

// The name a --model value gives its model: NAME of NAME=REF, else default_model_name.
std::string model_value_name(const std::string& value);

// True when the options ask for several models (router mode): --models-dir, --config,
// more than one --model, or one --model NAME=REF.
bool router_mode(const ServeOptions& o);

// The models of router mode, config first, then --model, then --models-dir. References
// are checked by the caller (ServeModelFactory::resolve). Throws Error on a bad value,
// an empty or unreadable folder, or a config error.
std::vector<server::ModelSpec> router_specs(const ServeOptions& o);

// The models found in DIR: *.gguf files (not projectors, not split shards) named by
// their stem, and folders holding a config.json or GGUF files, named by the folder.
std::vector<server::ModelSpec> models_in_dir(const std::string& dir);

}  // namespace hearth::cli

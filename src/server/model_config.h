// `hearth serve --config FILE`: the models to serve, in YAML (yaml-cpp).
//
//   models:
//     smol:                        # the model's name (its id in /v1/models)
//       model: models/smol.gguf    # anything -m accepts; a relative path is taken from
//                                  # the config file's folder
//       aliases: [small, default]
//       ctx: 4096                  # these override the server's options for this model
//       max_seqs: 4
//       kv_cache_bytes: 512M
//       chat_template: smol.jinja  # relative to the config file's folder
//       device: cpu
//       pinned: true               # loaded at start, never unloaded
//       idle_unload: 300           # seconds; 0: never (default: --idle-unload)
//
// Every error names the file, the line and the key (models.smol.ctx).
#pragma once

#include <string>
#include <vector>

#include "server/model_registry.h"

namespace hearth::server {

// Reads and checks FILE; throws Error(kInvalidInput / kIo) naming the file, line and key.
std::vector<ModelSpec> load_model_config(const std::string& path);
// The same from text (`path` is named in errors; relative paths are taken from `base_dir`).
std::vector<ModelSpec> parse_model_config(const std::string& text, const std::string& path,
                                          const std::string& base_dir);

}  // namespace hearth::server

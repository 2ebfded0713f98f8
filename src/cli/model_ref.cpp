#include "cli/model_ref.h"

#include <cstdio>

#include "convert/hf_import.h"
#include "store/locations.h"
#include "store/resolver.h"
#include "store/split_shards.h"

namespace hearth::cli {

store::ModelEntry resolve_model_arg(const std::string& ref) {
  const store::Resolution r = store::resolve_model(ref, store::locations_from_env());
  for (const auto& note : r.notes) std::fprintf(stderr, "hearth: %s\n", note.c_str());
  if (r.entry.store != store::kStorePath) {
    std::fprintf(stderr, "hearth: model %s: %s (%s)\n", ref.c_str(), r.entry.path.c_str(),
                 r.entry.store.c_str());
  }
  return r.entry;
}

gguf::File open_model_entry(const store::ModelEntry& e) {
  if (e.shards.size() > 1) return gguf::File::open_split(e.shards);
  gguf::File f = convert::open_model(e.path);
  if (e.hf_folder) return f;
  const auto count = f.find_int("split.count");
  if (!count || *count <= 1) return f;
  return gguf::File::open_split(store::split_shard_paths(e.path, *count));
}

gguf::File open_model_arg(const std::string& ref, store::ModelEntry* entry) {
  store::ModelEntry e = resolve_model_arg(ref);
  gguf::File f = open_model_entry(e);
  if (entry != nullptr) *entry = std::move(e);
  return f;
}

std::string model_file_arg(const std::string& ref, const std::string& folder_file) {
  store::ModelEntry e = resolve_model_arg(ref);
  if (e.store == store::kStorePath) return e.path;
  return e.hf_folder ? e.path + "/" + folder_file : e.path;
}

}  // namespace hearth::cli

#include "store/split_shards.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "store/folder_scan.h"

namespace hearth::store {

std::vector<std::string> split_shard_paths(const std::string& shard, int64_t count) {
  const std::filesystem::path p(shard);
  const auto split = parse_split_name(p.filename().string());
  if (!split || split->count != count) {
    fail(ErrorKind::kInvalidInput, "models",
         shard + ": a shard of a split GGUF of " + std::to_string(count) +
             " files (split.count), but its name is not NAME-0000i-of-NNNNN.gguf with that "
             "count, so the other shards cannot be found");
  }
  std::vector<std::string> out;
  for (int64_t i = 1; i <= count; ++i) {
    char tail[64];
    std::snprintf(tail, sizeof tail, "-%05lld-of-%05lld.gguf", static_cast<long long>(i),
                  static_cast<long long>(count));
    out.push_back((p.parent_path() / (split->base + tail)).string());
  }
  return out;
}

}  // namespace hearth::store

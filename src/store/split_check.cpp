#include "store/split_check.h"

#include "core/error.h"

namespace hearth::store {
namespace {

std::string how_to_join(size_t n) {
  return "Hearth's GGUF reader loads a single file, not the " + std::to_string(n) +
         " shards of a split GGUF; join them into one file first (llama.cpp: llama-gguf-split "
         "--merge FIRST-SHARD "
         "OUT.gguf) or pick a quant that is one file";
}

}  // namespace

void refuse_split(const ModelEntry& entry) {
  if (entry.shards.size() <= 1) return;
  fail(ErrorKind::kUnsupported, "models",
       entry.name + " is a split GGUF (" + entry.shards.front() + " and " +
           std::to_string(entry.shards.size() - 1) + " more): " + how_to_join(entry.shards.size()));
}

void refuse_split_shard(const gguf::File& file) {
  const auto count = file.find_int("split.count");
  if (!count || *count <= 1) return;
  fail(ErrorKind::kUnsupported, "models",
       file.name() + " is shard " + std::to_string(file.find_int("split.no").value_or(0) + 1) +
           " of a split GGUF: " + how_to_join(static_cast<size_t>(*count)));
}

}  // namespace hearth::store

// `-m MODEL` for every command: a path, or a name in the Hugging Face hub cache, LM
// Studio's folders or Ollama's store (store/resolver.h), with the store locations taken
// from the environment. Log lines go to stderr.
#pragma once

#include <string>

#include "format/gguf.h"
#include "store/model_entry.h"

namespace hearth::cli {

// Resolves the reference; prints the resolver's notes and, for a store name, one line
// naming the file it resolved to. Throws Error (not found, ambiguous quant, ...).
store::ModelEntry resolve_model_arg(const std::string& ref);

// Opens a resolved model: a GGUF mapped, an HF folder converted in memory, a split GGUF's
// shards (the entry's, or found by name beside a shard given as a path) joined by
// gguf::File::open_split.
gguf::File open_model_entry(const store::ModelEntry& entry);

// Resolves and opens the model (open_model_entry). `entry` (optional) receives the
// resolution.
gguf::File open_model_arg(const std::string& ref, store::ModelEntry* entry = nullptr);

// For commands that read one file of a model (tokenize, template): the resolved GGUF, or
// for a store's HF folder its `folder_file` (tokenizer.json, tokenizer_config.json). A
// path is returned unchanged; a split GGUF gives its first shard (which holds the
// metadata and the tokenizer).
std::string model_file_arg(const std::string& ref, const std::string& folder_file);

}  // namespace hearth::cli

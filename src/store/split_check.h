// Split GGUFs (name-00001-of-00003.gguf, llama.cpp's gguf-split): the stores resolve one
// to its first shard and keep every shard's path, but Hearth's GGUF reader maps one
// file; these checks refuse a split model with a message saying so, instead of loading
// the first shard's tensors only.
#pragma once

#include "format/gguf.h"
#include "store/model_entry.h"

namespace hearth::store {

// Throws Error(kUnsupported) when the entry is a split GGUF of several files.
void refuse_split(const ModelEntry& entry);

// Throws Error(kUnsupported) when the opened file says it is one shard of several
// (split.count > 1), e.g. a shard given as a path.
void refuse_split_shard(const gguf::File& file);

}  // namespace hearth::store

// Split GGUFs (name-00001-of-00003.gguf, llama.cpp's gguf-split): the stores resolve one
// to its first shard and list every shard (ModelEntry::shards); a shard given as a path
// finds its siblings here, by name, so gguf::File::open_split can join them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hearth::store {

// The paths of the `count` shards of the split GGUF `shard` (any one of them) belongs
// to, in order, in its folder: NAME-00001-of-0000N.gguf ... Throws Error(kInvalidInput)
// naming the file when its name is not a shard's name of `count` files.
std::vector<std::string> split_shard_paths(const std::string& shard, int64_t count);

}  // namespace hearth::store

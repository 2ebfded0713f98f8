// Joining the shards of a split GGUF (llama.cpp's gguf-split writes
// NAME-00001-of-00003.gguf ...): each shard is a complete GGUF whose tensor infos
// describe the tensors stored in that shard; every shard carries split.no (0-based),
// split.count and split.tensors.count (the model's total), and the first also carries
// the model's metadata. The joined File keeps each shard mapped and points its tensors
// into them, so the model code reads one tensor table as from a single file.
#include <filesystem>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "format/gguf.h"

namespace hearth::gguf {
namespace {

bool is_split_key(const std::string& key) { return key.rfind("split.", 0) == 0; }

// The shard's split.* value, or an Error naming the shard and the key.
int64_t split_int(const File& shard, const char* key, const std::string& what) {
  const auto v = shard.find_int(key);
  if (!v) fail(ErrorKind::kInvalidInput, "gguf", shard.name() + ": " + what + ": no '" + key + "' key; not a shard of a split GGUF");
  return *v;
}

}  // namespace

File File::open_split(const std::vector<std::string>& paths) {
  if (paths.empty()) fail(ErrorKind::kInternal, "gguf", "open_split given no shard");
  if (paths.size() == 1) {
    File f = open(paths[0]);
    const auto count = f.find_int("split.count");
    if (!count) return f;
    if (*count > 1) {
      fail(ErrorKind::kInvalidInput, "gguf",
           paths[0] + ": shard " + std::to_string(f.find_int("split.no").value_or(0) + 1) +
               " of a split GGUF of " + std::to_string(*count) + " files, opened alone");
    }
  }  // else a split of one shard: joined below (its split.* keys dropped)
  const size_t n = paths.size();
  auto shards = std::make_shared<std::vector<File>>();
  shards->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string what = "shard " + std::to_string(i + 1) + " of " + std::to_string(n);
    std::error_code ec;
    if (!std::filesystem::exists(paths[i], ec)) {
      fail(ErrorKind::kNotFound, "gguf",
           paths[i] + ": " + what + " of the split GGUF " + paths[0] + " is missing");
    }
    shards->push_back(open(paths[i]));
    const File& s = shards->back();
    const int64_t no = split_int(s, "split.no", what);
    const int64_t count = split_int(s, "split.count", what);
    const int64_t total = split_int(s, "split.tensors.count", what);
    if (count != static_cast<int64_t>(n)) {
      fail(ErrorKind::kInvalidInput, "gguf",
           paths[i] + ": split.count is " + std::to_string(count) + " but the split GGUF " +
               paths[0] + " has " + std::to_string(n) + " shards");
    }
    if (no != static_cast<int64_t>(i)) {
      fail(ErrorKind::kInvalidInput, "gguf",
           paths[i] + ": split.no is " + std::to_string(no) + " where shard " +
               std::to_string(i + 1) + " (split.no " + std::to_string(i) + ") was expected");
    }
    const int64_t first_total = split_int(shards->front(), "split.tensors.count", "shard 1");
    if (total != first_total) {
      fail(ErrorKind::kInvalidInput, "gguf",
           paths[i] + ": split.tensors.count is " + std::to_string(total) + " but " + paths[0] +
               " says " + std::to_string(first_total) + ": a shard of another split");
    }
  }

  const File& first = shards->front();
  File f;
  f.name_ = first.name_;
  f.version_ = first.version_;
  f.alignment_ = first.alignment_;
  f.data_offset_ = first.data_offset_;
  f.base_ = first.base_;
  for (const KeyValue& kv : first.metadata_) {
    if (!is_split_key(kv.key)) f.metadata_.push_back(kv);
  }
  std::unordered_map<std::string, size_t> owner;  // tensor name -> shard index
  for (size_t i = 0; i < n; ++i) {
    const File& s = (*shards)[i];
    f.size_ += s.size_;
    for (const TensorInfo& t : s.tensors_) {
      auto [it, fresh] = owner.emplace(t.name, i);
      if (!fresh) {
        fail(ErrorKind::kInvalidInput, "gguf",
             paths[i] + ": tensor '" + t.name + "' is also in " + paths[it->second] +
                 " (a tensor in two shards)");
      }
      f.tensors_.push_back(t);
    }
  }
  const int64_t total = *first.find_int("split.tensors.count");
  if (static_cast<int64_t>(f.tensors_.size()) != total) {
    fail(ErrorKind::kInvalidInput, "gguf",
         paths[0] + ": split.tensors.count is " + std::to_string(total) + " but the " +
             std::to_string(n) + " shards hold " + std::to_string(f.tensors_.size()) + " tensors");
  }
  f.shards_ = std::move(shards);
  return f;
}

}  // namespace hearth::gguf

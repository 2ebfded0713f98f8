// Split GGUFs: a model written whole and split into shards the way llama.cpp's gguf-split
// lays them out (every shard a GGUF with split.no / split.count / split.tensors.count, the
// first also holding the model's metadata) opens through File::open_split with the same
// metadata and the same tensor bytes as the whole file; the default model
// (HEARTH_DEFAULT_MODEL) split in three too. Broken splits are refused naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace fs = std::filesystem;
using hearth::Error;
using hearth::GgmlType;
using namespace hearth::gguf;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type || a.u64 != b.u64 || a.i64 != b.i64 || a.str != b.str) return false;
  if (!(a.f64 == b.f64 || (a.f64 != a.f64 && b.f64 != b.f64))) return false;
  if (a.elem_type != b.elem_type || a.arr.size() != b.arr.size()) return false;
  for (size_t i = 0; i < a.arr.size(); ++i)
    if (!same_value(a.arr[i], b.arr[i])) return false;
  return true;
}

// Writes `src` split into shards: shard k holds tensors [cuts[k], cuts[k+1]); the first
// shard also holds the metadata. `extra` (when not empty) is one more tensor name copied
// into every shard after the first (to make a duplicate).
std::vector<std::string> write_split(const File& src, const std::vector<size_t>& cuts,
                                     const fs::path& dir, const std::string& stem,
                                     int tensors_count = -1) {
  const size_t n = cuts.size() - 1;
  std::vector<std::string> paths;
  for (size_t k = 0; k < n; ++k) {
    Writer w;
    if (k == 0) {
      for (const KeyValue& kv : src.metadata()) w.set_value(kv.key, kv.value);
    }
    w.set_u16("split.no", static_cast<uint16_t>(k));
    w.set_u16("split.count", static_cast<uint16_t>(n));
    w.set_i32("split.tensors.count",
              tensors_count >= 0 ? tensors_count : static_cast<int32_t>(src.tensors().size()));
    for (size_t i = cuts[k]; i < cuts[k + 1]; ++i) {
      const TensorInfo& t = src.tensors()[i];
      w.add_tensor(t.name, t.type, t.shape, {t.data, t.n_bytes});
    }
    char tail[64];
    std::snprintf(tail, sizeof tail, "-%05zu-of-%05zu.gguf", k + 1, n);
    paths.push_back((dir / (stem + tail)).string());
    w.write_file(paths.back());
  }
  return paths;
}

void expect_same_model(const File& whole, const File& joined) {
  ASSERT_EQ(whole.metadata().size(), joined.metadata().size());
  for (size_t i = 0; i < whole.metadata().size(); ++i) {
    EXPECT_EQ(whole.metadata()[i].key, joined.metadata()[i].key);
    EXPECT_TRUE(same_value(whole.metadata()[i].value, joined.metadata()[i].value))
        << whole.metadata()[i].key;
  }
  ASSERT_EQ(whole.tensors().size(), joined.tensors().size());
  for (size_t i = 0; i < whole.tensors().size(); ++i) {
    const TensorInfo& a = whole.tensors()[i];
    const TensorInfo* b = joined.find_tensor(a.name);
    ASSERT_NE(b, nullptr) << a.name;
    EXPECT_EQ(joined.tensors()[i].name, a.name);  // the order is kept
    EXPECT_EQ(b->type, a.type) << a.name;
    EXPECT_EQ(b->shape, a.shape) << a.name;
    ASSERT_EQ(b->n_bytes, a.n_bytes) << a.name;
    EXPECT_EQ(std::memcmp(a.data, b->data, a.n_bytes), 0) << a.name;
  }
}

class GgufSplitTest : public ::testing::Test {
 protected:
  fs::path dir;
  std::string whole_path;

  void SetUp() override {
    dir = fs::temp_directory_path() / ("hearth_split_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    Writer w;
    w.set_string("general.architecture", "llama");
    w.set_u32("general.file_type", 1);
    w.set_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "c"});
    w.set_f32("llama.rope.freq_base", 10000.0f);
    w.set_alignment(64);
    for (int i = 0; i < 5; ++i) {
      std::vector<float> v(static_cast<size_t>(16 * (i + 1)));
      for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(i * 100 + j) * 0.25f;
      w.add_tensor_f32("blk." + std::to_string(i) + ".w", {16, static_cast<uint64_t>(i + 1)}, v);
    }
    std::vector<uint8_t> q(34 * 2);  // two Q8_0 blocks of 32
    for (size_t j = 0; j < q.size(); ++j) q[j] = static_cast<uint8_t>(j * 7);
    w.add_tensor("q8", GgmlType::Q8_0, {64}, q);
    whole_path = (dir / "whole.gguf").string();
    w.write_file(whole_path);
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string error_of(const std::vector<std::string>& paths) {
    try {
      File::open_split(paths);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

TEST_F(GgufSplitTest, ShardsJoinToTheWholeFile) {
  const File whole = File::open(whole_path);
  for (const std::vector<size_t>& cuts :
       {std::vector<size_t>{0, 6}, {0, 2, 6}, {0, 1, 4, 6}, {0, 0, 3, 6}}) {
    const auto paths = write_split(whole, cuts, dir, "m" + std::to_string(cuts.size()));
    std::optional<File> joined(File::open_split(paths));
    expect_same_model(whole, *joined);
    EXPECT_EQ(joined->name(), paths[0]);
    EXPECT_EQ(joined->alignment(), 64u);
    uint64_t total = 0;
    for (const auto& p : paths) total += fs::file_size(p);
    EXPECT_EQ(joined->file_size(), total);
    // A copy shares the shards' mappings: its tensors stay readable once the original goes.
    const File copy = *joined;
    joined.reset();
    expect_same_model(whole, copy);
  }
}

TEST_F(GgufSplitTest, DefaultModelSplitInThreeEqualsTheWholeFile) {
  const char* path = std::getenv("HEARTH_DEFAULT_MODEL");
  ASSERT_NE(path, nullptr) << "HEARTH_DEFAULT_MODEL must name the default model";
  const File whole = File::open(path);
  const size_t n = whole.tensors().size();
  const auto paths = write_split(whole, {0, n / 3, 2 * n / 3, n}, dir, "default");
  expect_same_model(whole, File::open_split(paths));
}

TEST_F(GgufSplitTest, BrokenSplitsNameTheFile) {
  const File whole = File::open(whole_path);
  const auto paths = write_split(whole, {0, 2, 4, 6}, dir, "m");

  // Counts that disagree: two of the three shards given.
  std::string msg = error_of({paths[0], paths[1]});
  EXPECT_TRUE(has(msg, paths[0] + ": split.count is 3 but the split GGUF")) << msg;
  // Out of order.
  msg = error_of({paths[1], paths[0], paths[2]});
  EXPECT_TRUE(has(msg, paths[1] + ": split.no is 1 where shard 1 (split.no 0) was expected"))
      << msg;
  // A shard opened alone.
  msg = error_of({paths[1]});
  EXPECT_TRUE(has(msg, paths[1] + ": shard 2 of a split GGUF of 3 files, opened alone")) << msg;
  // A file that is no shard among shards.
  msg = error_of({paths[0], whole_path, paths[2]});
  EXPECT_TRUE(has(msg, whole_path + ": shard 2 of 3: no 'split.no' key")) << msg;

  // Shards of another split (its model has another tensor count) mixed in.
  const auto other = write_split(whole, {0, 3, 5, 6}, dir, "other", 7);
  msg = error_of({paths[0], other[1], paths[2]});
  EXPECT_TRUE(has(msg, other[1] + ": split.tensors.count is 7 but " + paths[0] + " says 6"))
      << msg;
  // Right counts, wrong total of tensors: a tensor left out of the shards.
  const auto short_split = write_split(whole, {0, 2, 5}, dir, "short");
  msg = error_of(short_split);
  EXPECT_TRUE(has(msg, short_split[0] + ": split.tensors.count is 6 but the 2 shards hold 5"))
      << msg;
  // A tensor in two shards.
  const auto dup = write_split(whole, {0, 3, 6}, dir, "dup");
  const auto overlap = write_split(whole, {0, 0, 3}, dir, "ov");  // its shard 2 holds 0..2
  msg = error_of({dup[0], overlap[1]});
  EXPECT_TRUE(has(msg, overlap[1] + ": tensor 'blk.0.w' is also in " + dup[0])) << msg;

  // A missing shard.
  fs::remove(paths[1]);
  msg = error_of(paths);
  EXPECT_TRUE(has(msg, paths[1] + ": shard 2 of 3 of the split GGUF " + paths[0] + " is missing"))
      << msg;
}

}  // namespace

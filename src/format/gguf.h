// GGUF v2/v3 reader: memory-mapped, every offset, count, length, shape and
// type bounds-checked before use. A malformed file throws hearth::Error whose
// message names the file, the field and the byte offset:
//   "[gguf] m.gguf: metadata key #3 'general.name': string length 1e12 runs past end of file (offset 120, file size 4096)"
// A File is immutable after open/parse and safe to read from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "format/ggml_types.h"

namespace hearth::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType type);

// One metadata value. Which member holds the payload depends on `type`:
// unsigned ints and BOOL -> u64, signed ints -> i64, floats -> f64,
// STRING -> str, ARRAY -> elem_type + arr (arrays may nest).
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0.0;
  std::string str;
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> arr;

  bool is_integer() const;
  bool is_float() const;
  // Converting accessors; throw Error(kInvalidInput) naming `what` on a type mismatch.
  int64_t as_int(std::string_view what) const;     // any integer type or BOOL
  double as_float(std::string_view what) const;    // any integer or float type
  bool as_bool(std::string_view what) const;
  const std::string& as_string(std::string_view what) const;
  const std::vector<Value>& as_array(std::string_view what) const;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the innermost (row) dimension
  uint64_t offset = 0;          // relative to the start of the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // view into the file; valid while the File lives

  uint64_t n_elements() const;
};

class File {
 public:
  // Maps and parses a file. Throws Error naming the path on any problem.
  static File open(const std::string& path);
  // Parses a buffer owned by the caller (tests, fuzzing); `name` is used in messages.
  static File parse(const uint8_t* data, size_t size, std::string name);
  // Parses bytes the File then shares ownership of (an in-memory converted model):
  // tensors' `data` point into *bytes, which lives as long as any copy of the File.
  static File parse_owned(std::shared_ptr<const std::vector<uint8_t>> bytes, std::string name);
  // Maps the shards of a split GGUF (llama.cpp's gguf-split: every shard a full GGUF with
  // `split.no`, `split.count`, `split.tensors.count`; the first holds the model's metadata),
  // in order, and joins them into one File: the first shard's metadata without the split.*
  // keys, every shard's tensors (each `data` points into its own shard's mapping, nothing
  // is copied; `offset` stays relative to that shard's data section). file_size() is the
  // shards' total. Throws Error naming the file on a missing shard, a shard of another
  // split, counts that disagree or a tensor name two shards hold. One path that is not a
  // shard opens like open().
  static File open_split(const std::vector<std::string>& paths);

  const std::string& name() const { return name_; }  // the path, or the name given to parse()
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section
  uint64_t file_size() const { return size_; }

  const std::vector<KeyValue>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;  // nullptr when absent

  // Typed look-ups; throw Error(kNotFound / kInvalidInput) naming file and key.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<double> find_float(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent

 private:
  std::string name_;
  std::shared_ptr<MappedFile> mapping_;  // null when parsed from a caller's buffer
  std::shared_ptr<const std::vector<uint8_t>> owned_;  // set by parse_owned
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<TensorInfo> tensors_;
  std::shared_ptr<const std::vector<File>> shards_;  // open_split: keeps every shard mapped

  friend class Parser;
};

}  // namespace hearth::gguf

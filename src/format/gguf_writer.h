// GGUF v2/v3 writer: a small builder for tests and tools (tiny random-weight
// models, fixtures, broken-file tests). Metadata keeps insertion order (setting
// an existing key replaces its value in place); tensors are laid out in the
// order added, each at the next multiple of the alignment. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/ggml_types.h"
#include "format/gguf.h"

namespace hearth::gguf {

// Builders of metadata values, for Writer::set_value and nested arrays.
Value make_uint(ValueType type, uint64_t v);  // UINT8/16/32/64 (truncated to the width)
Value make_int(ValueType type, int64_t v);    // INT8/16/32/64 (truncated to the width)
Value make_float(ValueType type, double v);   // FLOAT32/FLOAT64
Value make_bool(bool v);
Value make_string(std::string v);
Value make_array(ValueType elem_type, std::vector<Value> items);  // items must all be elem_type

class Writer {
 public:
  // version: 2 or 3 (the layouts are identical; only the header number differs).
  explicit Writer(uint32_t version = 3);

  // Sets a metadata key (replacing an existing one in place). Throws Error on an
  // empty key or a value whose (nested) types are inconsistent.
  void set_value(std::string_view key, Value value);
  void set_u8(std::string_view key, uint8_t v);
  void set_i8(std::string_view key, int8_t v);
  void set_u16(std::string_view key, uint16_t v);
  void set_i16(std::string_view key, int16_t v);
  void set_u32(std::string_view key, uint32_t v);
  void set_i32(std::string_view key, int32_t v);
  void set_u64(std::string_view key, uint64_t v);
  void set_i64(std::string_view key, int64_t v);
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v);
  void set_string(std::string_view key, std::string v);
  void set_array(std::string_view key, const std::vector<std::string>& items);  // of STRING
  void set_array(std::string_view key, const std::vector<int32_t>& items);      // of INT32
  void set_array(std::string_view key, const std::vector<uint32_t>& items);     // of UINT32
  void set_array(std::string_view key, const std::vector<float>& items);        // of FLOAT32
  // Removes a key if present.
  void remove(std::string_view key);

  // Sets `general.alignment` (u32) and lays tensor data out on that boundary.
  // Must be a non-zero power of two (throws Error otherwise).
  void set_alignment(uint32_t alignment);
  void set_version(uint32_t version);  // 2 or 3; throws Error otherwise

  // Adds a tensor; `shape` is in ggml order (shape[0] = row length), 1..4 non-zero
  // dims, and `bytes` must be exactly the size ggml_row_bytes gives for that shape.
  // Throws Error on a duplicate name or a size mismatch. The bytes are copied.
  void add_tensor(std::string_view name, GgmlType type, std::vector<uint64_t> shape,
                  std::span<const uint8_t> bytes);
  // Convenience for F32 tensors.
  void add_tensor_f32(std::string_view name, std::vector<uint64_t> shape,
                      std::span<const float> values);

  const std::vector<KeyValue>& metadata() const { return metadata_; }
  uint64_t alignment() const { return alignment_; }

  // The whole file as bytes / written to `path` (throws Error(kIo) naming the path).
  std::vector<uint8_t> to_bytes() const;
  void write_file(const std::string& path) const;  // streams the tensors: no second copy
  // The bytes, consuming the writer: each tensor's copy is freed as it is moved in, so
  // the peak is about one model's size, not two.
  std::vector<uint8_t> take_bytes() &&;

 private:
  std::vector<uint8_t> header_bytes() const;  // everything before the tensor data, padded
  uint64_t data_size() const;                 // the tensor data, each aligned
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> bytes;
  };
  uint32_t version_;
  uint64_t alignment_ = 32;
  std::vector<KeyValue> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace hearth::gguf

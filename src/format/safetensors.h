// Reader for Hugging Face .safetensors files: an 8-byte little-endian header length N,
// N bytes of JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
// ..., optional "__metadata__": {string: string}}), then the raw tensor data, offsets
// relative to the end of the header. Everything is checked before use: the header length
// against the file, the JSON shape of every entry, known dtypes, non-negative shapes whose
// byte size (overflow-checked) equals end - begin, offsets inside the data region, and no
// two tensors overlapping. Failures throw hearth::Error ("[safetensors] <label>: ...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace hearth::safetensors {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32" -> kF32 etc.; false for a name this reader does not know.
bool parse_dtype(const std::string& name, DType* out);
const char* dtype_name(DType t);
size_t dtype_size(DType t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data region
  const uint8_t* data = nullptr;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(end - begin); }
};

class File {
 public:
  File() = default;
  // Maps and parses a file. Throws Error naming the path.
  static File open(const std::string& path);
  // Parses bytes held in memory (copied); `label` names them in errors.
  static File parse(const uint8_t* bytes, size_t size, const std::string& label);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorInfo* find(const std::string& name) const;
  // Throws Error(kNotFound) naming the tensor and the file.
  const TensorInfo& get(const std::string& name) const;
  const std::string& label() const { return label_; }

  // Values of a floating-point tensor (F64, F32, F16, BF16) converted exactly to double,
  // or to float (F64 rounded). Throws Error(kUnsupported) for other dtypes.
  std::vector<double> to_f64(const TensorInfo& t) const;
  std::vector<float> to_f32(const TensorInfo& t) const;

 private:
  void parse_header(const uint8_t* bytes, size_t size);
  std::string label_;
  MappedFile mapped_;
  std::vector<uint8_t> owned_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hearth::safetensors

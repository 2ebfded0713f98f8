#include "model/weights.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace hearth::model {
std::string shape_str(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

ops::WeightView bind_tensor(const gguf::File& file, ops::Backend& be, const std::string& name,
                            const std::vector<uint64_t>& expect, bool optional_ok, bool* found) {
  ops::WeightView w = tensor_view(file, name, expect, optional_ok, found);
  return w.data == nullptr ? w : be.prepare_weight(w);
}

ops::WeightView tensor_view(const gguf::File& file, const std::string& name, const std::vector<uint64_t>& expect,
                            bool optional_ok, bool* found) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (found != nullptr) *found = t != nullptr;
  if (t == nullptr) {
    if (optional_ok) return {};
    fail(ErrorKind::kInvalidInput, "model", file.name() + ": tensor '" + name + "' is missing");
  }
  std::vector<uint64_t> shape = t->shape;
  while (shape.size() > expect.size() && shape.back() == 1) shape.pop_back();
  if (shape != expect) {
    fail(ErrorKind::kInvalidInput, "model", file.name() + ": tensor '" + name + "' has shape " +
                                                shape_str(t->shape) + ", expected " + shape_str(expect));
  }
  ops::WeightView w;
  w.name = name;
  w.type = t->type;
  w.data = t->data;
  w.n_cols = static_cast<int64_t>(expect[0]);
  w.n_rows = expect.size() > 1 ? static_cast<int64_t>(expect[1]) : 1;
  w.row_bytes = t->n_bytes / static_cast<uint64_t>(w.n_rows);
  return w;
}

ops::WeightView OwnedWeights::f32(const gguf::File& file, ops::Backend& be, const std::string& name,
                                  const std::vector<uint64_t>& expect) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (t == nullptr) fail(ErrorKind::kInvalidInput, "model", file.name() + ": tensor '" + name + "' is missing");
  ops::WeightView w = bind_tensor(file, be, name, expect);
  if (w.type == GgmlType::F32) return w;
  const int64_t n = w.n_cols * w.n_rows;
  std::vector<uint8_t>& buf = store_.emplace_back(static_cast<size_t>(n) * 4);
  auto* dst = reinterpret_cast<float*>(buf.data());
  const auto* src = static_cast<const uint16_t*>(w.data);
  if (w.type == GgmlType::F16) {
    f16_to_f32_row(src, dst, n);
  } else if (w.type == GgmlType::BF16) {
    bf16_to_f32_row(src, dst, n);
  } else {
    fail(ErrorKind::kUnsupported, "model", file.name() + ": tensor '" + name + "' has type " +
                                               std::string(ggml_type_name(w.type)) + "; F32, F16 or BF16 expected");
  }
  w.type = GgmlType::F32;
  w.data = dst;
  w.row_bytes = static_cast<uint64_t>(w.n_cols) * 4;
  return be.prepare_weight(w);
}

ops::WeightView OwnedWeights::cols(ops::Backend& be, const ops::WeightView& w, int64_t col0, int64_t n_cols,
                                   const std::string& name) {
  const auto skip = ggml_row_bytes(w.type, static_cast<uint64_t>(col0));
  const auto take = ggml_row_bytes(w.type, static_cast<uint64_t>(n_cols));
  if (col0 < 0 || n_cols <= 0 || col0 + n_cols > w.n_cols || !skip || !take || *skip + *take > w.row_bytes) {
    fail(ErrorKind::kInvalidInput, "model", "'" + w.name + "': columns " + std::to_string(col0) + " .. " +
                                                std::to_string(col0 + n_cols) + " of " + std::to_string(w.n_cols) +
                                                " are not whole " + std::string(ggml_type_name(w.type)) + " blocks");
  }
  std::vector<uint8_t>& buf = store_.emplace_back(static_cast<size_t>(w.n_rows) * *take);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.n_rows; ++r) {
    std::memcpy(buf.data() + static_cast<uint64_t>(r) * *take, src + static_cast<uint64_t>(r) * w.row_bytes + *skip, *take);
  }
  ops::WeightView out = w;
  out.name = name;
  out.data = buf.data();
  out.n_cols = n_cols;
  out.row_bytes = *take;
  out.backend_data = nullptr;
  out = be.prepare_weight(out);
  if (out.backend_data != nullptr) {
    std::vector<uint8_t>().swap(buf);
    out.data = nullptr;
  }
  return out;
}

ops::WeightView OwnedWeights::rows(ops::Backend& be, const ops::WeightView& w, const std::vector<int64_t>& rows,
                                   const std::string& name) {
  std::vector<uint8_t>& buf = store_.emplace_back(rows.size() * w.row_bytes);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= w.n_rows) {
      fail(ErrorKind::kInternal, "model", "row " + std::to_string(rows[i]) + " of '" + w.name + "' out of range");
    }
    std::memcpy(buf.data() + i * w.row_bytes, src + static_cast<uint64_t>(rows[i]) * w.row_bytes, w.row_bytes);
  }
  ops::WeightView out = w;
  out.name = name;
  out.data = buf.data();
  out.n_rows = static_cast<int64_t>(rows.size());
  out.backend_data = nullptr;
  out = be.prepare_weight(out);
  if (out.backend_data != nullptr) {  // the back-end reads its own copy: ours would be a second one
    std::vector<uint8_t>().swap(buf);
    out.data = nullptr;
  }
  return out;
}

}  // namespace hearth::model

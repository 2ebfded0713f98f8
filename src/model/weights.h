// Binding model weights from a GGUF file: a tensor looked up by name, its shape
// checked (trailing 1s ignored), handed to the back-end as a WeightView. Also the
// small helpers hybrid models need: a float copy of a small tensor, and views made of
// chosen rows of a matrix (copied into storage the model owns).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "ops/backend.h"

namespace hearth::model {

// "[a, b, c]": a tensor shape for messages.
std::string shape_str(const std::vector<uint64_t>& shape);

// The tensor as stored, not yet prepared by a back-end: for weights the model only copies
// rows from (OwnedWeights::rows). Errors as bind_tensor's.
ops::WeightView tensor_view(const gguf::File& file, const std::string& name, const std::vector<uint64_t>& expect,
                            bool optional_ok = false, bool* found = nullptr);

// Throws Error naming the file and tensor when it is missing (unless optional_ok: then
// an empty view, *found = false) or has another shape.
ops::WeightView bind_tensor(const gguf::File& file, ops::Backend& be, const std::string& name,
                            const std::vector<uint64_t>& expect, bool optional_ok = false, bool* found = nullptr);

// Storage for weights a model derives at load time (kept alive with the model).
class OwnedWeights {
 public:
  // The tensor as an F32 view (a copy when stored as F16/BF16; other types throw).
  ops::WeightView f32(const gguf::File& file, ops::Backend& be, const std::string& name,
                      const std::vector<uint64_t>& expect);
  // A matrix made of rows[i] of w, in that order (raw row bytes, any type). When the
  // back-end keeps its own copy (backend_data), the model's is freed and data is null.
  ops::WeightView rows(ops::Backend& be, const ops::WeightView& w, const std::vector<int64_t>& rows,
                       const std::string& name);
  // Columns col0 .. col0 + n_cols of every row of w (raw bytes: both must be whole blocks
  // of its type; throws Error naming w otherwise), as rows() keeps them.
  ops::WeightView cols(ops::Backend& be, const ops::WeightView& w, int64_t col0, int64_t n_cols,
                       const std::string& name);

 private:
  std::deque<std::vector<uint8_t>> store_;
};

}  // namespace hearth::model

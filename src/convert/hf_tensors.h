// The tensors of a Hugging Face checkpoint folder (one model.safetensors or the shards
// listed by model.safetensors.index.json), renamed to llama.cpp's GGUF names and
// transformed the way llama.cpp's convert_hf_to_gguf.py does (norm +1, -exp(A_log),
// conv squeeze, grouped->tiled V heads, qwen3next qkvz split, expert stacking, llama
// q/k permutation): docs/qwen35_gguf_layout.md lists every name and shape.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "format/ggml_types.h"
#include "format/safetensors.h"

namespace hearth::convert {

// One converted tensor, values in f32 (ggml element order: shape[0] fastest).
struct OutTensor {
  std::string name;             // GGUF name
  std::vector<uint64_t> shape;  // ggml order
  std::vector<float> data;
  safetensors::DType src_dtype = safetensors::DType::kF32;  // storage dtype it came from
  bool force_f32 = false;  // llama.cpp keeps it F32 whatever the output type
};

// The type a weight matrix with rows of `row` elements gets when `want` is asked for:
// want itself when the row is a whole number of its blocks, else (like llama.cpp) Q8_0
// for the k-quants when rows fit 32, else F16.
GgmlType fit_type(GgmlType want, uint64_t row);
// A converted tensor's bytes in `type` (which must fit its rows).
std::vector<uint8_t> encode_tensor(const OutTensor& t, GgmlType type);

// The safetensors files of a folder, by tensor name.
class HfCheckpoint {
 public:
  // Opens DIR's safetensors (the index's shards, or every *.safetensors). Throws Error
  // naming the folder when there are none, or naming the file when one is broken.
  explicit HfCheckpoint(const std::string& dir);
  struct Entry {
    const safetensors::File* file;
    const safetensors::TensorInfo* info;
  };
  const std::map<std::string, Entry>& tensors() const { return tensors_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<safetensors::File>> files_;
  std::map<std::string, Entry> tensors_;
};

// The multi-token-prediction blocks of a hybrid checkpoint: 1 + the largest N of its
// mtp.layers.N.* tensors (0 when it has none, or for other families).
int64_t count_mtp_layers(const HfConfig& cfg, const HfCheckpoint& ckpt);

// Values of a floating-point safetensors tensor as f32. Throws Error(kUnsupported)
// naming the file and tensor for an integer or bool dtype.
std::vector<float> tensor_to_f32(const safetensors::File& file, const safetensors::TensorInfo& t);

struct ConvertLog {
  size_t skipped_vision = 0, mtp_tensors = 0;
};

// Converts every tensor the config calls for, handing each to `emit` in GGUF order.
// Throws Error naming the file and tensor on a missing tensor, a shape that disagrees
// with config.json, an unsupported dtype, or a tensor the conversion does not know.
ConvertLog convert_tensors(const HfConfig& cfg, const HfCheckpoint& ckpt,
                           const std::function<void(OutTensor&&)>& emit);

// The grouped -> tiled V-head permutation llama.cpp applies for qwen35/qwen35moe:
// returns perm with out[new] = in[perm[new]] over n_k*r blocks of head_dim elements.
std::vector<int64_t> tiled_v_order(int64_t n_k, int64_t r, int64_t head_dim);

}  // namespace hearth::convert

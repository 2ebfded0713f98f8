// Tensor element types as ggml numbers them in GGUF files, with their block
// layout. A type known here can be read and inspected; whether it can be
// dequantized is a separate question (quant/dequant_ref.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hearth {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // as ggml prints it: "q4_K", "f16", ...
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

// Traits of a known type id, or nullopt for an id ggml does not define (or removed).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
// Traits of a known type; never fails.
const GgmlTypeTraits& ggml_traits(GgmlType type);
std::string_view ggml_type_name(GgmlType type);

// Bytes of one row of n_elements, or nullopt when n_elements is not a whole
// number of blocks.
std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n_elements);

}  // namespace hearth

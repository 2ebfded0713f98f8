#include "format/ggml_types.h"

#include <array>

namespace hearth {
namespace {

// Block sizes and byte sizes from ggml's block structs (ggml-common.h):
// QK_K = 256 for the K-quants and IQ types, 32 for the legacy quants.
constexpr std::array kTraits = {
    GgmlTypeTraits{GgmlType::F32, "f32", 1, 4},
    GgmlTypeTraits{GgmlType::F16, "f16", 1, 2},
    GgmlTypeTraits{GgmlType::Q4_0, "q4_0", 32, 18},
    GgmlTypeTraits{GgmlType::Q4_1, "q4_1", 32, 20},
    GgmlTypeTraits{GgmlType::Q5_0, "q5_0", 32, 22},
    GgmlTypeTraits{GgmlType::Q5_1, "q5_1", 32, 24},
    GgmlTypeTraits{GgmlType::Q8_0, "q8_0", 32, 34},
    GgmlTypeTraits{GgmlType::Q8_1, "q8_1", 32, 36},
    GgmlTypeTraits{GgmlType::Q2_K, "q2_K", 256, 84},
    GgmlTypeTraits{GgmlType::Q3_K, "q3_K", 256, 110},
    GgmlTypeTraits{GgmlType::Q4_K, "q4_K", 256, 144},
    GgmlTypeTraits{GgmlType::Q5_K, "q5_K", 256, 176},
    GgmlTypeTraits{GgmlType::Q6_K, "q6_K", 256, 210},
    GgmlTypeTraits{GgmlType::Q8_K, "q8_K", 256, 292},
    GgmlTypeTraits{GgmlType::IQ2_XXS, "iq2_xxs", 256, 66},
    GgmlTypeTraits{GgmlType::IQ2_XS, "iq2_xs", 256, 74},
    GgmlTypeTraits{GgmlType::IQ3_XXS, "iq3_xxs", 256, 98},
    GgmlTypeTraits{GgmlType::IQ1_S, "iq1_s", 256, 50},
    GgmlTypeTraits{GgmlType::IQ4_NL, "iq4_nl", 32, 18},
    GgmlTypeTraits{GgmlType::IQ3_S, "iq3_s", 256, 110},
    GgmlTypeTraits{GgmlType::IQ2_S, "iq2_s", 256, 82},
    GgmlTypeTraits{GgmlType::IQ4_XS, "iq4_xs", 256, 136},
    GgmlTypeTraits{GgmlType::I8, "i8", 1, 1},
    GgmlTypeTraits{GgmlType::I16, "i16", 1, 2},
    GgmlTypeTraits{GgmlType::I32, "i32", 1, 4},
    GgmlTypeTraits{GgmlType::I64, "i64", 1, 8},
    GgmlTypeTraits{GgmlType::F64, "f64", 1, 8},
    GgmlTypeTraits{GgmlType::IQ1_M, "iq1_m", 256, 56},
    GgmlTypeTraits{GgmlType::BF16, "bf16", 1, 2},
    GgmlTypeTraits{GgmlType::TQ1_0, "tq1_0", 256, 54},
    GgmlTypeTraits{GgmlType::TQ2_0, "tq2_0", 256, 66},
    GgmlTypeTraits{GgmlType::MXFP4, "mxfp4", 32, 17},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  }
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  return kTraits[0];  // unreachable for valid enum values
}

std::string_view ggml_type_name(GgmlType type) { return ggml_traits(type).name; }

std::optional<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n_elements) {
  const auto& t = ggml_traits(type);
  if (n_elements % t.block_size != 0) return std::nullopt;
  return n_elements / t.block_size * t.type_size;
}

}  // namespace hearth

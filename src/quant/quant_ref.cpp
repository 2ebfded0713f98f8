// Dispatch of quantize_row_ref to the per-type reference kernels, with the
// input checks (type supported, n a whole number of blocks).
#include "quant/quant_ref.h"

#include <string>

#include "core/error.h"
#include "quant/quant_kernels.h"

namespace hearth {
namespace {

using Kernel = void (*)(const float*, uint8_t*, int64_t);

struct Entry {
  GgmlType type;
  Kernel kernel;
  bool per_element;  // float types take n elements, block types take n blocks
};

constexpr Entry kKernels[] = {
    {GgmlType::F32, quant::quant_f32, true},       {GgmlType::F16, quant::quant_f16, true},
    {GgmlType::BF16, quant::quant_bf16, true},     {GgmlType::Q4_0, quant::quant_q4_0, false},
    {GgmlType::Q4_1, quant::quant_q4_1, false},    {GgmlType::Q5_0, quant::quant_q5_0, false},
    {GgmlType::Q5_1, quant::quant_q5_1, false},    {GgmlType::Q8_0, quant::quant_q8_0, false},
    {GgmlType::Q8_1, quant::quant_q8_1, false},    {GgmlType::Q2_K, quant::quant_q2_k, false},
    {GgmlType::Q3_K, quant::quant_q3_k, false},    {GgmlType::Q4_K, quant::quant_q4_k, false},
    {GgmlType::Q5_K, quant::quant_q5_k, false},    {GgmlType::Q6_K, quant::quant_q6_k, false},
    {GgmlType::Q8_K, quant::quant_q8_k, false},    {GgmlType::MXFP4, quant::quant_mxfp4, false},
    {GgmlType::IQ4_NL, quant::quant_iq4_nl, false},
};

const Entry* find_kernel(GgmlType type) {
  for (const auto& e : kKernels) {
    if (e.type == type) return &e;
  }
  return nullptr;
}

}  // namespace

bool can_quantize(GgmlType type) { return find_kernel(type) != nullptr; }

void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n) {
  const Entry* e = find_kernel(type);
  const std::string name(ggml_type_name(type));
  if (e == nullptr) {
    fail(ErrorKind::kUnsupported, "quant", "no reference quantizer for tensor type " + name + " (id " +
         std::to_string(static_cast<uint32_t>(type)) + ")");
  }
  const int64_t block = ggml_traits(type).block_size;
  if (n < 0 || n % block != 0) {
    fail(ErrorKind::kInvalidInput, "quant", "type " + name + ": " + std::to_string(n) +
         " elements is not a whole number of blocks of " + std::to_string(block));
  }
  e->kernel(src, static_cast<uint8_t*>(dst), e->per_element ? n : n / block);
}

}  // namespace hearth

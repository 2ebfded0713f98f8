// Dispatch of dequantize_row_ref to the per-type reference kernels, with the
// input checks (type supported, n a whole number of blocks).
#include "quant/dequant_ref.h"

#include <string>

#include "core/error.h"
#include "quant/dequant_kernels.h"

namespace hearth {
namespace {

using Kernel = void (*)(const uint8_t*, float*, int64_t);

struct Entry {
  GgmlType type;
  Kernel kernel;
  bool per_element;  // float types take n elements, block types take n blocks
};

constexpr Entry kKernels[] = {
    {GgmlType::F32, quant::dequant_f32, true},       {GgmlType::F16, quant::dequant_f16, true},
    {GgmlType::BF16, quant::dequant_bf16, true},     {GgmlType::Q4_0, quant::dequant_q4_0, false},
    {GgmlType::Q4_1, quant::dequant_q4_1, false},    {GgmlType::Q5_0, quant::dequant_q5_0, false},
    {GgmlType::Q5_1, quant::dequant_q5_1, false},    {GgmlType::Q8_0, quant::dequant_q8_0, false},
    {GgmlType::Q8_1, quant::dequant_q8_1, false},    {GgmlType::Q2_K, quant::dequant_q2_k, false},
    {GgmlType::Q3_K, quant::dequant_q3_k, false},    {GgmlType::Q4_K, quant::dequant_q4_k, false},
    {GgmlType::Q5_K, quant::dequant_q5_k, false},    {GgmlType::Q6_K, quant::dequant_q6_k, false},
    {GgmlType::Q8_K, quant::dequant_q8_k, false},    {GgmlType::IQ4_NL, quant::dequant_iq4_nl, false},
    {GgmlType::MXFP4, quant::dequant_mxfp4, false},
};

const Entry* find_kernel(GgmlType type) {
  for (const auto& e : kKernels) {
    if (e.type == type) return &e;
  }
  return nullptr;
}

}  // namespace

bool can_dequantize(GgmlType type) { return find_kernel(type) != nullptr; }

void dequantize_row_ref(GgmlType type, const void* src, float* dst, int64_t n) {
  const Entry* e = find_kernel(type);
  const std::string name(ggml_type_name(type));
  if (e == nullptr) {
    fail(ErrorKind::kUnsupported, "dequant", "tensor type " + name + " (id " +
         std::to_string(static_cast<uint32_t>(type)) + ") cannot be dequantized");
  }
  const int64_t block = ggml_traits(type).block_size;
  if (n < 0 || n % block != 0) {
    fail(ErrorKind::kInvalidInput, "dequant", "type " + name + ": " + std::to_string(n) +
         " elements is not a whole number of blocks of " + std::to_string(block));
  }
  const auto* bytes = static_cast<const uint8_t*>(src);
  e->kernel(bytes, dst, e->per_element ? n : n / block);
}

}  // namespace hearth

// Reference (scalar, portable) quantization of f32 rows into ggml block types,
// reproducing what ggml_quantize_chunk writes without an importance matrix
// (the `quantize_row_*_ref` code of ggml-quants.c; for IQ4_NL its 7-try
// search) operation for operation, so the bytes are identical to ggml's.
// Used to build test models and as the oracle for faster quantizers.
#pragma once

#include <cstdint>

#include "format/ggml_types.h"

namespace hearth {

// True when quantize_row_ref supports `type`.
bool can_quantize(GgmlType type);

// Quantizes n floats (a whole number of blocks of `type`) from src into
// n / block_size blocks at dst (any alignment; ggml_row_bytes(type, n) bytes).
// Inputs must be finite. Throws Error(kUnsupported) naming the type when the
// type is not supported, Error(kInvalidInput) when n is negative or not a
// multiple of the block size. Thread-safe; src and dst must not overlap.
void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace hearth

// Reference (scalar, portable) dequantization of ggml tensor types to f32.
// Each kernel is a plain loop over ggml's block layout and performs the same
// float operations in the same order as ggml's C reference `dequantize_row_*`
// (ggml-quants.c), so results are bit-identical with ggml. They are the oracle
// for faster back-end kernels, not the fast path themselves.
#pragma once

#include <cstdint>

#include "format/ggml_types.h"

namespace hearth {

// True when dequantize_row_ref supports `type`.
bool can_dequantize(GgmlType type);

// Dequantizes n elements (a whole number of blocks of `type`) from the raw
// block bytes at src (any alignment, little-endian) into dst[0..n).
// Throws Error(kUnsupported) naming the type when the type is not supported,
// and Error(kInvalidInput) when n is negative or not a multiple of the block size.
// Thread-safe; src and dst must not overlap.
void dequantize_row_ref(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace hearth

// Scans of a logits row that every sampled token pays for (a 248k-entry row is 1 MB):
// written so that the compiler vectorises them (fixed-size blocks of integer compares),
// with the exact results of the plain loops they replace.
#pragma once

#include <cstdint>
#include <span>

namespace hearth::engine {

// Index of the first value that is NaN or infinite, -1 when every value is finite
// (what a loop over std::isfinite returns).
int64_t first_non_finite(std::span<const float> v);

// Index of the first largest value (std::max_element's), -1 for an empty row.
int64_t argmax_first(std::span<const float> v);

// out[i] = exp((x[i] - shift) * scale) for (x[i] - shift) * scale <= 0 (shift the row's
// largest value, scale > 0): within 2e-6 of std::exp, 0 below exp(-87) and for -inf
// (masked tokens). A polynomial in fixed blocks that vectorises: ~3x std::exp's speed on
// a 248k-entry row. out holds x.size() floats.
void exp_shifted(std::span<const float> x, float shift, float scale, float* out);
// exp_shifted's value for one x, bit for bit (the same roundings, one at a time): for the
// few candidates of a ranked draw, where a back-end may repeat the arithmetic.
float exp_shifted_one(float x, float shift, float scale);

}  // namespace hearth::engine

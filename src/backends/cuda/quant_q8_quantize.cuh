// The 8-bit activation quantizer of quant_q8.cu, for the other CUDA sources that
// multiply such activations (quant_mmq.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

// x: [n_rows, n_cols] (n_cols a multiple of 32) in chunks of 32 values: xq the int8
// quants, xd per chunk (d, d * sum q) with value = d * q.
void q8_quantize(const float* x, int64_t n_rows, int64_t n_cols, int8_t* xq, float2* xd, cudaStream_t stream);

}  // namespace hearth::cuda

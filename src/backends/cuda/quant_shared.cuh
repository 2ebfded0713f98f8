// Helpers the quantized-product sources share (defined in quant_q8.cu and quant_gemm.cu).
// Internal to src/backends/cuda/quant_*.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::cuda {

// x: [n_rows, n_cols] (n_cols a multiple of 32) in chunks of 32 values: xq the int8
// quants, xd per chunk (d, d * sum q) with value = d * q. (quant_q8.cu)
void q8_quantize(const float* x, int64_t n_rows, int64_t n_cols, int8_t* xq, float2* xd, cudaStream_t stream);

// y[i] = the sum over splits, in split order, of part[s * n + i]. (quant_gemm.cu)
void sum_splits(const float* part, int n_splits, int64_t n, float* y, cudaStream_t stream);

// Multiprocessors of the current device (queried once). (quant_gemm.cu)
int device_sm_count();

}  // namespace hearth::cuda

// Shared by the CUDA back-end's .cu files: error checks and launch helpers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/quant_cuda.h"

namespace hearth::cuda {

// Throws "[cuda] op: what: <runtime message>" unless the call succeeded.
#define HEARTH_CUDA_CHECK(op, expr) ::hearth::cuda::LaunchRuntime::check(static_cast<int>(expr), op, #expr)
// After a kernel launch: reports a bad configuration or an earlier asynchronous fault.
#define HEARTH_CUDA_LAUNCHED(op) ::hearth::cuda::LaunchRuntime::check(static_cast<int>(cudaGetLastError()), op, "launch")

constexpr int kThreads = 256;

// Throws "[cuda] op: what: <cuBLAS message>" unless status is CUBLAS_STATUS_SUCCESS.
void check_cublas(int status, const char* op, const char* what);
// The device weight of a prepared view; throws naming `op` when w was not prepared.
DeviceWeight device_weight(const ops::WeightView& w, const char* op);

// Blocks of kThreads covering n items (grid-stride loops take the rest).
inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `red` is __shared__ float[32]; the call synchronises the block.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read from an earlier call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(s);
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace hearth::cuda

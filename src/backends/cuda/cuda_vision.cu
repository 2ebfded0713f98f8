// CudaBackend's vision-tower operations: layer_norm (one block per row, mean and
// variance by block sums) and gelu (exact and tanh forms, element-wise); attention_full
// is in cuda_vision_attention.cu.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/launch.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

#define VISION_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

int norm_threads(int64_t n) {
  int t = 32;
  while (t < 256 && t < n) t *= 2;
  return t;
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, red) / static_cast<float>(n);
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = xr[i] - mean;
    ss += d * d;
  }
  // block_sum synchronises: every read of the row is done before y (which may be x) is written.
  const float inv = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

__global__ void gelu_kernel(float* x, int64_t n, bool tanh_approx) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  VISION_GRID_LOOP(i, n) {
    const float v = x[i];
    x[i] = tanh_approx ? 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))
                       : 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
  }
}

}  // namespace

void CudaBackend::layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias,
                             int64_t n_rows, int64_t n, float eps, float* y) {
  OpTimer timer(rt_, "layer_norm");
  // Both must be F32 (backend.h): f32_values dequantizes other types into one scratch,
  // which the second call would overwrite.
  if (weight.type != GgmlType::F32 || bias.type != GgmlType::F32) {
    fail(ErrorKind::kUnsupported, "cuda", "layer_norm: weight '" + weight.name + "' and bias '" + bias.name +
                                              "' must be F32");
  }
  const float* w = f32_values(weight, n, "layer_norm");
  const float* b = f32_values(bias, n, "layer_norm");
  if (n_rows <= 0 || n <= 0) return;
  if (rt_.skip_launch()) {
    return;
  }
  ::hearth::cuda::launch_pdl(layer_norm_kernel, static_cast<unsigned>(n_rows), norm_threads(n), 0, stream_, x, w, b, n,
                             eps, y);
  HEARTH_CUDA_LAUNCHED("layer_norm");
}

void CudaBackend::gelu(float* x, int64_t n, bool tanh_approx) {
  OpTimer timer(rt_, "gelu");
  if (n <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(gelu_kernel, grid_for(n), kThreads, 0, stream_, x, n, tanh_approx);
  HEARTH_CUDA_LAUNCHED("gelu");
}

}  // namespace hearth::cuda

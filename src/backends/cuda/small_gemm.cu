#include "backends/cuda/small_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

constexpr int kTile = 32;       // rows and tokens per block
constexpr int kThreads = 256;   // 32 rows x 8 token lanes; each thread 4 tokens
constexpr int kTargetBlocks = 264;  // two per multiprocessor of an H100 / H200
constexpr int64_t kMinSplitCols = 128;
// Columns staged a round. 128, measured on the H200 against 32 (decode steps, ms, 32 ->
// 128): Qwen3.5-9B 16 sequences 7.49 -> 7.37, 64 14.18 -> 13.91; a Qwen3.5-35B-A3B-shaped
// file of 8 layers 16 sequences 2.66 -> 2.58, 64 5.23 -> 5.15 (a router's split of 128
// columns is one round of loads).
constexpr int kStep = 128;

// Block (rx, ty, s): rows [32 rx, +32) x tokens [32 ty, +32) over columns
// [s * span, (s + 1) * span); out[s] gets its partial sums (out = y when one split).
// kStep columns are staged at a time (each a round of loads the block waits for); every
// output sums its columns in order whatever kStep is, so the bits do not depend on it.
__global__ void __launch_bounds__(kThreads)
    small_gemm_kernel(const float* __restrict__ w, int64_t ldw, int64_t n_rows, int64_t n_cols,
                      const float* __restrict__ x, int64_t n_tokens, int64_t span, float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float ws[kTile][kStep + 1];
  __shared__ float xs[kTile][kStep + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, t0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c_begin = static_cast<int64_t>(blockIdx.z) * span;
  const int64_t c_end = c_begin + span < n_cols ? c_begin + span : n_cols;
  const int row = threadIdx.x & 31, lane_t = threadIdx.x >> 5;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t k0 = c_begin; k0 < c_end; k0 += kStep) {
#pragma unroll
    for (int i = 0; i < kTile * kStep / kThreads; ++i) {
      const int e = threadIdx.x + kThreads * i, rr = e / kStep, cc = e % kStep;
      const int64_t c = k0 + cc;
      const bool in_c = c < c_end;
      ws[rr][cc] = in_c && r0 + rr < n_rows ? w[(r0 + rr) * ldw + c] : 0.f;
      xs[rr][cc] = in_c && t0 + rr < n_tokens ? x[(t0 + rr) * n_cols + c] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kStep; ++kk) {
      const float wv = ws[row][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] += wv * xs[lane_t + 8 * j][kk];
    }
    __syncthreads();
  }
  const int64_t r = r0 + row;
  if (r >= n_rows) return;
  float* o = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t t = t0 + lane_t + 8 * j;
    if (t < n_tokens) o[t * n_rows + r] = acc[j];
  }
}

__global__ void sum_splits_kernel(const float* __restrict__ part, int splits, int64_t n, float* __restrict__ y) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = part[i];
    for (int k = 1; k < splits; ++k) s += part[k * n + i];
    y[i] = s;
  }
}

// Column splits from the weight's shape alone (so a token's result is the same in any
// batch): enough blocks for the GPU with two token tiles (a decode batch of up to 64
// tokens; a MoE router of 256 rows took 2 splits of 1,024 columns, ~40 us a call), each
// split at least kMinSplitCols wide; spans are whole steps, so the last split may be unused.
int64_t span_for(int64_t n_rows, int64_t n_cols) {
  const int64_t row_tiles = (n_rows + kTile - 1) / kTile;
  const int64_t by_cols = std::max<int64_t>(1, n_cols / kMinSplitCols);
  const int64_t splits = std::clamp<int64_t>(kTargetBlocks / 2 / std::max<int64_t>(row_tiles, 1), 1, by_cols);
  const int64_t span = (n_cols + splits - 1) / splits;
  return (span + 31) / 32 * 32;  // whole 32-column steps
}

int64_t splits_used(int64_t n_rows, int64_t n_cols) {
  const int64_t span = span_for(n_rows, n_cols);
  return (n_cols + span - 1) / span;
}

}  // namespace

size_t small_gemm_scratch_bytes(int64_t n_rows, int64_t n_cols, int64_t n_tokens) {
  if (n_rows <= 0 || n_cols <= 0 || n_tokens <= 0) return 0;
  const int64_t used = splits_used(n_rows, n_cols);
  return used == 1 ? 0 : sizeof(float) * static_cast<size_t>(used) * static_cast<size_t>(n_rows * n_tokens);
}

void small_gemm(const float* w, int64_t ldw, int64_t n_rows, int64_t n_cols, const float* x, int64_t n_tokens,
                float* y, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (n_rows < 0 || n_cols <= 0 || n_tokens < 0 || ldw < n_cols) {
    fail(ErrorKind::kInvalidInput, "cuda small_gemm",
         "bad shape: " + std::to_string(n_rows) + " x " + std::to_string(n_cols) + " (stride " + std::to_string(ldw) +
             "), " + std::to_string(n_tokens) + " tokens");
  }
  if (n_rows == 0 || n_tokens == 0) return;
  if (n_tokens > int64_t{65535} * kTile || n_rows > int64_t{1} << 36) {
    fail(ErrorKind::kInvalidInput, "cuda small_gemm", "too many tokens or rows for one launch");
  }
  const int64_t span = span_for(n_rows, n_cols);
  const int used = static_cast<int>(splits_used(n_rows, n_cols));
  if (used > 1 && (scratch == nullptr || scratch_bytes < small_gemm_scratch_bytes(n_rows, n_cols, n_tokens))) {
    fail(ErrorKind::kInvalidInput, "cuda small_gemm", "scratch must hold small_gemm_scratch_bytes");
  }
  const dim3 grid(static_cast<unsigned>((n_rows + kTile - 1) / kTile), static_cast<unsigned>((n_tokens + kTile - 1) / kTile),
                  static_cast<unsigned>(used));
  float* out = used == 1 ? y : static_cast<float*>(scratch);
  ::hearth::cuda::launch_pdl(small_gemm_kernel, grid, kThreads, 0, stream, w, ldw, n_rows, n_cols, x, n_tokens, span,
                             out);
  if (used > 1) {
    const int64_t n = n_rows * n_tokens;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
    ::hearth::cuda::launch_pdl(sum_splits_kernel, blocks, 256, 0, stream, out, used, n, y);
  }
}

}  // namespace hearth::cuda

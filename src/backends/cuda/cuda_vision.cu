// CudaBackend's vision-tower operations: layer_norm (one block per row, mean and
// variance by block sums), gelu (exact and tanh forms, element-wise) and attention_full,
// a tiled online-softmax ("flash") kernel in f32: a block of kFullQ threads takes kFullQ
// query rows of one segment and head, one row per thread (its scaled query and its
// output in registers), and walks the segment's keys kFullK at a time through shared
// memory (keys and values zero-padded to the compiled head size), keeping each row's
// running max and sum, so no score matrix is ever written out.
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

constexpr int kFullQ = 64;  // query rows (threads) per block
constexpr int kFullK = 32;  // keys per shared-memory tile

// A block's query rows: rows row0 .. row0 + kFullQ - 1 (those inside the segment) of the
// segment of rows seg0 .. seg0 + seg_n - 1.
struct FullTile {
  int32_t seg0, seg_n, row0;
};

// kD: the compiled head size (a multiple of 4, >= head_dim; the rest zero-padded). q is
// scaled by scale * log2(e) so the softmax runs on exp2f.
template <int kD>
__global__ void __launch_bounds__(kFullQ) attention_full_kernel(const float* __restrict__ q,
                                                                const float* __restrict__ k,
                                                                const float* __restrict__ v, const FullTile* tiles,
                                                                int n_head, int head_dim, float scale_log2,
                                                                float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ __align__(16) float ks[kFullK][kD];
  __shared__ __align__(16) float vs[kFullK][kD];
  const FullTile tile = tiles[blockIdx.x];
  const int h = blockIdx.y;
  const int64_t stride = static_cast<int64_t>(n_head) * head_dim;
  const int seg_end = tile.seg0 + tile.seg_n;
  const int r = tile.row0 + static_cast<int>(threadIdx.x);
  const bool active = r < seg_end;
  float qr[kD], o[kD];
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    qr[d] = active && d < head_dim ? q[r * stride + h * head_dim + d] * scale_log2 : 0.0f;
    o[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int j0 = tile.seg0; j0 < seg_end; j0 += kFullK) {
    const int nk = min(kFullK, seg_end - j0);
    __syncthreads();  // the last tile is read by every thread
    for (int e = threadIdx.x; e < kFullK * kD; e += kFullQ) {
      const int j = e / kD, d = e % kD;
      const bool in = j < nk && d < head_dim;
      const int64_t g = static_cast<int64_t>(j0 + j) * stride + h * head_dim + d;
      ks[j][d] = in ? k[g] : 0.0f;
      vs[j][d] = in ? v[g] : 0.0f;
    }
    __syncthreads();
    float s[kFullK];
    float mt = m;
#pragma unroll
    for (int j = 0; j < kFullK; ++j) {
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
      for (int d = 0; d < kD; d += 4) {
        const float4 kk = *reinterpret_cast<const float4*>(&ks[j][d]);
        a0 = fmaf(qr[d], kk.x, a0);
        a1 = fmaf(qr[d + 1], kk.y, a1);
        a2 = fmaf(qr[d + 2], kk.z, a2);
        a3 = fmaf(qr[d + 3], kk.w, a3);
      }
      s[j] = j < nk ? (a0 + a1) + (a2 + a3) : -INFINITY;
      mt = fmaxf(mt, s[j]);
    }
    const float corr = exp2f(m - mt);  // 0 on the first tile (m = -inf)
    l *= corr;
#pragma unroll
    for (int d = 0; d < kD; ++d) o[d] *= corr;
#pragma unroll
    for (int j = 0; j < kFullK; ++j) {
      const float p = exp2f(s[j] - mt);  // 0 for keys past the segment
      l += p;
#pragma unroll
      for (int d = 0; d < kD; d += 4) {
        const float4 vv = *reinterpret_cast<const float4*>(&vs[j][d]);
        o[d] = fmaf(p, vv.x, o[d]);
        o[d + 1] = fmaf(p, vv.y, o[d + 1]);
        o[d + 2] = fmaf(p, vv.z, o[d + 2]);
        o[d + 3] = fmaf(p, vv.w, o[d + 3]);
      }
    }
    m = mt;
  }
  if (!active) return;
  const float inv = 1.0f / l;
  float* orow = out + r * stride + h * head_dim;
#pragma unroll
  for (int d = 0; d < kD; ++d) {
    if (d < head_dim) orow[d] = o[d] * inv;
  }
}

}  // namespace

void CudaBackend::layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias,
                             int64_t n_rows, int64_t n, float eps, float* y) {
  OpTimer timer(*this, "layer_norm");
  // Both must be F32 (backend.h): f32_values dequantizes other types into one scratch,
  // which the second call would overwrite.
  if (weight.type != GgmlType::F32 || bias.type != GgmlType::F32) {
    fail(ErrorKind::kUnsupported, "cuda", "layer_norm: weight '" + weight.name + "' and bias '" + bias.name +
                                              "' must be F32");
  }
  const float* w = f32_values(weight, n, "layer_norm");
  const float* b = f32_values(bias, n, "layer_norm");
  if (n_rows <= 0 || n <= 0) return;
  if (skip_launch("layer_norm", {sig_of(x), sig_of(w), sig_of(b), sig_of(n_rows), sig_of(n), sig_of(eps), sig_of(y)})) {
    return;
  }
  ::hearth::cuda::launch_pdl(layer_norm_kernel, static_cast<unsigned>(n_rows), norm_threads(n), 0, stream_, x, w, b, n,
                             eps, y);
  HEARTH_CUDA_LAUNCHED("layer_norm");
}

void CudaBackend::gelu(float* x, int64_t n, bool tanh_approx) {
  OpTimer timer(*this, "gelu");
  if (n <= 0) return;
  if (skip_launch("gelu", {sig_of(x), sig_of(n), sig_of(tanh_approx)})) return;
  ::hearth::cuda::launch_pdl(gelu_kernel, grid_for(n), kThreads, 0, stream_, x, n, tanh_approx);
  HEARTH_CUDA_LAUNCHED("gelu");
}

void CudaBackend::attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs,
                                 int64_t n_segs, int64_t n_head, int64_t head_dim, float scale, float* out) {
  OpTimer timer(*this, "attention_full");
  if (head_dim <= 0 || head_dim > 128 || n_head <= 0 || n_head > 65535) {
    fail(ErrorKind::kUnsupported, "cuda", "attention_full: head size " + std::to_string(head_dim) + " x " +
                                              std::to_string(n_head) + " heads (at most 128 x 65535)");
  }
  std::vector<FullTile> tiles;
  for (int64_t s = 0; s < n_segs; ++s) {
    const ops::FullAttentionSeg& sg = segs[s];
    if (sg.first_row < 0 || sg.n_rows < 0 || sg.first_row + sg.n_rows > (int64_t{1} << 30)) {
      fail(ErrorKind::kInvalidInput, "cuda", "attention_full: segment " + std::to_string(s) + " (rows " +
                                                 std::to_string(sg.first_row) + " + " + std::to_string(sg.n_rows) +
                                                 ") out of range");
    }
    for (int64_t r = 0; r < sg.n_rows; r += kFullQ) {
      tiles.push_back({static_cast<int32_t>(sg.first_row), static_cast<int32_t>(sg.n_rows),
                       static_cast<int32_t>(sg.first_row + r)});
    }
  }
  if (tiles.empty()) return;
  const auto n_tiles = static_cast<int64_t>(tiles.size());
  const FullTile* d_tiles = stage_array(tiles.data(), n_tiles, "attention_full");
  const float scale_log2 = scale * 1.4426950408889634f;
  const int kd = head_dim <= 16 ? 16 : head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 72 ? 72
               : head_dim <= 80 ? 80 : head_dim <= 96 ? 96 : 128;
  if (skip_launch("attention_full", {sig_of(q), sig_of(k), sig_of(v), sig_of(d_tiles), sig_of(n_tiles), sig_of(n_head),
                                     sig_of(head_dim), sig_of(scale), sig_of(out)})) {
    return;
  }
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_head));
  const int nh = static_cast<int>(n_head), hd = static_cast<int>(head_dim);
  switch (kd) {
    case 16:
      ::hearth::cuda::launch_pdl(attention_full_kernel<16>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
    case 32:
      ::hearth::cuda::launch_pdl(attention_full_kernel<32>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
    case 64:
      ::hearth::cuda::launch_pdl(attention_full_kernel<64>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
    case 72:
      ::hearth::cuda::launch_pdl(attention_full_kernel<72>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
    case 80:
      ::hearth::cuda::launch_pdl(attention_full_kernel<80>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
    case 96:
      ::hearth::cuda::launch_pdl(attention_full_kernel<96>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
    default:
      ::hearth::cuda::launch_pdl(attention_full_kernel<128>, grid, kFullQ, 0, stream_, q, k, v, d_tiles, nh, hd, scale_log2, out);
      break;
  }
  HEARTH_CUDA_LAUNCHED("attention_full");
}

}  // namespace hearth::cuda

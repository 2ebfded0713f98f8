// CudaBackend::attention_full, the vision tower's non-causal attention within segments
// (one image each), on the f16 tensor cores in the flash-attention style.
//
// Two launches. A split pass writes each head's K and V rows as f16 pairs x = hi + lo
// (hi = f16(x), lo = f16(x - hi)) in head-major arrays [head][row][DP], the head size
// zero-padded to DP (a multiple of 16: 72 -> 80). The attention kernel then gives a block
// of 4 warps 64 query rows of one segment and head (warp w rows 16 w .. 16 w + 15; q
// scaled by scale * log2(e) and split the same way) and walks the segment's keys in
// chunks of 32, double-buffered by cp.async: each warp computes its 16 x 32 scores with
// mma.m16n8k16, updates its online softmax (exp2f) in registers, and adds the chunk's
// weighted values to its 16 x DP accumulator; no score matrix is ever written out.
//
// Precision: every product is taken as hi*hi + lo*hi + hi*lo (three MMAs; the dropped
// lo*lo term is below 2^-22 of it) with f32 accumulation, so scores and outputs stay
// within f32 rounding of the CPU kernel (backend_parity_vision: 2e-5), as the f32
// CUDA-core kernel this replaces did, at about a fifth of its time for a 1024 x 1024 image.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

constexpr int kRows = 64;   // query rows per block (16 per warp)
constexpr int kWarps = kRows / 16;
constexpr int kKeys = 32;   // keys per chunk
constexpr int kStages = 2;  // chunk buffers in flight

// A block's query rows: rows row0 .. row0 + kRows - 1 (those inside the segment) of the
// segment of rows seg0 .. seg0 + seg_n - 1.
struct FullTile {
  int32_t seg0, seg_n, row0;
};

// k, v: [n_rows, n_head, head_dim] f32 -> kh, kl, vh, vl: [n_head][n_rows][dp] f16, the
// columns past head_dim zero. One thread per (row, head, column pair).
__global__ void split_kv_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t n_rows, int n_head,
                                int head_dim, int dp, __half* __restrict__ kh, __half* __restrict__ kl,
                                __half* __restrict__ vh, __half* __restrict__ vl) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int pairs = dp / 2;
  const int64_t n = n_rows * n_head * pairs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int d = 2 * static_cast<int>(i % pairs);
    const int64_t rh = i / pairs;  // row * n_head + head
    const int h = static_cast<int>(rh % n_head);
    const int64_t row = rh / n_head;
    const int64_t src = rh * head_dim + d;
    const float k0 = d < head_dim ? k[src] : 0.0f, k1 = d + 1 < head_dim ? k[src + 1] : 0.0f;
    const float v0 = d < head_dim ? v[src] : 0.0f, v1 = d + 1 < head_dim ? v[src + 1] : 0.0f;
    unsigned hi, lo;
    const int64_t dst = (static_cast<int64_t>(h) * n_rows + row) * dp + d;
    split_pair(k0, k1, hi, lo);
    *reinterpret_cast<unsigned*>(kh + dst) = hi;
    *reinterpret_cast<unsigned*>(kl + dst) = lo;
    split_pair(v0, v1, hi, lo);
    *reinterpret_cast<unsigned*>(vh + dst) = hi;
    *reinterpret_cast<unsigned*>(vl + dst) = lo;
  }
}

template <int DP>
constexpr size_t smem_bytes() {
  return sizeof(__half) * static_cast<size_t>(2 * kRows + 4 * kStages * kKeys) * (DP + 8);
}

template <int DP>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attention_full_tc_kernel(const float* __restrict__ q, const __half* __restrict__ kh, const __half* __restrict__ kl,
                             const __half* __restrict__ vh, const __half* __restrict__ vl,
                             const FullTile* __restrict__ tiles, int64_t n_rows, int n_head, int head_dim,
                             float scale_log2, float* __restrict__ out) {
  constexpr int DS = DP + 8;  // shared row stride in halves: 16 bytes of padding, conflict-free ldmatrix
  constexpr int NT = DP / 8;  // 8-wide column tiles of the output
  constexpr int NS = kKeys / 8;
  extern __shared__ __align__(16) __half sm[];
  __half* qh = sm;                        // [kRows][DS]
  __half* ql = qh + kRows * DS;           // [kRows][DS]
  __half* khs = ql + kRows * DS;          // [kStages][kKeys][DS], then kls, vhs, vls alike
  __half* kls = khs + kStages * kKeys * DS;
  __half* vhs = kls + kStages * kKeys * DS;
  __half* vls = vhs + kStages * kKeys * DS;
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const FullTile tile = tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int seg_end = tile.seg0 + tile.seg_n;
  const int nq = min(kRows, seg_end - tile.row0);
  const int64_t stride = static_cast<int64_t>(n_head) * head_dim;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * (DP / 2); i += kWarps * 32) {
    const int r = i / (DP / 2), d = 2 * (i % (DP / 2));
    float x0 = 0.0f, x1 = 0.0f;
    if (r < nq) {
      const float* src = q + (tile.row0 + r) * stride + static_cast<int64_t>(h) * head_dim + d;
      if (d < head_dim) x0 = src[0] * scale_log2;
      if (d + 1 < head_dim) x1 = src[1] * scale_log2;
    }
    unsigned hi, lo;
    split_pair(x0, x1, hi, lo);
    *reinterpret_cast<unsigned*>(qh + r * DS + d) = hi;
    *reinterpret_cast<unsigned*>(ql + r * DS + d) = lo;
  }
  const int64_t head_off = static_cast<int64_t>(h) * n_rows * DP;
  // Keys c0 .. c0 + kKeys - 1 of the four arrays into stage buffer buf (zeros past the
  // segment): DP / 8 16-byte pieces a row.
  auto stage = [&](int buf, int c0) {
    constexpr int kPieces = kKeys * (DP / 8);
    for (int e = static_cast<int>(threadIdx.x); e < kPieces; e += kWarps * 32) {
      const int j = e / (DP / 8), c = 8 * (e % (DP / 8));
      const int off = (buf * kKeys + j) * DS + c;
      if (c0 + j < seg_end) {
        const int64_t g = head_off + static_cast<int64_t>(c0 + j) * DP + c;
        cp_async16(khs + off, kh + g);
        cp_async16(kls + off, kl + g);
        cp_async16(vhs + off, vh + g);
        cp_async16(vls + off, vl + g);
      } else {
        const int4 z = make_int4(0, 0, 0, 0);
        *reinterpret_cast<int4*>(khs + off) = z;
        *reinterpret_cast<int4*>(kls + off) = z;
        *reinterpret_cast<int4*>(vhs + off) = z;
        *reinterpret_cast<int4*>(vls + off) = z;
      }
    }
  };
  float o[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int qw = 16 * warp;
  stage(0, tile.seg0);
  cp_async_commit();
  int it = 0;
  for (int ci = tile.seg0; ci < seg_end; ci += kKeys, ++it) {
    const int buf = it % kStages;
    cp_async_wait_pending<0>();
    __syncthreads();  // this chunk (and q) seen by all; every warp is done with the other buffer
    if (ci + kKeys < seg_end) stage((it + 1) % kStages, ci + kKeys);
    cp_async_commit();
    const __half* kbh = khs + buf * kKeys * DS;
    const __half* kbl = kls + buf * kKeys * DS;
    const __half* vbh = vhs + buf * kKeys * DS;
    const __half* vbl = vls + buf * kKeys * DS;
    // Scores: s[n] is the 16 x 8 tile of keys ci + 8 n .. ci + 8 n + 7.
    float s[NS][4];
#pragma unroll
    for (int n = 0; n < NS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < DP; k0 += 16) {
      unsigned ah[4], al[4];
      const int qoff = (qw + (lane & 15)) * DS + k0 + (lane >> 4) * 8;
      ldsm_x4(ah, qh + qoff);
      ldsm_x4(al, ql + qoff);
#pragma unroll
      for (int np = 0; np < NS / 2; ++np) {
        const int koff = (16 * np + (lane & 7) + (lane >> 4) * 8) * DS + k0 + ((lane >> 3) & 1) * 8;
        unsigned bh[4], bl[4];
        ldsm_x4(bh, kbh + koff);
        ldsm_x4(bl, kbl + koff);
        mma_f16(s[2 * np], ah, bh[0], bh[1]);
        mma_f16(s[2 * np], al, bh[0], bh[1]);
        mma_f16(s[2 * np], ah, bl[0], bl[1]);
        mma_f16(s[2 * np + 1], ah, bh[2], bh[3]);
        mma_f16(s[2 * np + 1], al, bh[2], bh[3]);
        mma_f16(s[2 * np + 1], ah, bl[2], bl[3]);
      }
    }
    // Keys past the segment out; the online softmax of rows gid (entries 0, 1) and gid + 8
    // (entries 2, 3). Every chunk holds at least one key, so the maxima are finite.
    float cm0 = -INFINITY, cm1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (ci + 8 * n + 2 * tig + (e & 1) >= seg_end) s[n][e] = -INFINITY;
      }
      cm0 = fmaxf(cm0, fmaxf(s[n][0], s[n][1]));
      cm1 = fmaxf(cm1, fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      cm0 = fmaxf(cm0, __shfl_xor_sync(0xffffffffu, cm0, off));
      cm1 = fmaxf(cm1, __shfl_xor_sync(0xffffffffu, cm1, off));
    }
    const float n0 = fmaxf(m0, cm0), n1 = fmaxf(m1, cm1);
    const float corr0 = exp2f(m0 - n0), corr1 = exp2f(m1 - n1);  // 0 on the first chunk
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
      s[n][0] = exp2f(s[n][0] - n0);
      s[n][1] = exp2f(s[n][1] - n0);
      s[n][2] = exp2f(s[n][2] - n1);
      s[n][3] = exp2f(s[n][3] - n1);
      sum0 += s[n][0] + s[n][1];
      sum1 += s[n][2] + s[n][3];
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, off);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, off);
    }
    l0 = l0 * corr0 + sum0;
    l1 = l1 * corr1 + sum1;
    m0 = n0;
    m1 = n1;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      o[t][0] *= corr0;
      o[t][1] *= corr0;
      o[t][2] *= corr1;
      o[t][3] *= corr1;
    }
    // Weighted values: keys 16 kk .. 16 kk + 15 as the A operand (score tiles 2 kk, 2 kk + 1).
#pragma unroll
    for (int kk = 0; kk < NS / 2; ++kk) {
      unsigned ph[4], pl[4];
      split_pair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_pair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
      for (int dp = 0; dp < NT / 2; ++dp) {
        const int voff = (16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8) * DS + 16 * dp + (lane >> 4) * 8;
        unsigned bh[4], bl[4];
        ldsm_x4_trans(bh, vbh + voff);
        ldsm_x4_trans(bl, vbl + voff);
        mma_f16(o[2 * dp], ph, bh[0], bh[1]);
        mma_f16(o[2 * dp], pl, bh[0], bh[1]);
        mma_f16(o[2 * dp], ph, bl[0], bl[1]);
        mma_f16(o[2 * dp + 1], ph, bh[2], bh[3]);
        mma_f16(o[2 * dp + 1], pl, bh[2], bh[3]);
        mma_f16(o[2 * dp + 1], ph, bl[2], bl[3]);
      }
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = qw + gid + 8 * half;
    if (r >= nq) continue;
    float* dst = out + (tile.row0 + r) * stride + static_cast<int64_t>(h) * head_dim;
    const float inv = 1.0f / (half ? l1 : l0);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int d = 8 * t + 2 * tig;
      if (d < head_dim) dst[d] = o[t][2 * half] * inv;
      if (d + 1 < head_dim) dst[d + 1] = o[t][2 * half + 1] * inv;
    }
  }
}

template <int DP>
void launch_dp(dim3 grid, cudaStream_t st, const float* q, const __half* kh, const __half* kl, const __half* vh,
               const __half* vl, const FullTile* tiles, int64_t n_rows, int n_head, int head_dim, float scale_log2,
               float* out) {
  static bool raised = false;
  if (!raised) {
    LaunchRuntime::check(cudaFuncSetAttribute(attention_full_tc_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem_bytes<DP>())),
                       "attention_full", "cudaFuncSetAttribute");
    raised = true;
  }
  ::hearth::cuda::launch_pdl(attention_full_tc_kernel<DP>, grid, kWarps * 32, smem_bytes<DP>(), st, q, kh, kl, vh, vl,
                             tiles, n_rows, n_head, head_dim, scale_log2, out);
}

}  // namespace

void CudaBackend::attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs,
                                 int64_t n_segs, int64_t n_head, int64_t head_dim, float scale, float* out) {
  OpTimer timer(rt_, "attention_full");
  if (head_dim <= 0 || head_dim > 128 || n_head <= 0 || n_head > 65535) {
    fail(ErrorKind::kUnsupported, "cuda", "attention_full: head size " + std::to_string(head_dim) + " x " +
                                              std::to_string(n_head) + " heads (at most 128 x 65535)");
  }
  std::vector<FullTile> tiles;
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_segs; ++s) {
    const ops::FullAttentionSeg& sg = segs[s];
    if (sg.first_row < 0 || sg.n_rows < 0 || sg.first_row + sg.n_rows > (int64_t{1} << 30)) {
      fail(ErrorKind::kInvalidInput, "cuda", "attention_full: segment " + std::to_string(s) + " (rows " +
                                                 std::to_string(sg.first_row) + " + " + std::to_string(sg.n_rows) +
                                                 ") out of range");
    }
    if (sg.n_rows > 0) n_rows = std::max(n_rows, sg.first_row + sg.n_rows);
    for (int64_t r = 0; r < sg.n_rows; r += kRows) {
      tiles.push_back({static_cast<int32_t>(sg.first_row), static_cast<int32_t>(sg.n_rows),
                       static_cast<int32_t>(sg.first_row + r)});
    }
  }
  if (tiles.empty()) return;
  const int dp = head_dim <= 16 ? 16 : head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : head_dim <= 80 ? 80
               : head_dim <= 96 ? 96 : 128;
  const size_t plane = static_cast<size_t>(n_rows * n_head * dp);
  auto* kh = static_cast<__half*>(rt_.scratch(10, sizeof(__half) * 4 * plane, "attention_full"));
  __half *kl = kh + plane, *vh = kl + plane, *vl = vh + plane;
  const auto n_tiles = static_cast<int64_t>(tiles.size());
  const FullTile* d_tiles = rt_.stage_array(tiles.data(), n_tiles, "attention_full");
  const float scale_log2 = scale * 1.4426950408889634f;
  if (rt_.skip_launch()) {
    return;
  }
  const int nh = static_cast<int>(n_head), hd = static_cast<int>(head_dim);
  ::hearth::cuda::launch_pdl(split_kv_kernel, grid_for(n_rows * n_head * (dp / 2)), kThreads, 0, stream_, k, v, n_rows,
                             nh, hd, dp, kh, kl, vh, vl);
  HEARTH_CUDA_LAUNCHED("attention_full");
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_head));
  switch (dp) {
    case 16:
      launch_dp<16>(grid, stream_, q, kh, kl, vh, vl, d_tiles, n_rows, nh, hd, scale_log2, out);
      break;
    case 32:
      launch_dp<32>(grid, stream_, q, kh, kl, vh, vl, d_tiles, n_rows, nh, hd, scale_log2, out);
      break;
    case 64:
      launch_dp<64>(grid, stream_, q, kh, kl, vh, vl, d_tiles, n_rows, nh, hd, scale_log2, out);
      break;
    case 80:
      launch_dp<80>(grid, stream_, q, kh, kl, vh, vl, d_tiles, n_rows, nh, hd, scale_log2, out);
      break;
    case 96:
      launch_dp<96>(grid, stream_, q, kh, kl, vh, vl, d_tiles, n_rows, nh, hd, scale_log2, out);
      break;
    default:
      launch_dp<128>(grid, stream_, q, kh, kl, vh, vl, d_tiles, n_rows, nh, hd, scale_log2, out);
      break;
  }
  HEARTH_CUDA_LAUNCHED("attention_full");
}

}  // namespace hearth::cuda

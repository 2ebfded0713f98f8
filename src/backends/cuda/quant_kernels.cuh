// The kernel templates over the block decoders of quant_blocks.cuh: the decode
// matrix-vector product and the row dequantizer, plus the host launchers each
// type family instantiates (quant_float.cu, quant_legacy.cu, quant_kquants.cu).
// Internal to the quant_*.cu files.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/quant_blocks.cuh"
#include "backends/cuda/quant_dot.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda::qk {

// The matvec block: kRowGroups groups of RPW rows; each group's units are split over KS
// warps (more loads in flight per row), whose sums are added in a fixed order.
inline constexpr int kRowGroups = 4;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// N consecutive floats of x (16-byte loads when N is a multiple of 4).
template <int N>
__device__ __forceinline__ void load_x(const float* p, float* v) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4 x4 = __ldg(reinterpret_cast<const float4*>(p + i));
      v[i] = x4.x;
      v[i + 1] = x4.y;
      v[i + 2] = x4.z;
      v[i + 3] = x4.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __ldg(p + i);
  }
}

// y[t, row] = sum_c w[row, c] * x[t, c] for NT tokens; RPW consecutive rows per row group.
// Lane l of warp k of a group takes units 32k + l, 32k + l + 32 KS, ... of its rows
// (consecutive lanes read consecutive bytes), decodes them in registers (QDot: integers,
// scale, min) and multiplies with every token's x, read once for all RPW rows (and from
// L1 by the other groups of the block).
// One launch serves up to kMaxMulti weights of one type that share x (q/k/v, gate/up):
// blocks [block_end[i - 1], block_end[i]) compute weight i.
inline constexpr int kMaxMulti = 4;
struct MatvecTargets {
  const uint8_t* w[kMaxMulti];
  uint64_t row_bytes[kMaxMulti];
  int64_t n_rows[kMaxMulti];
  float* y[kMaxMulti];
  unsigned block_end[kMaxMulti];
  int n;
};

template <class Q, int NT, int RPW, int KS>
__global__ void __launch_bounds__(kRowGroups * KS * 32)
    matvec_kernel(const MatvecTargets tg, int64_t n_cols, int n_units, const float* __restrict__ x) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  // This block's weight, chosen with constant indices only (no local-memory copy).
  const uint8_t* w = tg.w[0];
  uint64_t row_bytes = tg.row_bytes[0];
  int64_t n_rows = tg.n_rows[0];
  float* y = tg.y[0];
  unsigned first_block = 0;
#pragma unroll
  for (int k = 1; k < kMaxMulti; ++k) {
    if (k < tg.n && blockIdx.x >= tg.block_end[k - 1]) {
      w = tg.w[k];
      row_bytes = tg.row_bytes[k];
      n_rows = tg.n_rows[k];
      y = tg.y[k];
      first_block = tg.block_end[k - 1];
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp % kRowGroups, ks = warp / kRowGroups;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x - first_block) * kRowGroups + group) * RPW;
  const uint8_t* rows[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) rows[r] = w + min(row0 + r, n_rows - 1) * row_bytes;

  float acc[RPW][NT];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  }

  const int u_end = row0 < n_rows ? n_units : 0;  // a group past the last row does nothing
  for (int u = 32 * ks + lane; u < u_end; u += 32 * KS) {
    const int b = u / Q::kSubs, s = u % Q::kSubs;
    typename Q::Raw raw[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) raw[r] = Q::load(rows[r] + static_cast<int64_t>(b) * Q::kBytes, s);
    const float* xb = x + static_cast<int64_t>(b) * Q::kElems;
#pragma unroll
    for (int run = 0; run < Q::kRuns; ++run) {
      const float* xr = xb + Q::run_col(s, run);
      if constexpr (Q::kFloat) {
        float q[RPW][Q::kRunLen];
#pragma unroll
        for (int r = 0; r < RPW; ++r) Q::run(raw[r], run, q[r], nullptr, nullptr);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float xv[Q::kRunLen];
          load_x<Q::kRunLen>(xr + t * n_cols, xv);
#pragma unroll
          for (int r = 0; r < RPW; ++r) {
#pragma unroll
            for (int i = 0; i < Q::kRunLen; ++i) acc[r][t] = fmaf(q[r][i], xv[i], acc[r][t]);
          }
        }
      } else {
        constexpr bool kExact = Q::kBits == 8;
        constexpr float kMul = kExact ? 1.f : static_cast<float>(1 << Q::kBits) / 2.f;  // 2^(kBits - 1)
        uint32_t q[RPW][Q::kRunLen / 4];
        float sc[RPW], mn[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
          Q::run(raw[r], run, q[r], &sc[r], &mn[r]);
          sc[r] *= kMul;
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float xv[Q::kRunLen];
          load_x<Q::kRunLen>(xr + t * n_cols, xv);
          float xsum = 0.f;
#pragma unroll
          for (int i = 0; i < Q::kRunLen; ++i) xsum += xv[i];
#pragma unroll
          for (int r = 0; r < RPW; ++r) {
            float dot = 0.f;  // sum q x (8-bit) or sum (2 + byte / 64) x
            if constexpr (kExact) {
#pragma unroll
              for (int i = 0; i < Q::kRunLen; ++i) dot = fmaf(byte_exact(q[r][i / 4], i % 4), xv[i], dot);
              acc[r][t] = fmaf(sc[r], dot, acc[r][t]);
            } else {
#pragma unroll
              for (int i = 0; i < Q::kRunLen; ++i) dot = fmaf(byte_f(q[r][i / 4], i % 4), xv[i], dot);
              acc[r][t] = fmaf(sc[r], fmaf(-2.f, xsum, dot), acc[r][t]);
            }
            acc[r][t] = fmaf(-mn[r], xsum, acc[r][t]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < RPW; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
  }
  if constexpr (KS > 1) {
    __shared__ float partial[KS - 1][kRowGroups][RPW][NT];
    if (ks > 0 && lane == 0) {
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) partial[ks - 1][group][r][t] = acc[r][t];
      }
    }
    __syncthreads();
    if (ks > 0) return;
#pragma unroll
    for (int k = 0; k < KS - 1; ++k) {
#pragma unroll
      for (int r = 0; r < RPW; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] += partial[k][group][r][t];
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      if (row0 + r < n_rows) {
#pragma unroll
        for (int t = 0; t < NT; ++t) y[t * n_rows + row0 + r] = acc[r][t];
      }
    }
  }
}

// Multiprocessors of the current device (cached per device).
inline int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    cached[dev] = n > 0 ? n : 132;
  }
  return cached[dev];
}

template <class Q, int NT, int RPW>
void launch_matvec_rpw(const DeviceWeight* ws, int n, const float* x, int64_t t0, float* const* ys,
                       cudaStream_t stream) {
  constexpr int kSplit = 2;
  const int64_t n_cols = ws[0].n_cols;
  const int n_units = static_cast<int>(n_cols / Q::kElems) * Q::kSubs;
  const int64_t rows_per_block = kRowGroups * RPW;
  MatvecTargets tg{};
  tg.n = n;
  unsigned blocks = 0;
  for (int i = 0; i < n; ++i) {
    tg.w[i] = static_cast<const uint8_t*>(ws[i].data);
    tg.row_bytes[i] = ws[i].row_bytes;
    tg.n_rows[i] = ws[i].n_rows;
    tg.y[i] = ys[i] + t0 * ws[i].n_rows;
    blocks += static_cast<unsigned>((ws[i].n_rows + rows_per_block - 1) / rows_per_block);
    tg.block_end[i] = blocks;
  }
  ::hearth::cuda::launch_pdl(matvec_kernel<Q, NT, RPW, kSplit>, blocks, kRowGroups * kSplit * 32, 0, stream, tg, n_cols, n_units,
                                                                                    x + t0 * n_cols);
}

// Several rows per group (x read once for them) when that still gives every
// multiprocessor two blocks, one row per group otherwise.
template <class Q, int NT>
void launch_matvec_nt(const DeviceWeight* ws, int n, const float* x, int64_t t0, float* const* ys,
                      cudaStream_t stream) {
  constexpr int kRpw = NT <= 2 ? 4 : 2;
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) rows += ws[i].n_rows;
  if (rows >= static_cast<int64_t>(2) * sm_count() * kRowGroups * kRpw) {
    launch_matvec_rpw<Q, NT, kRpw>(ws, n, x, t0, ys, stream);
  } else {
    launch_matvec_rpw<Q, NT, 1>(ws, n, x, t0, ys, stream);
  }
}

// The product of n (<= kMaxMulti) weights of type Q and equal n_cols with the same x, for
// any number of tokens, in launches of up to kMaxMatvecTokens.
template <class Q>
void launch_matvec(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                   cudaStream_t stream) {
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxMatvecTokens) {
    switch (std::min<int64_t>(kMaxMatvecTokens, n_tokens - t0)) {
      case 1: launch_matvec_nt<Q, 1>(ws, n, x, t0, ys, stream); break;
      case 2: launch_matvec_nt<Q, 2>(ws, n, x, t0, ys, stream); break;
      case 3: launch_matvec_nt<Q, 3>(ws, n, x, t0, ys, stream); break;
      case 4: launch_matvec_nt<Q, 4>(ws, n, x, t0, ys, stream); break;
      case 5: launch_matvec_nt<Q, 5>(ws, n, x, t0, ys, stream); break;
      case 6: launch_matvec_nt<Q, 6>(ws, n, x, t0, ys, stream); break;
      case 7: launch_matvec_nt<Q, 7>(ws, n, x, t0, ys, stream); break;
      default: launch_matvec_nt<Q, 8>(ws, n, x, t0, ys, stream); break;
    }
  }
}

// dst[i, :] = row src_row(i) of w dequantized, src_row(i) = ids ? ids[i] : row0 + i; one
// thread per (output row, unit), grid-stride by whole warps. The 32 units of a warp are
// consecutive, so their output is one contiguous range of dst: each lane writes its
// values into the warp's shared-memory tile in column order, and the warp then stores
// the tile with contiguous 16-byte writes (the units' own runs lie up to 64 columns
// apart). OUT is float or __half.
template <class Q, class OUT>
__global__ void __launch_bounds__(256)
    dequant_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_cols, int n_units,
                   const int32_t* __restrict__ ids, int64_t row0, int64_t n_out_rows, OUT* __restrict__ dst) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  constexpr int kTile = 32 * Q::kPer;  // elements of a warp's 32 units
  constexpr bool kVec = (kTile * sizeof(OUT)) % (32 * 16) == 0;
  __shared__ __align__(16) OUT tile[8][kVec ? kTile : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t total = n_out_rows * n_units;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + warp * 32); base < total; base += stride) {
    const int64_t idx = base + lane;
    float v[Q::kPer];
    int s = 0;
    int64_t out_elem = 0;  // index in dst of the unit's block start
    const bool valid = idx < total;
    if (valid) {
      const int64_t out_row = idx / n_units;
      const int u = static_cast<int>(idx - out_row * n_units);
      const int64_t src_row = ids != nullptr ? static_cast<int64_t>(__ldg(ids + out_row)) : row0 + out_row;
      const int b = u / Q::kSubs;
      s = u % Q::kSubs;
      Q::decode(w + src_row * row_bytes + static_cast<int64_t>(b) * Q::kBytes, s, v);
      out_elem = out_row * n_cols + static_cast<int64_t>(b) * Q::kElems;
    }
    // The warp's units cover dst[first, first + valid_units * kPer) without gaps when the
    // warp is full and unit 0 starts a block; otherwise write directly.
    const int64_t first = __shfl_sync(0xffffffffu, out_elem, 0);
    const bool whole = kVec && base + 32 <= total && (base % Q::kSubs) == 0;
    if (whole) {
      OUT* t = tile[warp];
      const int blk_in_tile = lane / Q::kSubs;
#pragma unroll
      for (int run = 0; run < Q::kRuns; ++run) {
#pragma unroll
        for (int i = 0; i < Q::kRunLen; ++i) {
          const int e = blk_in_tile * Q::kElems + Q::run_col(s, run) + i;
          if constexpr (std::is_same_v<OUT, float>) {
            t[e] = v[run * Q::kRunLen + i];
          } else {
            t[e] = __float2half_rn(v[run * Q::kRunLen + i]);
          }
        }
      }
      __syncwarp();
      constexpr int kChunks = kTile * static_cast<int>(sizeof(OUT)) / 16;
      const uint4* src = reinterpret_cast<const uint4*>(t);
      uint4* out = reinterpret_cast<uint4*>(dst + first);
#pragma unroll
      for (int k = lane; k < kChunks; k += 32) out[k] = src[k];
      __syncwarp();
    } else if (valid) {
      OUT* out = dst + out_elem;
#pragma unroll
      for (int run = 0; run < Q::kRuns; ++run) {
#pragma unroll
        for (int i = 0; i < Q::kRunLen; ++i) {
          if constexpr (std::is_same_v<OUT, float>) {
            out[Q::run_col(s, run) + i] = v[run * Q::kRunLen + i];
          } else {
            out[Q::run_col(s, run) + i] = __float2half_rn(v[run * Q::kRunLen + i]);
          }
        }
      }
    }
  }
}

template <class Q, class OUT>
void launch_dequant(const DeviceWeight& w, const int32_t* ids, int64_t row0, int64_t n_out_rows,
                    OUT* dst, cudaStream_t stream) {
  const int n_units = static_cast<int>(w.n_cols / Q::kElems) * Q::kSubs;
  const int64_t total = n_out_rows * n_units;
  if (total <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 1 << 20);
  ::hearth::cuda::launch_pdl(dequant_kernel<Q, OUT>, static_cast<unsigned>(blocks), kThreads, 0, stream, static_cast<const uint8_t*>(w.data), w.row_bytes, w.n_cols, n_units, ids, row0, n_out_rows, dst);
}

// What a family file does for one type: run `op` on the weight.
enum class Op { kMatvec, kDequantF32, kDequantF16, kGetRowsF32 };
struct OpArgs {
  Op op;
  const float* x = nullptr;  // matvec: weights ws[0 .. n_ws) (ws[0] is the `w` of run_op)
  int64_t n_tokens = 0;
  const DeviceWeight* ws = nullptr;
  int n_ws = 0;
  float* const* ys = nullptr;
  const int32_t* ids = nullptr;  // get_rows
  int64_t row0 = 0;              // dequantize_rows
  int64_t n_rows = 0;            // output rows of dequantize / get_rows
  void* dst = nullptr;
};

template <class Q>
void run_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream) {
  switch (a.op) {
    case Op::kMatvec: launch_matvec<Q>(a.ws, a.n_ws, a.x, a.n_tokens, a.ys, stream); break;
    case Op::kDequantF32:
      launch_dequant<Q, float>(w, nullptr, a.row0, a.n_rows, static_cast<float*>(a.dst), stream);
      break;
    case Op::kDequantF16:
      launch_dequant<Q, __half>(w, nullptr, a.row0, a.n_rows, static_cast<__half*>(a.dst), stream);
      break;
    case Op::kGetRowsF32:
      launch_dequant<Q, float>(w, a.ids, 0, a.n_rows, static_cast<float*>(a.dst), stream);
      break;
  }
}

// Family entry points: false when `w.type` is not of the family.
bool run_float_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream);
bool run_legacy_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream);
bool run_kquant_op(const DeviceWeight& w, const OpArgs& a, cudaStream_t stream);

}  // namespace hearth::cuda::qk

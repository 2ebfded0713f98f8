// The routed experts of decode batches on the int8 tensor cores (quant_cuda.h:
// q8_moe_mma_*). The pairs come grouped by expert and cut into tiles of at most eight
// (q8_moe_group); block (row tiles, tile) takes 64-row tiles of the tile's expert (for gate
// / up: those rows of both) and meets its pairs as one n8 column of mma.sync products, with
// the weights' quants straight from the GGUF blocks (staged by cp.async ahead) and the
// tokens as Q8_K, so each output is q8_gemm's arithmetic for that token and row: the
// integer sums of a 256-column block scaled once (Q4_K: d sc (q . x) - dmin m (sum x) in
// integers, then d, dmin; Q6_K: groups of 16 times their int8 scale, then d).
//
// Why: the dp4a grouped kernel (quant_q8_moe.cu) pays a dot product per (pair, unit) on
// the CUDA cores and was bound by that work, not by its weight stream (the 35B-A3B's
// gate / up at 64 tokens: 1.29 TB/s). Here a pair costs a column of an MMA tile.
//
// A pair's outputs depend on its own token and expert only (the sums run over the columns
// in one order whatever the tile's other pairs), so they are the same bits in any batch
// this path takes; they differ from the dp4a kernels' (tokens quantized per 256 values,
// not per 32), so --deterministic, whose decode rows must not depend on the batch size,
// keeps those.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/quant_q8_dot.cuh"
#include "backends/cuda/quant_q8_internal.cuh"
#include "core/error.h"
#include "core/tune.h"

namespace hearth::cuda {
namespace {

#include "backends/cuda/quant_mmq_core.cuh"

constexpr int kPairs = q8::kTilePairs;  // pairs a block: one n8 tile

struct MmaArgs {
  const uint8_t* w;
  const uint8_t* w2;  // gate / up: the up rows
  const uint8_t* ws;  // the shared expert's rows (ws2: its up rows), for pairs of shared_id
  const uint8_t* ws2;
  int64_t shared_id;
  uint64_t row_bytes;
  int64_t rows_per_expert;
  int64_t n_cols;
  int n_used;  // gate / up: pair p reads token p / n_used; down: its own row p
  const int8_t* xq;
  const float* xd;
  float* out;  // [n_pairs][rows_per_expert]
  const int32_t* n_tiles;
  const ExpertTile* tiles;  // q8_moe_group's tiles of at most kPairs pairs of one expert
  const int32_t* order;
  int64_t tiles_per_block;  // row tiles of 64 a block walks
};

template <bool kQ6>
__host__ __device__ constexpr int stage_row() {
  return kQ6 ? kQ6Stage : kBlockBytes;
}

template <bool kQ6, bool kGateUp, int NS>
constexpr size_t moe_smem_bytes() {
  return NS * ((kGateUp ? 2 : 1) * static_cast<size_t>(kRows) * stage_row<kQ6>() +
               static_cast<size_t>(kPairs) * kXRow + sizeof(float) * kPairs);
}

// One 256-column step of a warp's 16 rows (w0: its row gid staged, row gid + 8 eight rows
// on) with the eight staged tokens: acc[i] as mmq_q4k_q8k_kernel's scale-after form.
// ws: bytes from a staged row to the next; xs: from a staged token's values to the next.
__device__ __forceinline__ void q4k_tile_step(const uint8_t* w0, int ws, const int8_t* xb, int xs, const float* db,
                                              int gid, int tig, float (&acc)[4]) {
  const uint8_t* w1 = w0 + 8 * ws;
  const int4 hd0 = *reinterpret_cast<const int4*>(w0), hd1 = *reinterpret_cast<const int4*>(w1);
  const int s0[3] = {hd0.y, hd0.z, hd0.w}, s1[3] = {hd1.y, hd1.z, hd1.w};
  int ch[4] = {0, 0, 0, 0}, cm[4] = {0, 0, 0, 0};
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int off = 16 + 32 * g + 4 * tig;
    const int q[4] = {*reinterpret_cast<const int*>(w0 + off), *reinterpret_cast<const int*>(w1 + off),
                      *reinterpret_cast<const int*>(w0 + off + 16), *reinterpret_cast<const int*>(w1 + off + 16)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int sb = 2 * g + h;
      int sc0, m0, sc1, m1;
      q8::scale_min_k4(s0, sb, &sc0, &m0);
      q8::scale_min_k4(s1, sb, &sc1, &m1);
      const int mm0 = m0 * 0x01010101, mm1 = m1 * 0x01010101;
      const int am[4] = {mm0, mm1, mm0, mm1};
      int aq[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) aq[i] = h ? (q[i] >> 4) & q8::kLo4 : q[i] & q8::kLo4;
      const int8_t* xp = xb + gid * xs + sb * 32 + 4 * tig;
      const int b0 = *reinterpret_cast<const int*>(xp), b1 = *reinterpret_cast<const int*>(xp + 16);
      int c[4];
      mma_s8(aq, b0, b1, c);
      ch[0] += sc0 * c[0];
      ch[1] += sc0 * c[1];
      ch[2] += sc1 * c[2];
      ch[3] += sc1 * c[3];
      mma_s8_acc(am, b0, b1, cm);
    }
  }
  const float2 dm0 = __half22float2(*reinterpret_cast<const __half2*>(&hd0.x));
  const float2 dm1 = __half22float2(*reinterpret_cast<const __half2*>(&hd1.x));
  const float xa = db[2 * tig], xc = db[2 * tig + 1];
  acc[0] = q8k_step(acc[0], dm0, xa, ch[0], cm[0]);
  acc[1] = q8k_step(acc[1], dm0, xc, ch[1], cm[1]);
  acc[2] = q8k_step(acc[2], dm1, xa, ch[2], cm[2]);
  acc[3] = q8k_step(acc[3], dm1, xc, ch[3], cm[3]);
}

// The same for Q6_K rows staged from byte o of their 4-aligned copy (mmq_q6k_q8k_kernel's sums).
__device__ __forceinline__ void q6k_tile_step(const uint8_t* w0, int ws, int o, const int8_t* xb, int xs,
                                              const float* db, int gid, int tig, float (&acc)[4]) {
  const uint8_t* w1 = w0 + 8 * ws;
  int isum[4] = {0, 0, 0, 0};
#pragma unroll 4
  for (int j = 0; j < 16; ++j) {
    const int a0 = q6_quad(w0, o, j, tig), a1 = q6_quad(w1, o, j, tig);
    const int sc0 = static_cast<int8_t>(w0[o + 192 + j]), sc1 = static_cast<int8_t>(w1[o + 192 + j]);
    const int b = *reinterpret_cast<const int*>(xb + gid * xs + 16 * j + 4 * tig);
    int c[4];
    mma_s8_k16(a0, a1, b, c);
    isum[0] += sc0 * c[0];
    isum[1] += sc0 * c[1];
    isum[2] += sc1 * c[2];
    isum[3] += sc1 * c[3];
  }
  const float d0 = __half2float(*reinterpret_cast<const __half*>(w0 + o + 208));
  const float d1 = __half2float(*reinterpret_cast<const __half*>(w1 + o + 208));
  const float xa = db[2 * tig], xc = db[2 * tig + 1];
  acc[0] = __fmaf_rn(__fmul_rn(d0, xa), static_cast<float>(isum[0]), acc[0]);
  acc[1] = __fmaf_rn(__fmul_rn(d0, xc), static_cast<float>(isum[1]), acc[1]);
  acc[2] = __fmaf_rn(__fmul_rn(d1, xa), static_cast<float>(isum[2]), acc[2]);
  acc[3] = __fmaf_rn(__fmul_rn(d1, xc), static_cast<float>(isum[3]), acc[3]);
}

// Block (blockIdx.x, tile blockIdx.y): the tile's up to eight pairs (one expert) times
// a.tiles_per_block row tiles of 64 rows (4 warps of 16), walked as one pipeline of (row
// tile, 256-column step) items, NS - 1 items staged ahead.
template <bool kQ6, bool kGateUp, int NS>
__global__ void __launch_bounds__(kThreads) mmq_moe_kernel(const MmaArgs a) {
  constexpr int M = kGateUp ? 2 : 1, SR = stage_row<kQ6>();
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wsm = smem;                                                 // [NS][M][kRows][SR]
  int8_t* xs = reinterpret_cast<int8_t*>(smem + NS * M * kRows * SR);  // [NS][kPairs][kXRow]
  float* ds = reinterpret_cast<float*>(xs + NS * kPairs * kXRow);      // [NS][kPairs]
  __shared__ int pair_of[kPairs], xrow_of[kPairs];
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  if (static_cast<int>(blockIdx.y) >= *a.n_tiles) return;
  const ExpertTile tile = a.tiles[blockIdx.y];
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int n_steps = static_cast<int>(a.n_cols / kStep);
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * a.tiles_per_block;
  const int64_t row_tiles = (a.rows_per_expert + kRows - 1) / kRows;
  const int n_items = static_cast<int>((a.tiles_per_block < row_tiles - tile0 ? a.tiles_per_block : row_tiles - tile0)) * n_steps;
  if (n_items <= 0) return;
  const int nt = tile.count;
  const bool shared = tile.expert == a.shared_id;
  const uint8_t* base[2] = {
      shared ? a.ws : a.w + static_cast<uint64_t>(tile.expert * a.rows_per_expert) * a.row_bytes,
      kGateUp ? (shared ? a.ws2 : a.w2 + static_cast<uint64_t>(tile.expert * a.rows_per_expert) * a.row_bytes)
              : nullptr};
  if (tid < kPairs) {
    const int p = a.order[tile.first + min(tid, nt - 1)];
    pair_of[tid] = p;
    xrow_of[tid] = kGateUp ? p / a.n_used : p;
  }
  __syncthreads();

  auto stage = [&](int buf, int item) {
    const int st = item % n_steps;
    const int64_t rowb = (tile0 + item / n_steps) * kRows;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      uint8_t* wb = wsm + (buf * M + m) * (kRows * SR);
      const uint8_t* src = base[m];
      if constexpr (kQ6) {
        const int o = (st * kQ6Bytes) & 3;  // (rows of an even block count, 4-aligned)
        const int words = (o + kQ6Bytes + 3) / 4;
        for (int i = tid; i < kRows * (kQ6Stage / 4); i += kThreads) {
          const int r = i / (kQ6Stage / 4), c = i % (kQ6Stage / 4);
          if (c >= words) continue;
          const int64_t row = min(rowb + r, a.rows_per_expert - 1);  // rows past the end: read, never written
          cp_async4(wb + r * kQ6Stage + c * 4, src + row * a.row_bytes + static_cast<int64_t>(st) * kQ6Bytes - o + c * 4);
        }
      } else {
        for (int i = tid; i < kRows * (kBlockBytes / 16); i += kThreads) {
          const int r = i / (kBlockBytes / 16), c = i % (kBlockBytes / 16);
          const int64_t row = min(rowb + r, a.rows_per_expert - 1);
          cp_async16(wb + r * kBlockBytes + c * 16,
                     src + row * a.row_bytes + static_cast<int64_t>(st) * kBlockBytes + c * 16);
        }
      }
    }
    for (int i = tid; i < kPairs * (kStep / 16); i += kThreads) {
      const int tk = i / (kStep / 16), c = i % (kStep / 16);
      int8_t* d = xs + (buf * kPairs + tk) * kXRow + c * 16;
      if (tk < nt) {
        cp_async16(d, a.xq + static_cast<int64_t>(xrow_of[tk]) * a.n_cols + static_cast<int64_t>(st) * kStep + c * 16);
      } else {
        *reinterpret_cast<int4*>(d) = make_int4(0, 0, 0, 0);
      }
    }
    if (tid < kPairs) {
      if (tid < nt) {
        cp_async4(ds + buf * kPairs + tid, a.xd + static_cast<int64_t>(xrow_of[tid]) * n_steps + st);
      } else {
        ds[buf * kPairs + tid] = 0.0f;
      }
    }
  };

  float acc[M][4];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[m][i] = 0.f;
  }
#pragma unroll
  for (int k = 0; k < NS - 1; ++k) {
    if (k < n_items) stage(k, k);
    cp_async_commit();
  }
  for (int it = 0; it < n_items; ++it) {
    const int buf = it % NS, st = it % n_steps;
    cp_async_wait<NS - 2>();
    __syncthreads();
    if (it + NS - 1 < n_items) stage((it + NS - 1) % NS, it + NS - 1);
    cp_async_commit();
    const int8_t* xb = xs + buf * (kPairs * kXRow);
    const float* db = ds + buf * kPairs;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint8_t* w0 = wsm + (buf * M + m) * (kRows * SR) + (warp * 16 + gid) * SR;
      if constexpr (kQ6) {
        q6k_tile_step(w0, SR, (st * kQ6Bytes) & 3, xb, kXRow, db, gid, tig, acc[m]);
      } else {
        q4k_tile_step(w0, SR, xb, kXRow, db, gid, tig, acc[m]);
      }
    }
    if (st == n_steps - 1) {  // a row tile done: its outputs, then the next tile from zero
      const int64_t rowb = (tile0 + it / n_steps) * kRows;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int tok = 2 * tig + (i & 1);
        const int64_t row = rowb + warp * 16 + gid + (i >= 2 ? 8 : 0);
        if (tok < nt && row < a.rows_per_expert) {
          float v = acc[0][i];
          if constexpr (kGateUp) v = v / (1.f + expf(-v)) * acc[M - 1][i];
          a.out[static_cast<int64_t>(pair_of[tok]) * a.rows_per_expert + row] = v;
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][i] = 0.f;
      }
    }
  }
}

// Rows short enough that 64 of them fit a stage (the Qwen3.5-35B-A3B's 512-wide down
// projections: 64 x 420 bytes), products without gate / up: a row tile is one contiguous,
// 16-aligned run of the expert's bytes (rows_per_expert a multiple of 64), staged whole by
// 16-byte copies where the item kernel copies a Q6_K block 4 bytes at a time, and the
// tile's pairs' x is staged once for all the block's row tiles. Same sums as the item
// kernel (the same bits).
template <bool kQ6, int NS>
__global__ void __launch_bounds__(kThreads) mmq_moe_rows_kernel(const MmaArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int rb = static_cast<int>(a.row_bytes), tile_bytes = kRows * rb;
  const int n_steps = static_cast<int>(a.n_cols / kStep), xstride = static_cast<int>(a.n_cols) + 16;
  uint8_t* wsm = smem;                                                          // [NS][kRows][rb]
  int8_t* xs = reinterpret_cast<int8_t*>(smem + NS * tile_bytes);              // [kPairs][xstride]
  float* ds = reinterpret_cast<float*>(xs + kPairs * xstride);                  // [n_steps][kPairs]
  __shared__ int pair_of[kPairs], xrow_of[kPairs];
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  if (static_cast<int>(blockIdx.y) >= *a.n_tiles) return;
  const ExpertTile tile = a.tiles[blockIdx.y];
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * a.tiles_per_block;
  const int64_t row_tiles = a.rows_per_expert / kRows;
  const int n_items = static_cast<int>(a.tiles_per_block < row_tiles - tile0 ? a.tiles_per_block : row_tiles - tile0);
  if (n_items <= 0) return;
  const int nt = tile.count;
  const uint8_t* base = tile.expert == a.shared_id
                            ? a.ws
                            : a.w + static_cast<uint64_t>(tile.expert * a.rows_per_expert) * a.row_bytes;
  if (tid < kPairs) {
    const int p = a.order[tile.first + min(tid, nt - 1)];
    pair_of[tid] = p;
    xrow_of[tid] = p;
  }
  __syncthreads();
  // The pairs' x for every step (zeros past the tile's pairs), in the first copy group.
  for (int i = tid; i < kPairs * (n_steps * kStep / 16); i += kThreads) {
    const int tk = i / (n_steps * kStep / 16), c = i % (n_steps * kStep / 16);
    int8_t* d = xs + tk * xstride + c * 16;
    if (tk < nt) {
      cp_async16(d, a.xq + static_cast<int64_t>(xrow_of[tk]) * a.n_cols + c * 16);
    } else {
      *reinterpret_cast<int4*>(d) = make_int4(0, 0, 0, 0);
    }
  }
  for (int i = tid; i < kPairs * n_steps; i += kThreads) {
    const int st = i / kPairs, tk = i % kPairs;
    if (tk < nt) {
      cp_async4(ds + i, a.xd + static_cast<int64_t>(xrow_of[tk]) * n_steps + st);
    } else {
      ds[i] = 0.0f;
    }
  }
  auto stage = [&](int buf, int item) {
    const uint8_t* src = base + static_cast<uint64_t>((tile0 + item) * kRows) * a.row_bytes;
    uint8_t* dst = wsm + buf * tile_bytes;
    for (int i = tid; i < tile_bytes / 16; i += kThreads) cp_async16(dst + 16 * i, src + 16 * i);
  };
#pragma unroll
  for (int k = 0; k < NS - 1; ++k) {
    if (k < n_items) stage(k, k);
    cp_async_commit();
  }
  for (int it = 0; it < n_items; ++it) {
    const int buf = it % NS;
    cp_async_wait<NS - 2>();
    __syncthreads();
    if (it + NS - 1 < n_items) stage((it + NS - 1) % NS, it + NS - 1);
    cp_async_commit();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const uint8_t* row = wsm + buf * tile_bytes + (warp * 16 + gid) * rb;
    for (int st = 0; st < n_steps; ++st) {
      if constexpr (kQ6) {
        const int o = (st * kQ6Bytes) & 3;
        q6k_tile_step(row + st * kQ6Bytes - o, rb, o, xs + st * kStep, xstride, ds + st * kPairs, gid, tig, acc);
      } else {
        q4k_tile_step(row + st * kBlockBytes, rb, xs + st * kStep, xstride, ds + st * kPairs, gid, tig, acc);
      }
    }
    const int64_t rowb = (tile0 + it) * kRows;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tok = 2 * tig + (i & 1);
      const int64_t r = rowb + warp * 16 + gid + (i >= 2 ? 8 : 0);
      if (tok < nt) a.out[static_cast<int64_t>(pair_of[tok]) * a.rows_per_expert + r] = acc[i];
    }
  }
}

// Stages: three (two items in flight), measured on the H200 (Qwen3.5-35B-A3B, ms a step of
// 16 / 32 / 64 sequences, two runs each): 2 stages 9.67, 9.63 / 13.82, 13.80 / 19.51, 19.44;
// 3 stages 9.47, 9.47 / 13.81, 13.79 / 19.49, 19.53; 4 stages 9.76, 9.75 / 14.18, 14.17 /
// 19.92, 19.92.
constexpr int kStages = 3;

// Items (row tile, step) a block walks at least: short rows take several row tiles a
// block, so a block's fixed costs and its pipeline's start are shared. 4, measured on the
// H200 (Qwen3.5-35B-A3B, its down projections on this kernel, ms a step of 16 / 32 / 64
// sequences, two runs each): 4 items 9.71, 9.70 / 12.99, 13.00 / 18.58, 18.58; 8 items 9.88,
// 9.89 / 13.17, 13.19 / 18.66, 18.66; 16 items 10.68, 10.65 / 14.15, 14.17 / 19.06, 19.02.
constexpr int kItemsPerBlock = 4;

template <bool kQ6, bool kGateUp>
void allow_smem() {
  check_launch(cudaFuncSetAttribute(mmq_moe_kernel<kQ6, kGateUp, kStages>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(moe_smem_bytes<kQ6, kGateUp, kStages>())));
}

void ensure_prepared();

template <bool kQ6, bool kGateUp>
void launch(MmaArgs a, int max_tiles, cudaStream_t stream) {
  const int64_t steps = a.n_cols / kStep, row_tiles = (a.rows_per_expert + kRows - 1) / kRows;
  a.tiles_per_block = std::clamp<int64_t>((kItemsPerBlock + steps - 1) / steps, 1, row_tiles);
  const dim3 grid(static_cast<unsigned>((row_tiles + a.tiles_per_block - 1) / a.tiles_per_block),
                  static_cast<unsigned>(max_tiles));
  launch_pdl(mmq_moe_kernel<kQ6, kGateUp, kStages>, grid, kThreads, moe_smem_bytes<kQ6, kGateUp, kStages>(), stream,
             a);
}

// The whole-row-tile kernel (cuda.moe_mma_rows=0: off; cuda.moe_mma_row_tiles: row tiles a
// block, default 4), two stages in flight. Measured on the
// H200 (Qwen3.5-35B-A3B, ms a step of 16 / 32 / 64 sequences, two runs each): off 9.70,
// 9.75 / 13.02, 13.07 / 18.59, 18.61; on 8.96, 8.92 / 11.80, 11.75 / 16.73, 16.74; three
// stages 9.28, 9.23 / 12.30, 12.27 / 17.41, 17.32; 8 row tiles a block 8.87, 8.85 / 12.11,
// 12.06 / 16.72, 16.73; 2 row tiles 8.98 / 11.83 / 16.80. Its down kernel alone (ncu, 64
// sequences): 130.8 -> 83.5 us a layer for 157 MB (1.20 -> 1.88 TB/s).
constexpr int kMaxRowsTileBytes = 32 << 10;
constexpr int kMaxRowsSmem = 2 * kMaxRowsTileBytes + kPairs * (3 * kStep + 16) + 64 * 4;
bool rows_kernel_takes(const MmaArgs& a) {
  return tune::on(tune::kCudaMoeMmaRows) && a.rows_per_expert % kRows == 0 && kRows * static_cast<int64_t>(a.row_bytes) <= kMaxRowsTileBytes &&
         a.n_cols <= 3 * kStep;
}

template <bool kQ6>
void launch_rows(MmaArgs a, int max_tiles, cudaStream_t stream) {
  const int64_t row_tiles = a.rows_per_expert / kRows, n_steps = a.n_cols / kStep;
  a.tiles_per_block = std::min<int64_t>(tune::get(tune::kCudaMoeMmaRowTiles), row_tiles);
  const dim3 grid(static_cast<unsigned>((row_tiles + a.tiles_per_block - 1) / a.tiles_per_block),
                  static_cast<unsigned>(max_tiles));
  const size_t x_bytes = static_cast<size_t>(kPairs) * (a.n_cols + 16) + sizeof(float) * kPairs * n_steps;
  const size_t tile = static_cast<size_t>(kRows) * a.row_bytes;
  launch_pdl(mmq_moe_rows_kernel<kQ6, 2>, grid, kThreads, 2 * tile + x_bytes, stream, a);
}

template <bool kGateUp>
void launch_moe(bool q6, const MmaArgs& a, int max_tiles, cudaStream_t stream) {
  ensure_prepared();
  if (!kGateUp && rows_kernel_takes(a)) {
    (q6 ? launch_rows<true> : launch_rows<false>)(a, max_tiles, stream);
    return;
  }
  (q6 ? launch<true, kGateUp> : launch<false, kGateUp>)(a, max_tiles, stream);
}

size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }

std::atomic<bool> g_moe_prepared{false};  // callers without a CudaBackend (which prepares at start)

// x: [n_rows, n_cols] as Q8_K into the head of scratch: xq, then one scale per 256 values.
void quantize_q8k(const float* x, int64_t n_rows, int64_t n_cols, void* scratch, int8_t** xq, float** xd,
                  cudaStream_t stream) {
  *xq = static_cast<int8_t*>(scratch);
  *xd = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + align256(static_cast<size_t>(n_rows * n_cols)));
  const int64_t warps = n_rows * (n_cols / kStep);
  launch_pdl(q8k_quantize_kernel, dim3(static_cast<unsigned>((warps + 3) / 4)), 128, 0, stream, x, n_rows, n_cols, *xq,
             *xd);
}

void check_weight(const DeviceWeight& w, int64_t rows_per_expert, const char* what) {
  if (!q8_moe_mma_supported(w.type, w.n_cols, w.row_bytes) || reinterpret_cast<uintptr_t>(w.data) % 16 != 0) {
    q8::bad(std::string(what) + ": '" + std::string(ggml_type_name(w.type)) + "' experts of " +
            std::to_string(w.n_cols) + " columns, " + std::to_string(w.row_bytes) +
            " bytes a row: the tensor-core path takes Q4_K rows (a multiple of 16 bytes) or Q6_K rows (an even "
            "number of blocks), of a multiple of 256 columns, at a 16-byte aligned address");
  }
  if (rows_per_expert <= 0 || w.n_rows % rows_per_expert != 0) {
    q8::bad(std::string(what) + ": rows_per_expert " + std::to_string(rows_per_expert) + " does not divide " +
            std::to_string(w.n_rows) + " rows");
  }
}

MmaArgs mma_args(const DeviceWeight& w, const void* w2, int64_t rows_per_expert, int n_used, const int8_t* xq,
                 const float* xd, float* out, const q8::GroupView& g, const void* shared_w, const void* shared_w2) {
  MmaArgs a{};
  a.w = static_cast<const uint8_t*>(w.data);
  a.w2 = static_cast<const uint8_t*>(w2);
  a.ws = static_cast<const uint8_t*>(shared_w);
  a.ws2 = static_cast<const uint8_t*>(shared_w2);
  a.shared_id = shared_w != nullptr ? w.n_rows / rows_per_expert : -1;
  a.row_bytes = w.row_bytes;
  a.rows_per_expert = rows_per_expert;
  a.n_cols = w.n_cols;
  a.n_used = n_used;
  a.xq = xq;
  a.xd = xd;
  a.out = out;
  a.n_tiles = g.n_tiles;
  a.tiles = g.tiles;
  a.order = g.order;
  a.tiles_per_block = 1;
  return a;
}

}  // namespace

void q8_moe_mma_prepare();
namespace {
void ensure_prepared() {
  if (!g_moe_prepared) q8_moe_mma_prepare();
}
}  // namespace

bool q8_moe_mma_supported(GgmlType type, int64_t n_cols, uint64_t row_bytes) {
  if (n_cols <= 0 || n_cols % kStep != 0) return false;
  const int64_t blocks = n_cols / kStep;
  // Q4_K rows are staged 16 bytes a copy; Q6_K blocks (210 bytes) 4 bytes a copy from the
  // word at or before each, which stays inside a 4-aligned row of an even block count.
  if (type == GgmlType::Q4_K) return row_bytes % 16 == 0 && row_bytes >= static_cast<uint64_t>(blocks) * kBlockBytes;
  if (type == GgmlType::Q6_K) {
    return row_bytes % 4 == 0 && blocks % 2 == 0 && row_bytes >= static_cast<uint64_t>(blocks) * kQ6Bytes;
  }
  return false;
}

size_t q8_moe_mma_scratch_bytes(int64_t n_cols, int64_t n_rows) {
  if (n_cols <= 0 || n_rows <= 0) return 0;
  return align256(static_cast<size_t>(n_rows * n_cols)) + align256(sizeof(float) * static_cast<size_t>(n_rows * (n_cols / kStep)));
}

void q8_moe_mma_prepare() {
  allow_smem<false, true>();
  allow_smem<true, true>();
  allow_smem<false, false>();
  allow_smem<true, false>();
  for (auto* k : {mmq_moe_rows_kernel<true, 2>, mmq_moe_rows_kernel<false, 2>}) {
    check_launch(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxRowsSmem));
  }
  g_moe_prepared = true;
}

namespace {

// What both products check of the groups and scratch, then x (n_x_rows rows of w.n_cols) as
// Q8_K into scratch and the kernel.
template <bool kGateUp>
void run_products(const char* op, const DeviceWeight& w, const void* w2, int64_t rows_per_expert, int64_t n_x_rows,
                  int64_t n_pairs, int n_used, const float* x, float* out, void* scratch, size_t scratch_bytes,
                  cudaStream_t stream, const void* groups, int n_expert, const void* shared_w, const void* shared_w2) {
  if (groups == nullptr) q8::bad(std::string(op) + ": the pairs must come grouped (q8_moe_group)");
  q8::check_groups(groups, n_pairs, n_expert, w.n_rows / rows_per_expert + (shared_w != nullptr ? 1 : 0), op);
  if (scratch_bytes < q8_moe_mma_scratch_bytes(w.n_cols, n_x_rows) || reinterpret_cast<uintptr_t>(scratch) % 256 != 0) {
    q8::bad(std::string(op) + ": scratch must hold q8_moe_mma_scratch_bytes and be 256-byte aligned");
  }
  int8_t* xq = nullptr;
  float* xd = nullptr;
  quantize_q8k(x, n_x_rows, w.n_cols, scratch, &xq, &xd, stream);
  const q8::GroupView g = q8::group_view(groups, n_pairs, n_expert);
  launch_moe<kGateUp>(w.type == GgmlType::Q6_K,
                      mma_args(w, w2, rows_per_expert, n_used, xq, xd, out, g, shared_w, shared_w2), g.max_tiles,
                      stream);
}

}  // namespace

void q8_moe_mma_gate_up(const DeviceWeight& gate, const DeviceWeight& up, int64_t rows_per_expert, int64_t n_tokens,
                        int n_used, const float* x, float* h, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                        const void* groups, int n_expert, const void* shared_w, const void* shared_w2) {
  check_weight(gate, rows_per_expert, "q8_moe_mma_gate_up");
  check_weight(up, rows_per_expert, "q8_moe_mma_gate_up");
  if (up.type != gate.type || up.row_bytes != gate.row_bytes || up.n_rows != gate.n_rows || up.n_cols != gate.n_cols) {
    q8::bad("q8_moe_mma_gate_up: gate and up must have one type and shape");
  }
  q8::check_shared(shared_w, true, shared_w2, "q8_moe_mma_gate_up");
  if (n_tokens <= 0) return;
  if (n_used <= 0) q8::bad("q8_moe_mma_gate_up: n_used must be positive");
  run_products<true>("q8_moe_mma_gate_up", gate, up.data, rows_per_expert, n_tokens, n_tokens * n_used, n_used, x, h,
                     scratch, scratch_bytes, stream, groups, n_expert, shared_w, shared_w2);
}

void q8_moe_mma_down(const DeviceWeight& down, int64_t rows_per_expert, int64_t n_pairs, const float* h, float* y,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream, const void* groups, int n_expert,
                     const void* shared_w) {
  check_weight(down, rows_per_expert, "q8_moe_mma_down");
  q8::check_shared(shared_w, false, nullptr, "q8_moe_mma_down");
  if (n_pairs <= 0) return;
  run_products<false>("q8_moe_mma_down", down, nullptr, rows_per_expert, n_pairs, n_pairs, 1, h, y, scratch,
                      scratch_bytes, stream, groups, n_expert, shared_w, nullptr);
}

}  // namespace hearth::cuda

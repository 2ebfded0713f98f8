// Decode attention by warps: the one-row sequences of a step (each row one query vector a
// head) over their paged f16 or q8_0 keys, split over key ranges (grid z) whose partial
// results attention_combine_kernel merges. It replaces the tensor-core decode variant
// where it takes the call: a decode row is at most 8 query vectors a KV head, which fill
// a sixteenth to a half of a tensor-core tile, while the variant's large shared stages
// let only 4 warps run on an SM (the 9B's 32k-key row: 89 us over f16 at 1.5 TB/s, 97 over
// q8_0 at 0.7). Here a block is 4 warps that share nothing but the query vectors:
//
// - Each warp walks chunks of 8 keys of the block's range (warp w the chunks w, w + 4, ...)
//   with its own cp.async pipeline of NSTG stages: a stage holds the chunk's K and V rows
//   of the KV head as the cache stores them (q8_0: the 34-byte blocks, 17 pieces of D / 16
//   bytes; f16: 2 D bytes in 16-byte pieces), NSTG - 1 chunks ahead of the one computed.
// - Scores: lane (s, k) = (lane / 8, lane % 8) takes dimensions s D / 4 .. (s + 1) D / 4 - 1
//   of key k for every query vector (q in shared memory, scaled by scale * log2(e); each
//   value read once for the G vectors), then two shuffles sum the quarters: no per-key
//   warp-wide reduction.
// - Online softmax per chunk in f32 (exp2 of log2-scaled scores; each lane keeps its own
//   part of the sums, added at the end), the chunk's weights through shared memory, and
//   the values with lanes over dimensions (D / 32 a lane, the row read by the whole warp).
// - The block's warps merge their states in shared memory; the block writes its range's
//   [max, sum, unnormalised output] (max back in natural-log units) for the combine.
//
// Arithmetic: f32 throughout. q8_0 values are d * q with q exact in f32 (the byte as an
// f32 mantissa, minus 2^23 + 128); a score sums q * q8 per 32-value block and multiplies
// by d once, the values fold d into the weight (p * d) per key: within f32 rounding of the
// scalar kernel's d * q products. f16 values convert exactly.
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/cuda_attention.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kv_q8.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma_f16.cuh"

namespace hearth::cuda {
namespace {

constexpr int kDwWarps = 4;  // warps a block
constexpr int kDwKeys = 8;   // keys a warp's chunk (lane = 8 s + k)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The stage layout of one key's row of a KV head: bytes, copy pieces and the stride
// between keys in a stage (a multiple of the piece, and of 4 words plus 4 or an odd
// number of words, so that the lanes of the scores read distinct banks).
template <class T, int D>
struct DwRow;
template <int D>
struct DwRow<KvQ8Block, D> {
  static constexpr int kBytes = 34 * D / 32;
  static constexpr int kPiece = D / 16;  // 17 pieces: every head's blocks start at a multiple
  static constexpr int kPieces = 17;
  static constexpr int kStride = D == 128 ? 144 : kBytes;  // 68 / 36 / 17 words
};
template <int D>
struct DwRow<__half, D> {
  static constexpr int kBytes = 2 * D;
  static constexpr int kPiece = 16;
  static constexpr int kPieces = 2 * D / 16;
  static constexpr int kStride = 2 * D + 16;
};

template <int N>
__device__ __forceinline__ void dw_cp_async(void* smem, const void* gmem) {
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(N));
  }
}

// The two int8 values of a 16-bit word as exact floats: each byte (its sign flipped: q +
// 128) as the low mantissa of 2^23, minus 2^23 + 128.
__device__ __forceinline__ void q8_pair(uint32_t x, float& f0, float& f1) {
  x ^= 0x8080u;
  f0 = __int_as_float(static_cast<int>(__byte_perm(x, 0x4B000000u, 0x7440))) - 8388736.0f;
  f1 = __int_as_float(static_cast<int>(__byte_perm(x, 0x4B000000u, 0x7441))) - 8388736.0f;
}

// The q8_0 block of a row holding dimension dim0: its scale, and its int8 values from dim0
// on (as 16-bit pairs: a block's values start 2 bytes in, so 4-byte loads would straddle).
struct Q8Piece {
  float d;
  const uint16_t* qb;
};
__device__ __forceinline__ Q8Piece q8_piece(const unsigned char* row, int dim0) {
  const unsigned char* blk = row + 34 * (dim0 >> 5);
  return {__half2float(*reinterpret_cast<const __half*>(blk)), reinterpret_cast<const uint16_t*>(blk + 2 + (dim0 & 31))};
}

// Shared query vectors: [4 quarters][D / 4 dimensions][G vectors], each quarter padded by
// 4 floats (the four quarters' lanes read different banks).
template <int D, int G>
constexpr int kDwQuarter = D / 4 * G + 4;

// The scores of one key's quarter s (dimensions s D / 4 ..) for the G vectors.
template <class T, int D, int G>
__device__ __forceinline__ void dw_scores(const unsigned char* row, int s, const float* qs, float (&sc)[G]) {
  constexpr int QD = D / 4;
  const float* qq = qs + s * kDwQuarter<D, G>;
#pragma unroll
  for (int g = 0; g < G; ++g) sc[g] = 0.0f;
  if constexpr (std::is_same_v<T, KvQ8Block>) {
    // The quarter's 32-value blocks (or half a block, D = 64), each summed without its
    // scale and multiplied by it once.
    constexpr int PD = QD < 32 ? QD : 32;
#pragma unroll
    for (int c = 0; c < QD; c += PD) {
      const Q8Piece pc = q8_piece(row, s * QD + c);
      const float d = pc.d;
      const uint16_t* qb = pc.qb;
      float part[G];
#pragma unroll
      for (int g = 0; g < G; ++g) part[g] = 0.0f;
#pragma unroll
      for (int t = 0; t < PD / 2; ++t) {
        float f0, f1;
        q8_pair(qb[t], f0, f1);
        const float* q0 = qq + (c + 2 * t) * G;
#pragma unroll
        for (int g = 0; g < G; ++g) part[g] = fmaf(q0[g], f0, part[g]);
#pragma unroll
        for (int g = 0; g < G; ++g) part[g] = fmaf(q0[G + g], f1, part[g]);
      }
#pragma unroll
      for (int g = 0; g < G; ++g) sc[g] = fmaf(d, part[g], sc[g]);
    }
  } else {
    const auto* hv = reinterpret_cast<const uint4*>(row + 2 * s * QD);
#pragma unroll
    for (int t = 0; t < QD / 8; ++t) {
      const uint4 u = hv[t];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        const float* q0 = qq + (8 * t + 2 * i) * G;
#pragma unroll
        for (int g = 0; g < G; ++g) sc[g] = fmaf(q0[g], f.x, sc[g]);
#pragma unroll
        for (int g = 0; g < G; ++g) sc[g] = fmaf(q0[G + g], f.y, sc[g]);
      }
    }
  }
}

// The int8 form of the scores over a q8_0 cache (kDot): the query vectors quantized per
// 32 dimensions as the cache is (qi: [4 quarters][D / 16 words][G] int32 of four int8, a
// quarter padded by 4 words; dq: [G][D / 32] scales), each block's products summed in
// integers with dp4a and scaled once by d * dq.
template <int D, int G>
constexpr int kDwQuarterWords = D / 16 * G + 4;

template <int D, int G>
__device__ __forceinline__ void dw_scores_dot(const unsigned char* row, int s, const int* qi, const float* dq,
                                              float (&sc)[G]) {
  constexpr int QD = D / 4;
  constexpr int PD = QD < 32 ? QD : 32;
  const int* qq = qi + s * kDwQuarterWords<D, G>;
#pragma unroll
  for (int g = 0; g < G; ++g) sc[g] = 0.0f;
#pragma unroll
  for (int c = 0; c < QD; c += PD) {
    const int dim0 = s * QD + c;
    const Q8Piece pc = q8_piece(row, dim0);
    const float d = pc.d;
    const uint16_t* qb = pc.qb;
    int a[G];
#pragma unroll
    for (int g = 0; g < G; ++g) a[g] = 0;
#pragma unroll
    for (int t = 0; t < PD / 4; ++t) {
      const int w = static_cast<int>(__byte_perm(qb[2 * t], qb[2 * t + 1], 0x5410));
      const int* q0 = qq + (c / 4 + t) * G;
#pragma unroll
      for (int g = 0; g < G; ++g) a[g] = __dp4a(w, q0[g], a[g]);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) sc[g] = fmaf(d * dq[g * (D / 32) + (dim0 >> 5)], static_cast<float>(a[g]), sc[g]);
  }
}

// acc[g][e] += p[g] * value (dimension lane E + e) of one key's row.
template <class T, int D, int G>
__device__ __forceinline__ void dw_values(const unsigned char* row, int lane, const float* p,
                                          float (&acc)[G][D / 32]) {
  constexpr int E = D / 32;
  const int dim0 = lane * E;
  float v[E];
  float pw[G];
  if constexpr (std::is_same_v<T, KvQ8Block>) {
    const Q8Piece pc = q8_piece(row, dim0);
    const float d = pc.d;
    const uint16_t* qb = pc.qb;
#pragma unroll
    for (int t = 0; t < E / 2; ++t) q8_pair(qb[t], v[2 * t], v[2 * t + 1]);
#pragma unroll
    for (int g = 0; g < G; ++g) pw[g] = p[g] * d;
  } else {
    const unsigned char* src = row + 2 * dim0;
    uint32_t w[E / 2];
    if constexpr (E == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(src);
      w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else if constexpr (E == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(src);
      w[0] = u.x, w[1] = u.y;
    } else {
      w[0] = *reinterpret_cast<const uint32_t*>(src);
    }
#pragma unroll
    for (int i = 0; i < E / 2; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) pw[g] = p[g];
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pw[g], v[e], acc[g][e]);
  }
}

template <int kG, int kS, bool kD>
struct DwShape {
  static constexpr int G = kG, S = kS;
  static constexpr bool kDot = kD;
};

template <class T, int D, int NSTG>
constexpr int kDwStageBytes = 2 * kDwKeys * DwRow<T, D>::kStride;

// Shared memory of a block: the query quarters, per warp its weights [8][G] and its
// NSTG stages (the merge at the end reuses the stages: [4 warps][G][D + 2] floats).
template <class T, int D, int G, int NSTG>
constexpr size_t dw_smem_bytes() {
  constexpr size_t q = sizeof(float) * 4 * kDwQuarter<D, G>;
  constexpr size_t p = sizeof(float) * kDwWarps * kDwKeys * G;
  constexpr size_t stages = static_cast<size_t>(kDwWarps) * NSTG * kDwStageBytes<T, D, NSTG>;
  constexpr size_t merge = sizeof(float) * kDwWarps * G * (D + 2);
  static_assert(stages >= merge, "the merge fits in the stages");
  return q + p + stages;
}

template <class T, int D, int G, int NSTG, bool kDot>
__global__ void __launch_bounds__(kDwWarps * 32)
    attention_decode_warp_kernel(const float* __restrict__ q, const unsigned char* __restrict__ kc,
                                 const unsigned char* __restrict__ vc, const SeqDesc* __restrict__ seqs,
                                 const Tile* __restrict__ tiles, const int32_t* __restrict__ tables, int n_head,
                                 int group, int64_t row_bytes, int bs_log2, float scale, float* __restrict__ part) {
  using L = DwRow<T, D>;
  static_assert(!kDot || std::is_same_v<T, KvQ8Block>, "int8 scores: q8_0 caches");
  constexpr int E = D / 32;
  constexpr int SB = kDwStageBytes<T, D, NSTG>;
  extern __shared__ __align__(16) unsigned char dw_sm[];
  float* qs = reinterpret_cast<float*>(dw_sm);          // [4][kDwQuarter]
  float* pbuf = qs + 4 * kDwQuarter<D, G>;              // [warps][8][G]
  unsigned char* stages = reinterpret_cast<unsigned char*>(pbuf + kDwWarps * kDwKeys * G);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int s = lane >> 3, k = lane & 7;
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const Tile tile = tiles[blockIdx.x];
  const SeqDesc sd = seqs[tile.seq];
  const int hkv = static_cast<int>(blockIdx.y);
  const int n_keys = sd.pos0 + tile.row0 + 1;
  const int range = (n_keys + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
  const int k_begin = static_cast<int>(blockIdx.z) * range;
  const int k_end = min(n_keys, k_begin + range);
  const int32_t* table = tables + sd.table_off;
  const int bs_mask = (1 << bs_log2) - 1;
  unsigned char* my = stages + static_cast<size_t>(warp) * NSTG * SB;
  const int64_t head_off = static_cast<int64_t>(hkv) * L::kBytes;
  // Chunk i of this warp starts at key k_begin + 8 (warp + 4 i).
  auto chunk_key = [&](int i) { return k_begin + kDwKeys * (warp + kDwWarps * i); };
  // The K and V rows of the chunk at c into stage buffer b (keys past k_end not copied).
  auto stage = [&](int b, int c) {
    const int key = c + k;  // lanes 0-7 find the rows
    const long long r = lane < kDwKeys && key < k_end
                            ? static_cast<long long>(table[key >> bs_log2]) * (bs_mask + 1) + (key & bs_mask)
                            : -1;
    constexpr int kAll = 2 * kDwKeys * L::kPieces;
    unsigned char* dst = my + static_cast<size_t>(b) * SB;
#pragma unroll
    for (int t = 0; t < (kAll + 31) / 32; ++t) {
      const int i = lane + 32 * t;
      const int kv = i / (kDwKeys * L::kPieces), rem = i % (kDwKeys * L::kPieces);
      const int j = rem / L::kPieces, w = rem % L::kPieces;
      const long long rj = __shfl_sync(0xffffffffu, r, j & 7);
      if (i < kAll && rj >= 0) {
        const unsigned char* src = (kv ? vc : kc) + rj * row_bytes + head_off + w * L::kPiece;
        dw_cp_async<L::kPiece>(dst + (kv * kDwKeys + j) * L::kStride + w * L::kPiece, src);
      }
    }
  };
#pragma unroll
  for (int st = 0; st + 1 < NSTG; ++st) {
    if (chunk_key(st) < k_end) stage(st, chunk_key(st));
    cp_async_commit();
  }
  // The query vectors of this KV head (zeros past the group), scaled for exp2.
  const float qscale = scale * kLog2e;
  const float* qrow = q + ((static_cast<int64_t>(sd.first_row) + tile.row0) * n_head + hkv * group) * D;
  int* qi = reinterpret_cast<int*>(qs);                   // kDot: [4][kDwQuarterWords]
  float* dq = qs + 4 * kDwQuarterWords<D, G>;             // kDot: [G][D / 32]
  if constexpr (kDot) {
    // A warp a (vector, 32 dimensions): d = max |x| / 127, q = round(x / d).
    for (int pr = warp; pr < G * (D / 32); pr += kDwWarps) {
      const int g = pr / (D / 32), b = pr % (D / 32), d = 32 * b + lane;
      const float x = g < group ? qrow[g * D + d] * qscale : 0.0f;
      float amax = fabsf(x);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      const float dd = amax / 127.0f;
      const int qv = amax == 0.0f ? 0 : __float2int_rn(x / dd);
      const int qd = d % (D / 4);
      reinterpret_cast<int8_t*>(qi)[((d / (D / 4)) * kDwQuarterWords<D, G> + (qd >> 2) * G + g) * 4 + (qd & 3)] =
          static_cast<int8_t>(qv);
      if (lane == 0) dq[g * (D / 32) + b] = dd;
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < G * D; i += kDwWarps * 32) {
      const int g = i / D, d = i % D;
      const float x = g < group ? qrow[g * D + d] : 0.0f;
      qs[(d / (D / 4)) * kDwQuarter<D, G> + (d % (D / 4)) * G + g] = x * qscale;
    }
  }
  __syncthreads();
  float acc[G][E], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }
  float* pw = pbuf + warp * kDwKeys * G;
  for (int i = 0;; ++i) {
    const int c = chunk_key(i);
    if (c >= k_end) break;
    cp_async_wait_pending<NSTG - 2>();  // this chunk's copies
    __syncwarp();                       // ... seen by the warp, which is done with chunk i - 1
    const int nx = chunk_key(i + NSTG - 1);
    if (nx < k_end) stage((i + NSTG - 1) % NSTG, nx);
    cp_async_commit();
    const unsigned char* buf = my + static_cast<size_t>(i % NSTG) * SB;
    float sc[G];
    if constexpr (kDot) {
      dw_scores_dot<D, G>(buf + k * L::kStride, s, qi, dq, sc);
    } else {
      dw_scores<T, D, G>(buf + k * L::kStride, s, qs, sc);
    }
    const bool valid = c + k < k_end;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      sc[g] += __shfl_xor_sync(0xffffffffu, sc[g], 8);
      sc[g] += __shfl_xor_sync(0xffffffffu, sc[g], 16);
      if (!valid) sc[g] = -INFINITY;
    }
    float cm[G];
#pragma unroll
    for (int g = 0; g < G; ++g) cm[g] = sc[g];
#pragma unroll
    for (int o = 1; o < kDwKeys; o <<= 1) {
#pragma unroll
      for (int g = 0; g < G; ++g) cm[g] = fmaxf(cm[g], __shfl_xor_sync(0xffffffffu, cm[g], o));
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float mn = fmaxf(m[g], cm[g]);  // finite: the chunk's first key is valid
      const float corr = exp2f(m[g] - mn);
      const float p = exp2f(sc[g] - mn);
      l[g] = l[g] * corr + (s == 0 ? p : 0.0f);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= corr;
      m[g] = mn;
      sc[g] = p;
    }
    if (s == 0) {
#pragma unroll
      for (int g = 0; g < G; ++g) pw[k * G + g] = sc[g];
    }
    __syncwarp();
    const int nk = min(kDwKeys, k_end - c);
    const unsigned char* vrows = buf + kDwKeys * L::kStride;
#pragma unroll
    for (int kk = 0; kk < kDwKeys; ++kk) {
      if (kk >= nk) break;
      dw_values<T, D, G>(vrows + kk * L::kStride, lane, pw + kk * G, acc);
    }
  }
  // The warp's sums, then the block's four states merged in shared memory (the stages
  // reused once every warp's copies are done).
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) l[g] += __shfl_xor_sync(0xffffffffu, l[g], o);
  }
  cp_async_wait_pending<0>();
  __syncthreads();
  float* mw = reinterpret_cast<float*>(stages);  // [warps][G][D + 2]: m, l, acc
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float* dst = mw + (warp * G + g) * (D + 2);
    if (lane == 0) {
      dst[0] = m[g];
      dst[1] = l[g];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) dst[2 + lane * E + e] = acc[g][e];
  }
  __syncthreads();
  const int row = sd.first_row + tile.row0;
  for (int i = static_cast<int>(threadIdx.x); i < group * (D + 1); i += kDwWarps * 32) {
    const int g = i / (D + 1), d = i % (D + 1) - 1;  // d = -1: the max and sum
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDwWarps; ++w) M = fmaxf(M, mw[(w * G + g) * (D + 2)]);
    float* pp = part + ((static_cast<int64_t>(row) * n_head + hkv * group + g) * gridDim.z + blockIdx.z) * (D + 2);
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kDwWarps; ++w) {
      const float* src = mw + (w * G + g) * (D + 2);
      const float f = src[0] == -INFINITY ? 0.0f : exp2f(src[0] - M);
      sum += (d < 0 ? src[1] : src[2 + d]) * f;
    }
    if (d < 0) {
      pp[0] = M == -INFINITY ? -INFINITY : M * kLn2;
      pp[1] = sum;
    } else {
      pp[2 + d] = sum;
    }
  }
}

template <class T, int D, int G, int NSTG, bool kDot>
void launch_dw(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v, const SeqDesc* seqs,
               const Tile* tiles, const int32_t* tables, int n_head, int group, int64_t row_bytes, int bs_log2,
               float scale, float* part) {
  constexpr size_t smem = dw_smem_bytes<T, D, G, NSTG>();
  static bool raised = false;  // per instantiation: allow more than 48 KiB of shared memory
  if (!raised) {
    LaunchRuntime::check(cudaFuncSetAttribute(attention_decode_warp_kernel<T, D, G, NSTG, kDot>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                         "attention", "cudaFuncSetAttribute");
    raised = true;
  }
  ::hearth::cuda::launch_pdl(attention_decode_warp_kernel<T, D, G, NSTG, kDot>, grid, kDwWarps * 32, smem, st, q,
                             static_cast<const unsigned char*>(k), static_cast<const unsigned char*>(v), seqs, tiles,
                             tables, n_head, group, row_bytes, bs_log2, scale, part);
}

// Stages a warp (stages 0: the type's default): q8_0 three (two chunks in flight), f16 two
// (twice the bytes a stage).
template <class T>
constexpr int kDwStages = std::is_same_v<T, KvQ8Block> ? 3 : 2;
template <class T>
int dw_stages(int stages) {
  return stages == 2 || stages == 3 ? stages : kDwStages<T>;
}

template <class T, int D, int G, int NSTG, bool kDot>
int64_t resident_dw() {
  static int64_t blocks = -1;
  if (blocks < 0) {
    constexpr size_t smem = dw_smem_bytes<T, D, G, NSTG>();
    LaunchRuntime::check(cudaFuncSetAttribute(attention_decode_warp_kernel<T, D, G, NSTG, kDot>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                         "attention", "cudaFuncSetAttribute");
    int per_sm = 0, dev = 0, sms = 0;
    LaunchRuntime::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                             &per_sm, attention_decode_warp_kernel<T, D, G, NSTG, kDot>, kDwWarps * 32, smem),
                         "attention", "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    LaunchRuntime::check(cudaGetDevice(&dev), "attention", "cudaGetDevice");
    LaunchRuntime::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attention",
                         "cudaDeviceGetAttribute");
    blocks = static_cast<int64_t>(std::max(per_sm, 1)) * sms;
  }
  return blocks;
}

// Calls f with the DwShape of (group, stages, dot) for cache type T.
template <class T, class F>
void with_shape(int group, int stages, bool dot, F&& f) {
  const int n = dw_stages<T>(stages);
  if constexpr (std::is_same_v<T, KvQ8Block>) {
    if (dot) {
      if (group <= 4) {
        n == 3 ? f(DwShape<4, 3, true>{}) : f(DwShape<4, 2, true>{});
      } else {
        n == 3 ? f(DwShape<8, 3, true>{}) : f(DwShape<8, 2, true>{});
      }
      return;
    }
  }
  if (group <= 4) {
    n == 3 ? f(DwShape<4, 3, false>{}) : f(DwShape<4, 2, false>{});
  } else {
    n == 3 ? f(DwShape<8, 3, false>{}) : f(DwShape<8, 2, false>{});
  }
}

template <class T, int D>
int64_t resident_d(int group, int stages, bool dot) {
  int64_t r = 0;
  with_shape<T>(group, stages, dot, [&](auto shape) {
    using S = decltype(shape);
    r = resident_dw<T, D, S::G, S::S, S::kDot>();
  });
  return r;
}

template <class T, int D>
void launch_d(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v, const SeqDesc* seqs,
              const Tile* tiles, const int32_t* tables, int n_head, int group, int64_t row_bytes, int bs_log2,
              float scale, float* part, int stages, bool dot) {
  with_shape<T>(group, stages, dot, [&](auto shape) {
    using S = decltype(shape);
    launch_dw<T, D, S::G, S::S, S::kDot>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2,
                                         scale, part);
  });
}

}  // namespace

bool decode_warp_supported(int64_t head_dim, int64_t group, bool q8, const void* k, const void* v, int64_t n_kv_dim) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  if (group < 1 || group > kDecodeWarpGroup) return false;
  if (((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) != 0) return false;
  // Every head's row must start at a multiple of the copy piece: q8_0 rows of whole heads
  // (17 pieces of head_dim / 16 bytes a head), f16 rows of a multiple of 8 values.
  return q8 ? n_kv_dim % head_dim == 0 : n_kv_dim % 8 == 0;
}

int64_t decode_warp_resident_blocks(int head_dim, int group, bool q8, int stages, bool dot) {
  switch (head_dim) {
    case 64:
      return q8 ? resident_d<KvQ8Block, 64>(group, stages, dot) : resident_d<__half, 64>(group, stages, dot);
    case 128:
      return q8 ? resident_d<KvQ8Block, 128>(group, stages, dot) : resident_d<__half, 128>(group, stages, dot);
    default:
      return q8 ? resident_d<KvQ8Block, 256>(group, stages, dot) : resident_d<__half, 256>(group, stages, dot);
  }
}

void launch_decode_warp(dim3 grid, cudaStream_t stream, const float* q, const void* k, const void* v, bool q8,
                        const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head, int group,
                        int head_dim, int64_t n_kv_dim, int bs_log2, float scale, float* part, int stages, bool dot) {
  const int64_t row_bytes = q8 ? n_kv_dim / 32 * 34 : n_kv_dim * 2;
  switch (head_dim) {
    case 64:
      if (q8) {
        launch_d<KvQ8Block, 64>(grid, stream, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2, scale,
                                part, stages, dot);
      } else {
        launch_d<__half, 64>(grid, stream, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2, scale,
                             part, stages, dot);
      }
      break;
    case 128:
      if (q8) {
        launch_d<KvQ8Block, 128>(grid, stream, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2,
                                 scale, part, stages, dot);
      } else {
        launch_d<__half, 128>(grid, stream, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2, scale,
                              part, stages, dot);
      }
      break;
    default:
      if (q8) {
        launch_d<KvQ8Block, 256>(grid, stream, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2,
                                 scale, part, stages, dot);
      } else {
        launch_d<__half, 256>(grid, stream, q, k, v, seqs, tiles, tables, n_head, group, row_bytes, bs_log2, scale,
                              part, stages, dot);
      }
      break;
  }
}

}  // namespace hearth::cuda

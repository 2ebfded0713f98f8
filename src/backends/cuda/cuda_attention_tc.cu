// Prompt attention on the f16 tensor cores (flash-attention style). A block of 4 warps
// takes up to 64 query vectors of one sequence and KV head (rows x the query heads that
// share the KV head; warp w the vectors 16 w .. 16 w + 15) and walks the keys the tile's
// last row sees in chunks of 32: the chunk's K and V rows are copied from the paged
// cache to shared memory (cp.async, through the block table), each warp computes its
// 16 x 32 scores with mma.m16n8k16, applies the causal mask, updates its online softmax
// in registers, and adds the chunk's weighted values to its 16 x head_dim accumulator.
//
// Precision: the cache holds f16, so K and V are exact operands; q (scaled) and the
// softmax weights are f32 and enter as two f16 values each, x = hi + lo with hi = f16(x)
// and lo = f16(x - hi), one MMA per half: the products are exact and the sums f32, so
// scores and outputs stay within f32 rounding of the CUDA scalar kernel. Over a q8_0
// cache q and the weights enter as hi only (one MMA, not two): f16's rounding of them is
// a twentieth of the cache's own quantization step.
//
// Decode rows of long contexts (kDecode: one row a tile, at most 16 query vectors, the
// keys split over blocks by the caller): the four warps share the 16 query vectors and
// take 16 keys each of a 64-key chunk, so all of them compute and twice the keys are in
// flight per barrier; their softmax states are merged in shared memory at the end, in
// warp order. NSTG stage buffers (2 or 3 for decode): the next NSTG - 1 chunks' copies
// are issued before this chunk is computed.
//
// q8_0 caches: the reference path (stage_q8) loads each 34-byte block with scalar loads
// and converts it to f16 as it is staged, synchronously: no copy is in flight while a
// chunk is computed, and decode at long contexts ran slower than over f16 (the 9B at 32k:
// 218 against 285 tok/s on the H100). The decode variant's raw path (kRaw) instead copies
// each key's blocks of the head as they are (17 aligned words of head_dim / 16 bytes:
// a head's 32-value blocks take 17 * head_dim / 16 bytes) with cp.async, each warp its own
// 16 keys, NSTG - 1 chunks ahead, and the warp converts its keys to the f16 buffer just
// before it computes them (d * q rounded to f16 on the f16 units: the exact product
// rounded once, the bits stage_q8 writes), so the rest of the kernel and its results are
// those of the reference path, with half the bytes of f16 in flight.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "backends/cuda/cuda_attention.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kv_q8.cuh"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma_f16.cuh"

namespace hearth::cuda {
namespace {

constexpr int kWarps = kTcQueries / 16, kKeys = 32;

// 8 values of a q8_0 block (from value o) as f16 into shared memory: d * q rounded.
__device__ __forceinline__ void stage_q8(__half* dst, const KvQ8Block* b, int o) {
  const float d = __half2float(b->d);
  __half2 h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[i] = __floats2half2_rn(d * static_cast<float>(b->qs[o + 2 * i]), d * static_cast<float>(b->qs[o + 2 * i + 1]));
  }
  *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(h);
}

// An asynchronous copy of N (4, 8 or 16) aligned bytes.
template <int N>
__device__ __forceinline__ void cp_async_n(void* smem, const void* gmem) {
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "n"(N));
  }
}

// Two int8 values of u, whose bytes are q + 128 (selected by sel: 0x4140 the low two,
// 0x4342 the high two), times d2 as an f16 pair: the bytes as the mantissas of 1024 + b,
// minus 1152 (exact: q), times d rounded once (the exact product d * q, |q| <= 128 and d
// an f16, rounded to f16: stage_q8's bits).
__device__ __forceinline__ unsigned q8_pair_f16(uint32_t u, unsigned sel, __half2 d2) {
  const uint32_t x = __byte_perm(u, 0x64646464u, sel);
  const __half2 q = __hsub2_rn(*reinterpret_cast<const __half2*>(&x), __half2half2(__ushort_as_half(0x6480)));
  const __half2 h = __hmul2_rn(q, d2);
  return *reinterpret_cast<const unsigned*>(&h);
}

// Bytes of a head's q8_0 blocks in a cache row: 17 words of D / 16 bytes.
template <int D>
constexpr int kQ8Seg = 34 * D / 32;

// KT: the cache's element type, __half (copied by cp.async) or KvQ8Block (dequantized to
// f16 while staged; kv_stride then counts blocks). kRaw (decode, KvQ8Block; kv_stride a
// multiple of D / 32 blocks and the caches 16-byte aligned, so that every head's blocks
// start at a multiple of D / 16 bytes): NSTG raw stage buffers per warp and one f16
// buffer, as above.
template <int D, bool kDecode, int NSTG, class KT, bool kRaw = false>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attention_prefill_tc_kernel(const float* __restrict__ q, const KT* __restrict__ kc,
                                const KT* __restrict__ vc, const SeqDesc* __restrict__ seqs,
                                const Tile* __restrict__ tiles, const int32_t* __restrict__ tables, int n_head,
                                int group, int64_t kv_stride, int bs_log2, float scale, float* __restrict__ out,
                                float* __restrict__ part) {
  constexpr int DS = D + 8;  // shared row stride in halves: 16 bytes of padding, conflict-free ldmatrix
  constexpr int NT = D / 8;  // 8-wide column tiles of the output
  constexpr int QR = kDecode ? 16 : kTcQueries;        // query vectors staged
  constexpr int KI = kDecode ? kWarps * 16 : kKeys;    // keys staged per iteration
  constexpr int KW = kDecode ? 16 : kKeys;             // keys a warp scores per iteration
  static_assert(!kRaw || (kDecode && std::is_same_v<KT, KvQ8Block> && NSTG >= 2), "raw q8_0 staging: decode");
  // f16 caches: q and the softmax weights enter as hi + lo (exact products). q8_0 caches:
  // as one f16 value each (hi only): their rounding (2^-12 of a value at most) is a
  // twentieth of the cache's own (a block's step d / 2 = max |x| / 254), and it halves the
  // tensor-core work, which bounds these kernels (see the header).
  constexpr bool kLo = !std::is_same_v<KT, KvQ8Block>;
  constexpr int NF = kRaw ? 1 : NSTG;  // f16 K / V buffers
  extern __shared__ __align__(16) __half sm[];
  __half* qh = sm;                  // [QR][DS]
  __half* ql = qh + QR * DS;        // [QR][DS]
  __half* ks = ql + QR * DS;        // [NF][KI][DS]
  __half* vs = ks + NF * KI * DS;   // [NF][KI][DS]
  // kRaw: [NSTG][kWarps][K, V][16 keys][kQ8Seg<D>] bytes (16-byte aligned: the f16
  // buffers are multiples of 16 bytes).
  unsigned char* raw = reinterpret_cast<unsigned char*>(vs + NF * KI * DS);
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const Tile tile = tiles[blockIdx.x];
  const SeqDesc sd = seqs[tile.seq];
  const int hkv = static_cast<int>(blockIdx.y);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int nq = tile.n_rows * group;
  const int32_t* table = tables + sd.table_off;
  // Query vector v: row tile.row0 + v / group, head hkv * group + v % group.
  for (int i = static_cast<int>(threadIdx.x); i < QR * (D / 2); i += kWarps * 32) {
    const int v = i / (D / 2), d = 2 * (i % (D / 2));
    float2 x = make_float2(0.0f, 0.0f);
    if (v < nq) {
      const int64_t row = sd.first_row + tile.row0 + v / group;
      x = *reinterpret_cast<const float2*>(q + (row * n_head + hkv * group + v % group) * D + d);
      x.x *= scale;
      x.y *= scale;
    }
    unsigned hi, lo;
    split_pair(x.x, x.y, hi, lo);
    *reinterpret_cast<unsigned*>(qh + v * DS + d) = hi;
    if constexpr (kLo) *reinterpret_cast<unsigned*>(ql + v * DS + d) = lo;
  }
  // This thread's two query vectors (rows gid and gid + 8 of the warp's 16) see keys below
  // their limits; the warp's last vector sees the most.
  const int qw = kDecode ? 0 : 16 * warp;  // the warp's first query vector
  const int kw = kDecode ? KW * warp : 0;  // the warp's first key of an iteration's chunk
  const int v0 = qw + gid, v1 = v0 + 8;
  const int base = sd.pos0 + tile.row0;
  const int lim0 = v0 < nq ? base + v0 / group + 1 : 0, lim1 = v1 < nq ? base + v1 / group + 1 : 0;
  const int warp_lim = qw < nq ? base + min(qw + 15, nq - 1) / group + 1 : 0;
  const int n_keys = base + tile.n_rows;
  // Split over keys (part != null, decode rows of long contexts): this block takes range
  // blockIdx.z of gridDim.z equal ranges and writes [max, sum, unnormalised acc] there.
  const int range = (n_keys + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
  const int k_begin = part != nullptr ? static_cast<int>(blockIdx.z) * range : 0;
  const int k_end = part != nullptr ? min(n_keys, k_begin + range) : n_keys;
  const int bs_mask = (1 << bs_log2) - 1;
  const int64_t kv_off = static_cast<int64_t>(hkv) * D;
  float o[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  // The K and V rows of keys ci .. ci + KI - 1 into stage buffer buf (zeros past k_end).
  // Thread t copies the 16-byte piece t % (D / 8) of keys t / (D / 8) + j * KPS: a fixed
  // trip count, so the block-table reads of its keys are issued together.
  constexpr int KPS = kWarps * 32 / (D / 8);  // keys per pass of the block's threads
  static_assert(KI % KPS == 0, "whole passes");
  const int st_c = 8 * (static_cast<int>(threadIdx.x) % (D / 8)), st_j = static_cast<int>(threadIdx.x) / (D / 8);
  auto stage = [&](int buf, int ci) {
    int64_t rows[KI / KPS];
#pragma unroll
    for (int p = 0; p < KI / KPS; ++p) {
      const int key = ci + st_j + p * KPS;
      rows[p] = key < k_end ? static_cast<int64_t>(table[key >> bs_log2]) * (bs_mask + 1) + (key & bs_mask) : -1;
    }
#pragma unroll
    for (int p = 0; p < KI / KPS; ++p) {
      const int j = st_j + p * KPS;
      __half* kd = ks + (buf * KI + j) * DS + st_c;
      __half* vd = vs + (buf * KI + j) * DS + st_c;
      if (rows[p] >= 0) {
        if constexpr (std::is_same_v<KT, KvQ8Block>) {
          const int64_t b = rows[p] * kv_stride + (kv_off + st_c) / 32;
          stage_q8(kd, kc + b, st_c & 31);
          stage_q8(vd, vc + b, st_c & 31);
        } else {
          cp_async16(kd, kc + rows[p] * kv_stride + kv_off + st_c);
          cp_async16(vd, vc + rows[p] * kv_stride + kv_off + st_c);
        }
      } else {
        *reinterpret_cast<int4*>(kd) = make_int4(0, 0, 0, 0);
        *reinterpret_cast<int4*>(vd) = make_int4(0, 0, 0, 0);
      }
    }
  };
  // kRaw: lane j < 16's key ci + kw + j: its cache row, or -1 (past k_end, other lanes).
  // (Read a chunk before its copies are issued: the table's latency is hidden by a chunk.)
  constexpr int SEG = kQ8Seg<D>, WB = D / 16;
  auto key_row = [&](int ci) -> long long {
    const int key = ci + kw + lane;
    return lane < 16 && key < k_end ? static_cast<long long>(table[key >> bs_log2]) * (bs_mask + 1) + (key & bs_mask)
                                    : -1;
  };
  // kRaw: the warp's keys (rows from key_row) as raw blocks into stage buffer rbuf: the
  // warp's 2 x 16 x 17 words go out 17 a lane, consecutive lanes on consecutive words of
  // a row.
  auto stage_raw = [&](int rbuf, long long row) {
    unsigned char* dst = raw + static_cast<size_t>(rbuf * kWarps + warp) * (2 * 16 * SEG);
#pragma unroll
    for (int t = 0; t < 17; ++t) {
      const int i = lane + 32 * t;
      const int kv = i / (16 * 17), rem = i % (16 * 17);
      const int j = rem / 17, w = rem % 17;
      const long long r = __shfl_sync(0xffffffffu, row, j);
      if (r >= 0) {
        const KT* blk = (kv ? vc : kc) + r * kv_stride + hkv * (D / 32);
        cp_async_n<WB>(dst + (kv * 16 + j) * SEG + w * WB, reinterpret_cast<const unsigned char*>(blk) + w * WB);
      }
    }
  };
  // kRaw: the warp's keys of stage buffer rbuf into its rows kw .. kw + 15 of the f16
  // buffer (zeros past k_end, as stage writes): 8 values a lane and pass, as stage_q8.
  auto convert_raw = [&](int rbuf, int c0) {
    const unsigned char* src = raw + static_cast<size_t>(rbuf * kWarps + warp) * (2 * 16 * SEG);
    constexpr int PK = D / 8;  // pieces of 8 values a row
#pragma unroll
    for (int t = 0; t < PK; ++t) {  // 2 x 16 x PK pieces, 32 a pass
      const int p = lane + 32 * t;
      const int kv = p / (16 * PK), rem = p % (16 * PK);
      const int j = rem / PK, piece = rem % PK;
      int4 val = make_int4(0, 0, 0, 0);
      if (c0 + j < k_end) {
        const unsigned char* b = src + (kv * 16 + j) * SEG + 34 * (piece >> 2);
        const __half2 d2 = __half2half2(*reinterpret_cast<const __half*>(b));
        const auto* qs = reinterpret_cast<const uint16_t*>(b + 2 + 8 * (piece & 3));
        const uint32_t u0 = (static_cast<uint32_t>(qs[0]) | (static_cast<uint32_t>(qs[1]) << 16)) ^ 0x80808080u;
        const uint32_t u1 = (static_cast<uint32_t>(qs[2]) | (static_cast<uint32_t>(qs[3]) << 16)) ^ 0x80808080u;
        val.x = static_cast<int>(q8_pair_f16(u0, 0x4140, d2));
        val.y = static_cast<int>(q8_pair_f16(u0, 0x4342, d2));
        val.z = static_cast<int>(q8_pair_f16(u1, 0x4140, d2));
        val.w = static_cast<int>(q8_pair_f16(u1, 0x4342, d2));
      }
      *reinterpret_cast<int4*>((kv ? vs : ks) + (kw + j) * DS + 8 * piece) = val;
    }
  };
  if constexpr (kRaw) {
    // Each warp's own pipeline (a commit group a chunk, empty past the range); q is
    // staged by the whole block.
#pragma unroll
    for (int s = 0; s + 1 < NSTG; ++s) {
      if (k_begin + s * KI < k_end) stage_raw(s, key_row(k_begin + s * KI));
      cp_async_commit();
    }
    __syncthreads();
  } else if constexpr (NSTG > 1) {
    // NSTG > 1: the next NSTG - 1 chunks' copies are in flight while this one is computed
    // (a commit group a chunk, empty past the range).
#pragma unroll
    for (int s = 0; s + 1 < NSTG; ++s) {
      if (k_begin + s * KI < k_end) stage(s, k_begin + s * KI);
      cp_async_commit();
    }
  }
  long long next_row = kRaw ? key_row(k_begin + (NSTG - 1) * KI) : -1;  // (kRaw) the next chunk to copy
  int it = 0;
  for (int ci = k_begin; ci < k_end; ci += KI, ++it) {
    const int buf = NSTG > 1 ? it % NSTG : 0;
    if constexpr (kRaw) {
      cp_async_wait_pending<NSTG - 2>();  // this warp's copies of this chunk
      __syncwarp();                       // ... seen by the warp; its lanes are done with chunk it - 1
      const int nx = ci + (NSTG - 1) * KI;
      if (nx < k_end) stage_raw((it + NSTG - 1) % NSTG, next_row);
      cp_async_commit();
      next_row = key_row(nx + KI);
    } else if constexpr (NSTG > 1) {
      cp_async_wait_pending<NSTG - 2>();  // this chunk's copies (later chunks may still fly)
      __syncthreads();                    // ... seen by all; every warp is done with chunk it - 1
      const int nx = ci + (NSTG - 1) * KI;
      if (nx < k_end) stage((it + NSTG - 1) % NSTG, nx);
      cp_async_commit();
    } else {
      __syncthreads();  // the previous chunk is no longer read (and q is staged)
      stage(0, ci);
      cp_async_wait_all();
      __syncthreads();
    }
    const __half* kb = ks + (kRaw ? 0 : buf) * KI * DS;
    const __half* vb = vs + (kRaw ? 0 : buf) * KI * DS;
    const int c0 = ci + kw;  // the warp's keys: c0 .. c0 + KW - 1
    if (c0 >= warp_lim || c0 >= k_end) continue;  // warp-uniform: none of them is seen by the warp
    if constexpr (kRaw) {
      convert_raw(buf, c0);
      __syncwarp();
    }
    // Scores: s[n] is the 16 x 8 tile of keys c0 + 8 n .. c0 + 8 n + 7.
    constexpr int NS = KW / 8;
    float s[NS][4];
#pragma unroll
    for (int n = 0; n < NS; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    if constexpr (kLo) {
#pragma unroll
      for (int k0 = 0; k0 < D; k0 += 16) {
        unsigned ah[4], al[4];
        const int qoff = (qw + (lane & 15)) * DS + k0 + (lane >> 4) * 8;
        ldsm_x4(ah, qh + qoff);
        ldsm_x4(al, ql + qoff);
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
          unsigned b[4];
          ldsm_x4(b, kb + (kw + 16 * np + (lane & 7) + (lane >> 4) * 8) * DS + k0 + ((lane >> 3) & 1) * 8);
          mma_f16(s[2 * np], ah, b[0], b[1]);
          mma_f16(s[2 * np], al, b[0], b[1]);
          mma_f16(s[2 * np + 1], ah, b[2], b[3]);
          mma_f16(s[2 * np + 1], al, b[2], b[3]);
        }
      }
    } else {
      // One product a tile and 16 dimensions, the even and odd 16s into two sums (half
      // the dependent chain of tensor-core operations), added at the end.
      float s2[NS][4];
#pragma unroll
      for (int n = 0; n < NS; ++n) s2[n][0] = s2[n][1] = s2[n][2] = s2[n][3] = 0.0f;
#pragma unroll
      for (int k0 = 0; k0 < D; k0 += 32) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          unsigned ah[4];
          ldsm_x4(ah, qh + (qw + (lane & 15)) * DS + k0 + 16 * h + (lane >> 4) * 8);
#pragma unroll
          for (int np = 0; np < NS / 2; ++np) {
            unsigned b[4];
            ldsm_x4(b, kb + (kw + 16 * np + (lane & 7) + (lane >> 4) * 8) * DS + k0 + 16 * h + ((lane >> 3) & 1) * 8);
            mma_f16(h ? s2[2 * np] : s[2 * np], ah, b[0], b[1]);
            mma_f16(h ? s2[2 * np + 1] : s[2 * np + 1], ah, b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int n = 0; n < NS; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] += s2[n][e];
      }
    }
    // Causal mask and the online softmax of rows v0 (entries 0, 1) and v1 (entries 2, 3).
    float cm0 = -INFINITY, cm1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = c0 + 8 * n + 2 * tig + (e & 1);
        if (key >= (e < 2 ? lim0 : lim1) || key >= k_end) s[n][e] = -INFINITY;
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
    const float b0 = n0 == -INFINITY ? 0.0f : n0, b1 = n1 == -INFINITY ? 0.0f : n1;  // no (-inf) - (-inf)
    const float corr0 = expf(m0 - b0), corr1 = expf(m1 - b1);
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
      s[n][0] = expf(s[n][0] - b0);
      s[n][1] = expf(s[n][1] - b0);
      s[n][2] = expf(s[n][2] - b1);
      s[n][3] = expf(s[n][3] - b1);
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
        unsigned b[4];
        ldsm_x4_trans(b, vb + (kw + 16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8) * DS + 16 * dp + (lane >> 4) * 8);
        mma_f16(o[2 * dp], ph, b[0], b[1]);
        if constexpr (kLo) mma_f16(o[2 * dp], pl, b[0], b[1]);
        mma_f16(o[2 * dp + 1], ph, b[2], b[3]);
        if constexpr (kLo) mma_f16(o[2 * dp + 1], pl, b[2], b[3]);
      }
    }
  }
  if constexpr (kDecode) {
    // The warps' states of the same 16 vectors, merged in warp order: (m, l) per warp and
    // vector into the q buffers, the unnormalised outputs into the key / value buffers.
    if constexpr (kRaw) cp_async_wait_pending<0>();  // (none is pending: each chunk's was waited for)
    __syncthreads();  // every warp is done with q, K and V
    float* ml = reinterpret_cast<float*>(qh);  // [kWarps][16][2]
    float* ow = reinterpret_cast<float*>(ks);  // [kWarps][16][D]
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int v = gid + 8 * half;
      if (tig == 0) {
        ml[(warp * 16 + v) * 2] = half ? m1 : m0;
        ml[(warp * 16 + v) * 2 + 1] = half ? l1 : l0;
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        *reinterpret_cast<float2*>(ow + (warp * 16 + v) * D + 8 * t + 2 * tig) =
            make_float2(o[t][2 * half], o[t][2 * half + 1]);
      }
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int v = gid + 8 * half;
      float mm = -INFINITY;
      for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, ml[(w * 16 + v) * 2]);
      const float bm = mm == -INFINITY ? 0.0f : mm;
      float ll = 0.0f, f[kWarps];
      for (int w = 0; w < kWarps; ++w) {
        f[w] = expf(ml[(w * 16 + v) * 2] - bm);
        ll += ml[(w * 16 + v) * 2 + 1] * f[w];
      }
      if (half) {
        m1 = mm;
        l1 = ll;
      } else {
        m0 = mm;
        l0 = ll;
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float a0 = 0.0f, a1 = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          const float2 x = *reinterpret_cast<const float2*>(ow + (w * 16 + v) * D + 8 * t + 2 * tig);
          a0 += x.x * f[w];
          a1 += x.y * f[w];
        }
        o[t][2 * half] = a0;
        o[t][2 * half + 1] = a1;
      }
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int v = half ? v1 : v0;
    if (v >= nq) continue;
    const int64_t row = sd.first_row + tile.row0 + v / group;
    if (part != nullptr) {
      float* pp = part + ((row * n_head + hkv * group + v % group) * gridDim.z + blockIdx.z) * (D + 2);
      if (tig == 0) {
        pp[0] = half ? m1 : m0;
        pp[1] = half ? l1 : l0;
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        pp[2 + 8 * t + 2 * tig] = o[t][2 * half];
        pp[2 + 8 * t + 2 * tig + 1] = o[t][2 * half + 1];
      }
      continue;
    }
    float* dst = out + (row * n_head + hkv * group + v % group) * D + 2 * tig;
    const float inv = 1.0f / (half ? l1 : l0);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      *reinterpret_cast<float2*>(dst + 8 * t) = make_float2(o[t][2 * half] * inv, o[t][2 * half + 1] * inv);
    }
  }
}

// Shared memory of a block. (The decode merge reuses the q buffers for [4][16] (m, l) and
// the K / V ones for [4][16][D] f32 outputs: both fit, with kRaw's one f16 buffer too.)
// kRaw: the q buffers, one f16 K / V buffer of 64 keys and nstg raw stages.
constexpr int64_t raw_smem_bytes(int64_t d, int64_t nstg) {
  return 2 * (2 * 16 + 2 * kWarps * 16) * (d + 8) + nstg * kWarps * 2 * 16 * (34 * d / 32);
}
template <int D, bool kDecode, int NSTG, bool kRaw = false>
constexpr size_t tc_smem_bytes() {
  if constexpr (kRaw) return static_cast<size_t>(raw_smem_bytes(D, NSTG));
  return kDecode ? sizeof(__half) * static_cast<size_t>(2 * 16 + 2 * NSTG * kWarps * 16) * (D + 8)
                 : sizeof(__half) * static_cast<size_t>(2 * kTcQueries + 2 * NSTG * kKeys) * (D + 8);
}

// Allows the instantiation its shared memory (above 48 KiB), once.
template <int D, bool kDecode, int NSTG, class KT = __half, bool kRaw = false>
void allow_smem() {
  static bool raised = false;
  if (!raised) {
    LaunchRuntime::check(cudaFuncSetAttribute(attention_prefill_tc_kernel<D, kDecode, NSTG, KT, kRaw>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(tc_smem_bytes<D, kDecode, NSTG, kRaw>())),
                       "attention", "cudaFuncSetAttribute");
    raised = true;
  }
}

template <int D, bool kDecode, int NSTG>
void launch_dk(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v, bool q8,
               const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head, int group, int64_t kv_stride,
               int bs_log2, float scale, float* out, float* part) {
  if (q8) {
    allow_smem<D, kDecode, NSTG, KvQ8Block>();
    ::hearth::cuda::launch_pdl(attention_prefill_tc_kernel<D, kDecode, NSTG, KvQ8Block>, grid, kWarps * 32,
                               tc_smem_bytes<D, kDecode, NSTG>(), st, q, static_cast<const KvQ8Block*>(k),
                               static_cast<const KvQ8Block*>(v), seqs, tiles, tables, n_head, group, kv_stride,
                               bs_log2, scale, out, part);
    return;
  }
  allow_smem<D, kDecode, NSTG>();
  ::hearth::cuda::launch_pdl(attention_prefill_tc_kernel<D, kDecode, NSTG, __half>, grid, kWarps * 32,
                             tc_smem_bytes<D, kDecode, NSTG>(), st, q, static_cast<const __half*>(k),
                             static_cast<const __half*>(v), seqs, tiles, tables, n_head, group, kv_stride, bs_log2,
                             scale, out, part);
}

// The raw q8_0 decode variant, NSTG raw stages a warp.
template <int D, int NSTG>
void launch_raw(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v, const SeqDesc* seqs,
                const Tile* tiles, const int32_t* tables, int n_head, int group, int64_t kv_stride, int bs_log2,
                float scale, float* out, float* part) {
  allow_smem<D, true, NSTG, KvQ8Block, true>();
  ::hearth::cuda::launch_pdl(attention_prefill_tc_kernel<D, true, NSTG, KvQ8Block, true>, grid, kWarps * 32,
                             tc_smem_bytes<D, true, NSTG, true>(), st, q, static_cast<const KvQ8Block*>(k),
                             static_cast<const KvQ8Block*>(v), seqs, tiles, tables, n_head, group, kv_stride, bs_log2,
                             scale, out, part);
}

template <int D, int NSTG, class KT = __half, bool kRaw = false>
int64_t resident_decode_blocks() {
  static const int64_t n = [] {
    allow_smem<D, true, NSTG, KT, kRaw>();
    int per_sm = 0, dev = 0, sms = 0;
    LaunchRuntime::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attention_prefill_tc_kernel<D, true, NSTG, KT, kRaw>,
                                                                     kWarps * 32, tc_smem_bytes<D, true, NSTG, kRaw>()),
                       "attention", "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    LaunchRuntime::check(cudaGetDevice(&dev), "attention", "cudaGetDevice");
    LaunchRuntime::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attention",
                       "cudaDeviceGetAttribute");
    return std::max<int64_t>(1, static_cast<int64_t>(per_sm) * sms);
  }();
  return n;
}

// Blocks of the raw q8_0 decode variant with NSTG (2-4) raw stages that the GPU holds.
template <int D>
int64_t resident_raw_blocks(int nstg) {
  return nstg >= 4   ? resident_decode_blocks<D, 4, KvQ8Block, true>()
         : nstg == 3 ? resident_decode_blocks<D, 3, KvQ8Block, true>()
                     : resident_decode_blocks<D, 2, KvQ8Block, true>();
}

template <int D>
int64_t resident_decode_blocks_d(int decode) {
  return decode == 3 ? resident_decode_blocks<D, 3>() : decode == 2 ? resident_decode_blocks<D, 2>()
                                                                    : resident_decode_blocks<D, 1>();
}

template <int D>
void launch_d(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v, bool q8, const SeqDesc* seqs,
              const Tile* tiles, const int32_t* tables, int n_head, int group, int64_t kv_stride, int bs_log2,
              float scale, float* out, float* part, int decode, int q8_raw) {
  if (q8 && q8_raw >= 2 && decode >= 1) {
    if (q8_raw >= 4) {
      launch_raw<D, 4>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
    } else if (q8_raw == 3) {
      launch_raw<D, 3>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
    } else {
      launch_raw<D, 2>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
    }
    return;
  }
  if (decode == 3) {
    launch_dk<D, true, 3>(grid, st, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
  } else if (decode == 2) {
    launch_dk<D, true, 2>(grid, st, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
  } else if (decode == 1) {
    launch_dk<D, true, 1>(grid, st, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
  } else {
    launch_dk<D, false, 1>(grid, st, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part);
  }
}

std::atomic<bool> g_q8_raw{true};

}  // namespace

bool prefill_tc_supported(int64_t head_dim, int64_t group, const void* k, const void* v, int64_t kv_stride) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  if (group < 1 || group > kTcQueries) return false;
  return (reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) % 16 == 0 && kv_stride % 8 == 0;
}

int tc_decode_q8_raw_stages(int64_t head_dim, int64_t n_kv_dim, int decode) {
  if (!g_q8_raw.load(std::memory_order_relaxed) || decode < 1) return 0;
  if ((head_dim != 64 && head_dim != 128 && head_dim != 256) || n_kv_dim % head_dim != 0) return 0;
  static const int64_t optin = [] {
    int dev = 0, bytes = 0;
    LaunchRuntime::check(cudaGetDevice(&dev), "attention", "cudaGetDevice");
    LaunchRuntime::check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "attention",
                       "cudaDeviceGetAttribute");
    return static_cast<int64_t>(bytes);
  }();
  for (int n = std::min(decode + 1, 4); n >= 2; --n) {
    if (raw_smem_bytes(head_dim, n) <= optin) return n;
  }
  return 0;
}

void set_tc_decode_q8_raw(bool on) { g_q8_raw.store(on, std::memory_order_relaxed); }

int64_t tc_decode_resident_blocks(int head_dim, int decode, int q8_raw) {
  switch (head_dim) {
    case 64:
      return q8_raw >= 2 ? resident_raw_blocks<64>(q8_raw) : resident_decode_blocks_d<64>(decode);
    case 128:
      return q8_raw >= 2 ? resident_raw_blocks<128>(q8_raw) : resident_decode_blocks_d<128>(decode);
    default:
      return q8_raw >= 2 ? resident_raw_blocks<256>(q8_raw) : resident_decode_blocks_d<256>(decode);
  }
}

void launch_prefill_tc(dim3 grid, cudaStream_t stream, const float* q, const void* k, const void* v, bool q8,
                       const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head, int group,
                       int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out, float* part,
                       int decode, int q8_raw) {
  switch (head_dim) {
    case 64:
      launch_d<64>(grid, stream, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part, decode,
                  q8_raw);
      break;
    case 128:
      launch_d<128>(grid, stream, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part, decode,
                  q8_raw);
      break;
    default:
      launch_d<256>(grid, stream, q, k, v, q8, seqs, tiles, tables, n_head, group, kv_stride, bs_log2, scale, out, part, decode,
                  q8_raw);
      break;
  }
}

}  // namespace hearth::cuda

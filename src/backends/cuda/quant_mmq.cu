// q8_gemm: Q4_K (and, with Q8_K tokens, Q6_K: quant_mmq_q6k.cuh) weights times 4-64 tokens
// (deterministic mode: any number) on the integer tensor cores. The tokens are
// quantized in chunks of 32 (quantize_chunks, as for the decode matrix-vector product),
// each 32-element sub-block of a weight row meets a chunk in one mma.m16n8k32 (s8 x s8 ->
// s32) with the weight's 4-bit quants taken straight from the GGUF block into the A
// fragment (no dequantized copy anywhere), and the integer sums are scaled per sub-block
// in f32: d sc dx (q . xq) - dmin m (dx sum xq).
//
// A block of 4 warps owns 64 rows (a warp 16) x BN tokens; per 256-column step the tokens'
// quants and chunk scales are staged in shared memory (cp.async, one step ahead) and read
// by all four warps, while each thread's weight words for the next step are already in
// flight in registers. The columns are split over blockIdx.z from the weight's shape only,
// the partial sums added in split order: a token's outputs are the same bits in any batch
// of 1 to 64 tokens.
//
// The default kernel (mmq_q4k_q8k_kernel; cuda.mmq_q8k=0: the one above) quantizes
// the tokens as the CPU back-end does for K-quants (ggml's Q8_K: one scale per 256
// values, the signed extreme mapped to -127), so a block's whole dot product is integer
// until one scale per 256 columns: the 6-bit sub-block scales enter the A operand split
// in two 3-bit halves (q * hi and q * lo, every byte <= 105: int8; sums 8 hi + lo), and the mins as a second MMA with A = the sub-block's min in every byte, whose
// accumulator sums m * sum(xq) over the sub-blocks. Per output and 256 columns: two
// conversions and four multiply-adds instead of that per 32 columns.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/quant_shared.cuh"
#include "backends/cuda/quant_q8_dot.cuh"
#include "core/error.h"
#include "core/tune.h"

namespace hearth::cuda {
namespace {

#include "backends/cuda/quant_mmq_core.cuh"

// One step's weight registers of a thread: its two rows' block headers (d, dmin, scales)
// and, per 64-element group g, the words at byte 4 tig and 16 + 4 tig of qs[32 g ..].
struct StepWeights {
  int4 head[2];
  int q[4][4];  // [g]: row lo word, row hi word, row lo word + 16, row hi word + 16
};

__device__ __forceinline__ void load_step(const uint8_t* r0, const uint8_t* r1, int st, int tig, StepWeights& s) {
  const uint8_t* b0 = r0 + static_cast<int64_t>(st) * kBlockBytes;
  const uint8_t* b1 = r1 + static_cast<int64_t>(st) * kBlockBytes;
  s.head[0] = *reinterpret_cast<const int4*>(b0);
  s.head[1] = *reinterpret_cast<const int4*>(b1);
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int off = 16 + 32 * g + 4 * tig;
    s.q[g][0] = *reinterpret_cast<const int*>(b0 + off);
    s.q[g][1] = *reinterpret_cast<const int*>(b1 + off);
    s.q[g][2] = *reinterpret_cast<const int*>(b0 + off + 16);
    s.q[g][3] = *reinterpret_cast<const int*>(b1 + off + 16);
  }
}

// Sub-block j's d * sc and dmin * m of a Q4_K block header.
__device__ __forceinline__ float2 sub_scales(const int4 head, int j) {
  const int sc3[3] = {head.y, head.z, head.w};
  return q8::k4_sub_scales(sc3, __half22float2(*reinterpret_cast<const __half2*>(&head.x)), j);
}

// out: [splits][n_tokens][n_rows] partial sums (y itself with one split).
template <int BN>
__global__ void __launch_bounds__(kThreads)
    mmq_q4k_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                   const int8_t* __restrict__ xq, const float2* __restrict__ xd, int64_t n_tokens,
                   int steps_per_split, float* __restrict__ out) {
  constexpr int NT8 = BN / 8;
  __shared__ __align__(16) int8_t xs[2][BN][kXRow];
  __shared__ __align__(16) float2 ds[2][BN][kDRow];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows + warp * 16;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int n_steps = static_cast<int>(n_cols / kStep);
  const int step0 = static_cast<int>(blockIdx.z) * steps_per_split;
  const int step1 = min(n_steps, step0 + steps_per_split);
  const int64_t chunks = n_cols / 32;
  const uint8_t* r0 = w + min(row0 + gid, n_rows - 1) * row_bytes;  // rows past the end: read, never written
  const uint8_t* r1 = w + min(row0 + gid + 8, n_rows - 1) * row_bytes;

  auto stage = [&](int buf, int st) {
    stage_tokens<BN>(&xs[buf][0][0], xq, n_cols, tok0, n_tokens, st);
    for (int i = static_cast<int>(threadIdx.x); i < BN * 4; i += kThreads) {  // 8 float2 = 4 x 16 bytes a token
      const int tk = i / 4, c = i % 4;
      float2* dst = &ds[buf][tk][2 * c];
      if (tok0 + tk < n_tokens) {
        cp_async16(dst, xd + (tok0 + tk) * chunks + static_cast<int64_t>(st) * 8 + 2 * c);
      } else {
        *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
      }
    }
  };

  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  float acc[NT8][4];
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
  }
  StepWeights cur, next;
  if (step0 < step1) {
    stage(0, step0);
    cp_async_commit();
    load_step(r0, r1, step0, tig, cur);
  }
  for (int st = step0; st < step1; ++st) {
    const int buf = (st - step0) & 1;
    const bool more = st + 1 < step1;
    if (more) {
      stage(buf ^ 1, st + 1);
      cp_async_commit();
      load_step(r0, r1, st + 1, tig, next);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < 4; ++g) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int sb = 2 * g + h;
        int a[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = h ? (cur.q[g][i] >> 4) & q8::kLo4 : cur.q[g][i] & q8::kLo4;
        const float2 s0 = sub_scales(cur.head[0], sb), s1 = sub_scales(cur.head[1], sb);
#pragma unroll
        for (int n = 0; n < NT8; ++n) {
          const int8_t* xb = &xs[buf][n * 8 + gid][sb * 32 + 4 * tig];
          int c[4];
          mma_s8(a, *reinterpret_cast<const int*>(xb), *reinterpret_cast<const int*>(xb + 16), c);
          const float2 xa = ds[buf][n * 8 + 2 * tig][sb], xb2 = ds[buf][n * 8 + 2 * tig + 1][sb];
          acc[n][0] += s0.x * xa.x * static_cast<float>(c[0]) - s0.y * xa.y;
          acc[n][1] += s0.x * xb2.x * static_cast<float>(c[1]) - s0.y * xb2.y;
          acc[n][2] += s1.x * xa.x * static_cast<float>(c[2]) - s1.y * xa.y;
          acc[n][3] += s1.x * xb2.x * static_cast<float>(c[3]) - s1.y * xb2.y;
        }
      }
    }
    __syncthreads();  // this buffer is staged again two steps on
    if (more) cur = next;
  }
  float* o = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = tok0 + n * 8 + 2 * tig + (i & 1), row = row0 + gid + (i >= 2 ? 8 : 0);
      if (tok < n_tokens && row < n_rows) o[tok * n_rows + row] = acc[n][i];
    }
  }
}

// out: [splits][n_tokens][n_rows] partial sums (y itself with one split); x as Q8_K
// (xq: [n_tokens][n_cols], xd: [n_tokens][n_cols / 256]). The block's weight rows and the
// tokens of a step are both staged in shared memory (cp.async, NS - 1 steps ahead), so a
// thread holds only its accumulators: four blocks of 4 warps fit an SM (BN <= 32; the
// group loop below also takes BN = 64, measured no faster: two tiles of 32 are used).
template <int BN, int NS>
constexpr size_t q8k_smem_bytes() {
  return NS * (static_cast<size_t>(kRows) * kBlockBytes + static_cast<size_t>(BN) * kXRow + sizeof(float) * BN);
}

// kScaleAfter: each sub-block's raw 4-bit quants meet the tokens in one MMA and the integer
// sums are scaled by the 6-bit sub-block scale afterwards (four integer multiply-adds a
// tile), instead of two MMAs on the pre-scaled halves: the same integers, so the same bits,
// with one MMA fewer a sub-block and tile (cuda.mmq_scale_after).
template <int BN, int NS, int MINB = 4, bool kScaleAfter = false>
__global__ void __launch_bounds__(kThreads, MINB)
    mmq_q4k_q8k_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                       const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t n_tokens,
                       int steps_per_split, float* __restrict__ out) {
  constexpr int NT8 = BN / 8, TG = BN < 32 ? BN : 32, NTG = TG / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wsm = smem;                                                       // [NS][kRows][kBlockBytes]
  int8_t* xs = reinterpret_cast<int8_t*>(smem + NS * kRows * kBlockBytes);  // [NS][BN][kXRow]
  float* ds = reinterpret_cast<float*>(xs + NS * BN * kXRow);                // [NS][BN]
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t rowb = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t row0 = rowb + warp * 16;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int n_steps = static_cast<int>(n_cols / kStep);
  const int step0 = static_cast<int>(blockIdx.z) * steps_per_split;
  const int step1 = min(n_steps, step0 + steps_per_split);

  auto stage = [&](int buf, int st) {
    uint8_t* wb = wsm + buf * (kRows * kBlockBytes);
    for (int i = static_cast<int>(threadIdx.x); i < kRows * (kBlockBytes / 16); i += kThreads) {
      const int r = i / (kBlockBytes / 16), c = i % (kBlockBytes / 16);
      const int64_t row = min(rowb + r, n_rows - 1);  // rows past the end: read, never written
      cp_async16(wb + r * kBlockBytes + c * 16, w + row * row_bytes + static_cast<int64_t>(st) * kBlockBytes + c * 16);
    }
    stage_tokens<BN>(xs + buf * (BN * kXRow), xq, n_cols, tok0, n_tokens, st);
    stage_token_scales<BN>(ds + buf * BN, xd, tok0, n_tokens, n_steps, st);
  };

  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  float acc[NT8][4];
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
  }
  // NS - 1 steps in flight: each step waits for its own copies, then (after the barrier
  // that also tells every warp is done with the step before) stages the step NS - 1 on
  // into the buffer that step used. One commit group per step, empty ones included.
#pragma unroll
  for (int k = 0; k < NS - 1; ++k) {
    if (step0 + k < step1) stage(k, step0 + k);
    cp_async_commit();
  }
  for (int st = step0; st < step1; ++st) {
    const int it = st - step0, buf = it % NS;
    cp_async_wait<NS - 2>();
    __syncthreads();
    if (st + NS - 1 < step1) stage((it + NS - 1) % NS, st + NS - 1);
    cp_async_commit();
    const uint8_t* w0 = wsm + buf * (kRows * kBlockBytes) + (warp * 16 + gid) * kBlockBytes;  // row gid
    const uint8_t* w1 = w0 + 8 * kBlockBytes;                                                 // row gid + 8
    const int4 hd0 = *reinterpret_cast<const int4*>(w0), hd1 = *reinterpret_cast<const int4*>(w1);
    const int s0[3] = {hd0.y, hd0.z, hd0.w}, s1[3] = {hd1.y, hd1.z, hd1.w};
    const int8_t* xb = xs + buf * (BN * kXRow);
    const float* db = ds + buf * BN;
#pragma unroll
    for (int grp = 0; grp < BN / TG; ++grp) {
      // Per n-tile of the group: ch sums q * (scale >> 3), cl q * (scale & 7), cm min * q.
      int ch[NTG][4], cl[NTG][4], cm[NTG][4];
#pragma unroll
      for (int n = 0; n < NTG; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) ch[n][i] = cl[n][i] = cm[n][i] = 0;
      }
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
          if constexpr (kScaleAfter) {
            // ch: sc * (q . x), the same integer as 8 (q sc_hi . x) + (q sc_lo . x).
            int aq[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) aq[i] = h ? (q[i] >> 4) & q8::kLo4 : q[i] & q8::kLo4;
#pragma unroll
            for (int n = 0; n < NTG; ++n) {
              const int8_t* xp = xb + ((grp * NTG + n) * 8 + gid) * kXRow + sb * 32 + 4 * tig;
              const int b0 = *reinterpret_cast<const int*>(xp), b1 = *reinterpret_cast<const int*>(xp + 16);
              int c[4];
              mma_s8(aq, b0, b1, c);
              ch[n][0] += sc0 * c[0];
              ch[n][1] += sc0 * c[1];
              ch[n][2] += sc1 * c[2];
              ch[n][3] += sc1 * c[3];
              mma_s8_acc(am, b0, b1, cm[n]);
            }
          } else {
            int ah[4], al[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int qn = h ? (q[i] >> 4) & q8::kLo4 : q[i] & q8::kLo4;
              const int sc = (i & 1) ? sc1 : sc0;
              ah[i] = qn * (sc >> 3);  // bytes <= 15 * 7: no carries
              al[i] = qn * (sc & 7);
            }
#pragma unroll
            for (int n = 0; n < NTG; ++n) {
              const int8_t* xp = xb + ((grp * NTG + n) * 8 + gid) * kXRow + sb * 32 + 4 * tig;
              const int b0 = *reinterpret_cast<const int*>(xp), b1 = *reinterpret_cast<const int*>(xp + 16);
              mma_s8_acc(ah, b0, b1, ch[n]);
              mma_s8_acc(al, b0, b1, cl[n]);
              mma_s8_acc(am, b0, b1, cm[n]);
            }
          }
        }
      }
      const float2 dm0 = __half22float2(*reinterpret_cast<const __half2*>(&hd0.x));
      const float2 dm1 = __half22float2(*reinterpret_cast<const __half2*>(&hd1.x));
#pragma unroll
      for (int n = 0; n < NTG; ++n) {
        const int nn = grp * NTG + n;
        const float xa = db[nn * 8 + 2 * tig], xc = db[nn * 8 + 2 * tig + 1];
        const int k8 = kScaleAfter ? 1 : 8;  // (cl stays 0 with kScaleAfter)
        acc[nn][0] = q8k_step(acc[nn][0], dm0, xa, k8 * ch[n][0] + cl[n][0], cm[n][0]);
        acc[nn][1] = q8k_step(acc[nn][1], dm0, xc, k8 * ch[n][1] + cl[n][1], cm[n][1]);
        acc[nn][2] = q8k_step(acc[nn][2], dm1, xa, k8 * ch[n][2] + cl[n][2], cm[n][2]);
        acc[nn][3] = q8k_step(acc[nn][3], dm1, xc, k8 * ch[n][3] + cl[n][3], cm[n][3]);
      }
    }
  }
  float* o = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = tok0 + n * 8 + 2 * tig + (i & 1), row = row0 + gid + (i >= 2 ? 8 : 0);
      if (tok < n_tokens && row < n_rows) o[tok * n_rows + row] = acc[n][i];
    }
  }
}

// off / on: cuda.mmq_scale_after forces the variant; auto (the default): by the token
// tile, measured on the H200 (Qwen3.5-9B step, same call): 16-token tiles scale after (16
// sequences 7.75 -> 7.51 ms), 32-token ones keep the split (64 sequences 16.13 against
// 16.29 ms).
template <int BN>
bool scale_after() {
  const int64_t v = tune::get(tune::kCudaMmqScaleAfter);  // 0 off, 1 on, 2 auto
  return v == 2 ? BN <= 16 : v == 1;
}

template <int BN, int NS, int MINB = 4>
void launch_q8k(dim3 grid, cudaStream_t stream, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                const int8_t* xq, const float* xd, int64_t n_tokens, int steps_per_split, float* out) {
  constexpr size_t smem = q8k_smem_bytes<BN, NS>();  // (allowed past 48 KiB by q8_gemm_prepare)
  if (scale_after<BN>()) {
    launch_pdl(mmq_q4k_q8k_kernel<BN, NS, MINB, true>, grid, kThreads, smem, stream, w, row_bytes, n_rows, n_cols, xq,
               xd, n_tokens, steps_per_split, out);
  } else {
    launch_pdl(mmq_q4k_q8k_kernel<BN, NS, MINB, false>, grid, kThreads, smem, stream, w, row_bytes, n_rows, n_cols, xq,
               xd, n_tokens, steps_per_split, out);
  }
}

#include "backends/cuda/quant_mmq_q6k.cuh"
#include "backends/cuda/quant_mmq_wide.cuh"
#include "backends/cuda/quant_mmq_matvec.cuh"

// Warps along the rows of the wide kernel for 33 or more tokens (a block: 32 WR rows x 64
// tokens), or 0 for two narrow 32-token tiles (cuda.mmq_wide=0|2|4; other values: 2).
// Two by default, measured on the H200 (Qwen3.5-9B, 64 sequences, ms a step): two 32-token
// tiles 16.14 / 16.16, WR = 2 14.14 / 14.19, WR = 4 14.30 / 14.38 (one block of eight warps
// an SM at 244 registers a thread, where WR = 2 fits two of four warps).
int wide_rows_warps() {
  const int64_t v = tune::get(tune::kCudaMmqWide);
  return v == 0 ? 0 : v == 4 ? 4 : 2;
}

// Stages in flight: as many as let two blocks share a multiprocessor's 227 KiB.
template <bool kQ6, int WR>
constexpr int wide_stages() {
  return kQ6 ? (WR == 4 ? 2 : 3) : (WR == 4 ? 3 : 4);
}

// Fewest tokens the wide kernel takes (17-32 tokens: 32-token tiles, one warp along the
// tokens and four along the rows). 17, measured on the H200 against 33 (Qwen3.5-9B, ms a
// step, narrow kernel / wide, two pairs): 24 sequences 8.81, 8.78 -> 8.19, 8.19; 32
// sequences 9.41, 9.40 -> 8.81, 8.80 (two warps along the rows: 8.77, 8.68 and 9.42, 9.32,
// no gain).
constexpr int kWideMinTokens = 17;

template <bool kQ6, int WR, int WC = 2>
void launch_wide(int64_t n_tokens, int64_t splits, cudaStream_t stream, const uint8_t* w, uint64_t row_bytes,
                 int64_t n_rows, int64_t n_cols, const int8_t* xq, const float* xd, int steps_per_split, float* out) {
  constexpr int NS = wide_stages<kQ6, WR>();
  const dim3 grid(static_cast<unsigned>((n_rows + 32 * WR - 1) / (32 * WR)),
                  static_cast<unsigned>((n_tokens + 32 * WC - 1) / (32 * WC)), static_cast<unsigned>(splits));
  launch_pdl(mmq_wide_kernel<kQ6, WR, NS, WC>, grid, 32 * WR * WC, wide_smem_bytes<kQ6, WR, NS, WC>(), stream, w,
             row_bytes, n_rows, n_cols, xq, xd, n_tokens, steps_per_split, out);
}

struct Plan {
  int bn, splits, steps_per_split;
  int64_t row_tiles, tok_tiles;
};

// Splits from the weight's shape only (never the token count): about four blocks of 4
// warps per multiprocessor, each with at least two steps.
Plan plan_for(const DeviceWeight& w, int64_t n_tokens) {
  Plan p{};
  // Token tiles: the Q8_K kernel takes at most 32 tokens a block (33-64: two tiles).
  const int max_bn = q8_gemm_uses_q8k() ? 32 : 64;
  p.bn = n_tokens <= 16 ? 16 : n_tokens <= 32 || max_bn == 32 ? 32 : 64;
  p.row_tiles = (w.n_rows + kRows - 1) / kRows;
  p.tok_tiles = (n_tokens + p.bn - 1) / p.bn;
  const int n_steps = static_cast<int>(w.n_cols / kStep);
  int splits = static_cast<int>(std::max<int64_t>(1, 4 * device_sm_count() / p.row_tiles));
  splits = std::max(1, std::min({splits, kMaxSplits, n_steps / 2}));
  p.steps_per_split = (n_steps + splits - 1) / splits;
  p.splits = (n_steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }

}  // namespace

bool q8_gemm_supported(GgmlType type) {
  const bool q6k = tune::on(tune::kCudaMmqQ6k);  // cuda.mmq_q6k=0: Q6_K products as before (for measuring)
  return type == GgmlType::Q4_K || (type == GgmlType::Q6_K && q6k && q8_gemm_uses_q8k());
}

template <int BN, int NS, int MINB>
void allow_smem() {
  check_launch(cudaFuncSetAttribute(mmq_q4k_q8k_kernel<BN, NS, MINB, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(q8k_smem_bytes<BN, NS>())));
  check_launch(cudaFuncSetAttribute(mmq_q4k_q8k_kernel<BN, NS, MINB, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(q8k_smem_bytes<BN, NS>())));
}
template <bool kQ6, int WR>
void allow_smem_wide() {
  constexpr int NS = wide_stages<kQ6, WR>();
  check_launch(cudaFuncSetAttribute(mmq_wide_kernel<kQ6, WR, NS, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(wide_smem_bytes<kQ6, WR, NS, 2>())));
  if constexpr (WR == 4) {  // (32-token tiles take four warps along the rows)
    check_launch(cudaFuncSetAttribute(mmq_wide_kernel<kQ6, WR, NS, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(wide_smem_bytes<kQ6, WR, NS, 1>())));
  }
}
template <int BN, int NS>
void allow_smem_q6k() {
  check_launch(cudaFuncSetAttribute(mmq_q6k_q8k_kernel<BN, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(q6k_smem_bytes<BN, NS>())));
}

std::atomic<bool> g_prepared{false};

void q8_gemm_prepare() {
  allow_smem<16, 4, 4>();
  allow_smem<32, 3, 4>();
  allow_smem_q6k<16, 4>();
  allow_smem_q6k<32, 3>();
  allow_smem_wide<false, 2>();
  allow_smem_wide<false, 4>();
  allow_smem_wide<true, 2>();
  allow_smem_wide<true, 4>();
  q8_moe_mma_prepare();
  g_prepared = true;
}

bool q8_gemm_uses_q8k() { return tune::on(tune::kCudaMmqQ8k); }

namespace {

// The products of w with tokens already quantized as Q8_K (xq, xk); split sums go through
// part (at least q8_gemm_scratch_bytes less the quantized tokens' bytes).
void q8k_products(const DeviceWeight& w, const int8_t* xq, const float* xk, int64_t n_tokens, float* y, void* part,
                  cudaStream_t stream) {
  const Plan p = plan_for(w, n_tokens);
  float* out = p.splits > 1 ? static_cast<float*>(part) : y;
  const dim3 grid(static_cast<unsigned>(p.row_tiles), static_cast<unsigned>(p.tok_tiles),
                  static_cast<unsigned>(p.splits));
  const auto* wd = static_cast<const uint8_t*>(w.data);
  // 16 tokens: four steps in flight; 32: three. 33 or more tokens: the wide kernel, with
  // the same column splits.
  const int wr = n_tokens >= kWideMinTokens ? wide_rows_warps() : 0;
  const bool q6 = w.type == GgmlType::Q6_K;
  if (wr != 0 && n_tokens <= 32) {  // 17-32 tokens: one warp along them, four along the rows
    (q6 ? launch_wide<true, 4, 1> : launch_wide<false, 4, 1>)(n_tokens, p.splits, stream, wd, w.row_bytes, w.n_rows,
                                                               w.n_cols, xq, xk, p.steps_per_split, out);
  } else if (wr == 4) {
    (q6 ? launch_wide<true, 4> : launch_wide<false, 4>)(n_tokens, p.splits, stream, wd, w.row_bytes, w.n_rows,
                                                         w.n_cols, xq, xk, p.steps_per_split, out);
  } else if (wr == 2) {
    (q6 ? launch_wide<true, 2> : launch_wide<false, 2>)(n_tokens, p.splits, stream, wd, w.row_bytes, w.n_rows,
                                                         w.n_cols, xq, xk, p.steps_per_split, out);
  } else if (q6) {
    if (p.bn == 16) {
      launch_q6k<16, 4>(grid, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xk, n_tokens, p.steps_per_split, out);
    } else {
      launch_q6k<32, 3>(grid, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xk, n_tokens, p.steps_per_split, out);
    }
  } else if (p.bn == 16) {
    launch_q8k<16, 4>(grid, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xk, n_tokens, p.steps_per_split, out);
  } else {
    launch_q8k<32, 3>(grid, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xk, n_tokens, p.steps_per_split, out);
  }
  if (p.splits > 1) sum_splits(out, p.splits, n_tokens * w.n_rows, y, stream);
}

// The chunk-scaled form (cuda.mmq_q8k=0).
void q8_chunk_products(const DeviceWeight& w, const int8_t* xq, const float2* xd, int64_t n_tokens, float* y,
                       void* part, cudaStream_t stream) {
  const Plan p = plan_for(w, n_tokens);
  float* out = p.splits > 1 ? static_cast<float*>(part) : y;
  const dim3 grid(static_cast<unsigned>(p.row_tiles), static_cast<unsigned>(p.tok_tiles),
                  static_cast<unsigned>(p.splits));
  const auto* wd = static_cast<const uint8_t*>(w.data);
  switch (p.bn) {
    case 16:
      launch_pdl(mmq_q4k_kernel<16>, grid, kThreads, 0, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xd, n_tokens,
                 p.steps_per_split, out);
      break;
    case 32:
      launch_pdl(mmq_q4k_kernel<32>, grid, kThreads, 0, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xd, n_tokens,
                 p.steps_per_split, out);
      break;
    default:
      launch_pdl(mmq_q4k_kernel<64>, grid, kThreads, 0, stream, wd, w.row_bytes, w.n_rows, w.n_cols, xq, xd, n_tokens,
                 p.steps_per_split, out);
      break;
  }
  if (p.splits > 1) sum_splits(out, p.splits, n_tokens * w.n_rows, y, stream);
}

size_t part_bytes(const DeviceWeight& w, int64_t n_tokens) {
  const Plan p = plan_for(w, n_tokens);
  return p.splits > 1 ? align256(sizeof(float) * static_cast<size_t>(p.splits * n_tokens * w.n_rows)) : 0;
}

[[noreturn]] void q8_gemm_bad(const DeviceWeight& w, const char* op, const std::string& what) {
  fail(ErrorKind::kInvalidInput, "cuda quant",
       std::string(op) + " (" + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) + "): " + what);
}

// What q8_gemm requires of a weight and a call (a precise message otherwise).
void check_q8_gemm(const DeviceWeight& w, int64_t n_tokens, const char* op) {
  auto bad = [&](const std::string& what) { q8_gemm_bad(w, op, what); };
  if (!q8_gemm_supported(w.type)) bad("no integer tensor-core kernel for this type");
  if (n_tokens < 0 || n_tokens > kMaxQ8GemmCallTokens) {
    bad("1 to " + std::to_string(kMaxQ8GemmCallTokens) + " tokens, not " + std::to_string(n_tokens));
  }
  if (w.n_cols <= 0 || w.n_cols % kStep != 0) bad("n_cols must be a positive multiple of 256");
  const int block_bytes = w.type == GgmlType::Q6_K ? kQ6Bytes : kBlockBytes;
  if (w.row_bytes < static_cast<uint64_t>(w.n_cols / kStep) * block_bytes ||
      (reinterpret_cast<uintptr_t>(w.data) | w.row_bytes) % 16 != 0) {
    bad("rows must hold their blocks at 16-byte aligned addresses");
  }
}

// x quantized into the head of scratch for the products of n_cols columns: Q8_K (xk set)
// or chunks of 32 (xd set).
void quantize_tokens(const float* x, int64_t n_tokens, int64_t n_cols, void* scratch, cudaStream_t stream,
                     int8_t** xq, float** xk, float2** xd) {
  *xq = static_cast<int8_t*>(scratch);
  *xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(scratch) + q8_scratch_scales_offset(n_tokens, n_cols));
  *xk = nullptr;
  if (q8_gemm_uses_q8k()) {
    if (!g_prepared) q8_gemm_prepare();  // callers without a CudaBackend (which prepares at start)
    // The Q8_K scales (one float per 256 columns) where the chunk scales would be.
    *xk = reinterpret_cast<float*>(*xd);
    const int64_t warps = n_tokens * (n_cols / kStep);
    launch_pdl(q8k_quantize_kernel, dim3(static_cast<unsigned>((warps + 3) / 4)), 128, 0, stream, x, n_tokens, n_cols,
               *xq, *xk);
  } else {
    q8_quantize(x, n_tokens, n_cols, *xq, *xd, stream);
  }
}

void products(const DeviceWeight& w, const int8_t* xq, const float* xk, const float2* xd, int64_t n_tokens, float* y,
              void* part, cudaStream_t stream) {
  if (xk != nullptr) {
    q8k_products(w, xq, xk, n_tokens, y, part, stream);
  } else {
    q8_chunk_products(w, xq, xd, n_tokens, y, part, stream);
  }
}

// The matrix-vector form's products of tokens already quantized as Q8_K.
void mmq_matvec_products(const DeviceWeight& w, const int8_t* xq, const float* xk, int64_t n_tokens, float* y,
                         cudaStream_t stream) {
  const int sps = plan_for(w, n_tokens).steps_per_split;  // (the splits depend on the weight only)
  switch (n_tokens) {
    case 1: return launch_mmq_matvec<1>(w, xq, xk, sps, y, stream);
    case 2: return launch_mmq_matvec<2>(w, xq, xk, sps, y, stream);
    case 3: return launch_mmq_matvec<3>(w, xq, xk, sps, y, stream);
    case 4: return launch_mmq_matvec<4>(w, xq, xk, sps, y, stream);
    case 5: return launch_mmq_matvec<5>(w, xq, xk, sps, y, stream);
    case 6: return launch_mmq_matvec<6>(w, xq, xk, sps, y, stream);
    case 7: return launch_mmq_matvec<7>(w, xq, xk, sps, y, stream);
    default: return launch_mmq_matvec<8>(w, xq, xk, sps, y, stream);
  }
}

}  // namespace

size_t q8_gemm_scratch_bytes(const DeviceWeight& w, int64_t n_tokens) {
  return q8_scratch_bytes(w.n_cols, n_tokens) + part_bytes(w, n_tokens);
}

void q8_gemm(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch, size_t scratch_bytes,
             cudaStream_t stream) {
  check_q8_gemm(w, n_tokens, "q8_gemm");
  if (n_tokens == 0 || w.n_rows == 0) return;
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0 || scratch_bytes < q8_gemm_scratch_bytes(w, n_tokens)) {
    q8_gemm_bad(w, "q8_gemm", "scratch must hold q8_gemm_scratch_bytes and be 256-byte aligned");
  }
  int8_t* xq = nullptr;
  float* xk = nullptr;
  float2* xd = nullptr;
  quantize_tokens(x, n_tokens, w.n_cols, scratch, stream, &xq, &xk, &xd);
  products(w, xq, xk, xd, n_tokens, y, static_cast<uint8_t*>(scratch) + q8_scratch_bytes(w.n_cols, n_tokens), stream);
}

size_t q8_gemm_matvec_scratch_bytes(int64_t n_cols, int64_t n_tokens) { return q8_scratch_bytes(n_cols, n_tokens); }

void q8_gemm_matvec(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
                    size_t scratch_bytes, cudaStream_t stream) {
  check_q8_gemm(w, n_tokens, "q8_gemm_matvec");
  if (!q8_gemm_uses_q8k()) q8_gemm_bad(w, "q8_gemm_matvec", "needs q8_gemm's Q8_K tokens (cuda.mmq_q8k=1)");
  if (n_tokens > kMaxMatvecTokens) {
    q8_gemm_bad(w, "q8_gemm_matvec", "1 to " + std::to_string(kMaxMatvecTokens) + " tokens, not " +
                                         std::to_string(n_tokens));
  }
  if (n_tokens == 0 || w.n_rows == 0) return;
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0 ||
      scratch_bytes < q8_gemm_matvec_scratch_bytes(w.n_cols, n_tokens)) {
    q8_gemm_bad(w, "q8_gemm_matvec", "scratch must hold q8_gemm_matvec_scratch_bytes and be 256-byte aligned");
  }
  int8_t* xq = nullptr;
  float* xk = nullptr;
  float2* xd = nullptr;
  quantize_tokens(x, n_tokens, w.n_cols, scratch, stream, &xq, &xk, &xd);
  mmq_matvec_products(w, xq, xk, n_tokens, y, stream);
}

void q8_gemm_matvec_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                          void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  for (int i = 0; i < n; ++i) {
    check_q8_gemm(ws[i], n_tokens, "q8_gemm_matvec_multi");
    if (ws[i].n_cols != ws[0].n_cols) q8_gemm_bad(ws[i], "q8_gemm_matvec_multi", "the weights must share n_cols");
  }
  if (n <= 0 || n_tokens == 0) return;
  if (!q8_gemm_uses_q8k()) q8_gemm_bad(ws[0], "q8_gemm_matvec_multi", "needs q8_gemm's Q8_K tokens (cuda.mmq_q8k=1)");
  if (n_tokens > kMaxMatvecTokens) q8_gemm_bad(ws[0], "q8_gemm_matvec_multi", "1 to 8 tokens");
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0 ||
      scratch_bytes < q8_gemm_matvec_scratch_bytes(ws[0].n_cols, n_tokens)) {
    q8_gemm_bad(ws[0], "q8_gemm_matvec_multi", "scratch must hold q8_gemm_matvec_scratch_bytes and be 256-byte aligned");
  }
  int8_t* xq = nullptr;
  float* xk = nullptr;
  float2* xd = nullptr;
  quantize_tokens(x, n_tokens, ws[0].n_cols, scratch, stream, &xq, &xk, &xd);
  for (int i = 0; i < n; ++i) {
    if (ws[i].n_rows > 0) mmq_matvec_products(ws[i], xq, xk, n_tokens, ys[i], stream);
  }
}

size_t q8_gemm_multi_scratch_bytes(const DeviceWeight* ws, int n, int64_t n_tokens) {
  if (n <= 0) return 0;
  size_t part = 0;
  for (int i = 0; i < n; ++i) part = std::max(part, part_bytes(ws[i], n_tokens));
  return q8_scratch_bytes(ws[0].n_cols, n_tokens) + part;
}

void q8_gemm_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys, void* scratch,
                   size_t scratch_bytes, cudaStream_t stream) {
  for (int i = 0; i < n; ++i) {
    check_q8_gemm(ws[i], n_tokens, "q8_gemm_multi");
    if (ws[i].n_cols != ws[0].n_cols) q8_gemm_bad(ws[i], "q8_gemm_multi", "the weights must share n_cols");
  }
  if (n <= 0 || n_tokens == 0) return;
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0 || scratch_bytes < q8_gemm_multi_scratch_bytes(ws, n, n_tokens)) {
    q8_gemm_bad(ws[0], "q8_gemm_multi", "scratch must hold q8_gemm_multi_scratch_bytes and be 256-byte aligned");
  }
  int8_t* xq = nullptr;
  float* xk = nullptr;
  float2* xd = nullptr;
  quantize_tokens(x, n_tokens, ws[0].n_cols, scratch, stream, &xq, &xk, &xd);
  // One after another on the stream, so the split sums' scratch serves each in turn.
  void* part = static_cast<uint8_t*>(scratch) + q8_scratch_bytes(ws[0].n_cols, n_tokens);
  for (int i = 0; i < n; ++i) {
    if (ws[i].n_rows > 0) products(ws[i], xq, xk, xd, n_tokens, ys[i], part, stream);
  }
}

}  // namespace hearth::cuda

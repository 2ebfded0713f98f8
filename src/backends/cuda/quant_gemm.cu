// quant_gemm: products of quantized weights with more tokens than the matrix-vector
// kernels take (batched decode, prompt chunks), on tensor cores, reading the weights once
// per tile of tokens instead of dequantizing the whole matrix to memory first.
//
// A block of 512 threads owns BM weight rows (64 of K-quant blocks, 32 of 32-element ones)
// x BN tokens. Per step of 256 columns each thread decodes one unit of its rows' blocks
// into shared memory as f16 (the fast half2 decoders of quant_half.cuh where a type has
// one, else the exact decoders of quant_blocks.cuh and the value dequantize_rows_f16
// gives), copies the tokens' f16 activations next to them, and each warp runs the 16x16x16
// tensor-core products (WMMA, f32 accumulation) of one output fragment. When rows x tokens
// make fewer blocks than the GPU holds, the columns are split over blockIdx.z and the
// partial sums added in split order by a second kernel. The split depends on the weight's
// shape only (and is off past 64 tokens), so an output is the same sum in the same order
// for any batch of 9 to 64 tokens, and for any batch above 64.
#include <mma.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/quant_blocks.cuh"
#include "backends/cuda/quant_half.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/quant_shared.cuh"
#include "core/error.h"
#include "core/tune.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

using namespace nvcuda;

constexpr int kBK = 256;       // columns per step: one K-quant super-block, eight legacy blocks
constexpr int kLd = kBK + 8;   // shared row stride in halves (16-byte aligned, spreads banks)
constexpr int kThreads = 512;  // one decode unit per thread per step
constexpr int kMaxSplits = 8;

// The tile's rows: as many as 512 units cover (64 for the 256-element K-quant blocks of 8
// units, 32 for the 32-element blocks of 2).
template <GgmlType TYPE>
struct TileRows {
  using Q = qk::QType<TYPE>;
  static constexpr int kUnitsPerRow = (kBK / Q::kElems) * Q::kSubs;
  static constexpr int BM = kThreads / kUnitsPerRow;
  static_assert(BM % 16 == 0 && BM * kUnitsPerRow == kThreads, "tile rows");
};

// Unit loads and conversion: the fast half2 decoders split in two (quant_half.cuh), or
// the exact decoder run at conversion time from the block's address.
template <GgmlType TYPE, bool FAST = qk::HalfDecode<TYPE>::kHas>
struct UnitDecode {
  using H = qk::HalfDecode<TYPE>;
  using Raw = typename H::Raw;
  __device__ static Raw load(const uint8_t* blk, int s) { return H::load(blk, s); }
  __device__ static void convert(const Raw& r, int s, uint32_t* h) { H::convert(r, s, h); }
};
template <GgmlType TYPE>
struct UnitDecode<TYPE, false> {
  using Q = qk::QType<TYPE>;
  using Raw = const uint8_t*;
  __device__ static Raw load(const uint8_t* blk, int) { return blk; }
  __device__ static void convert(const Raw& blk, int s, uint32_t* h) {
    float v[Q::kPer];
    Q::decode(blk, s, v);
#pragma unroll
    for (int k = 0; k < Q::kPer / 2; ++k) {
      const __half2 p = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
      h[k] = *reinterpret_cast<const uint32_t*>(&p);
    }
  }
};

// Stores a unit's values (half2 words in run order) into its row of the shared tile, 8
// halves at a time. A unit's pieces are taken in an order rotated by its place in the row
// so that the 8 threads of a quarter warp (8 consecutive units of one row) write 8
// different groups of 4 banks (for every layout of quant_blocks.cuh).
template <class Q>
__device__ __forceinline__ void store_unit(const uint32_t* h, int b, int s, __half* row) {
  constexpr int kJ = Q::kRunLen / 8, kPieces = Q::kRuns * kJ;
  static_assert((kPieces & (kPieces - 1)) == 0, "pieces a power of two");
  int rot;
  if constexpr (Q::kElems == 32) {
    rot = b >> 1;
  } else if constexpr (Q::kRuns == 2) {
    rot = s >> 1;
  } else {
    rot = s >> 2;
  }
  __half* base = row + b * Q::kElems;
#pragma unroll
  for (int k = 0; k < kPieces; ++k) {
    const int q = (k + rot) & (kPieces - 1);
    uint4 v = make_uint4(h[0], h[1], h[2], h[3]);
#pragma unroll
    for (int qq = 1; qq < kPieces; ++qq) {
      const uint32_t* p = h + ((qq / kJ) * Q::kRunLen + 8 * (qq % kJ)) / 2;
      if (q == qq) v = make_uint4(p[0], p[1], p[2], p[3]);
    }
    *reinterpret_cast<uint4*>(base + Q::run_col(s, q / kJ) + 8 * (q % kJ)) = v;
  }
}

// out: [n_splits][n_tokens][n_rows] partial sums (or y itself with one split). x: f16
// activations, padded with zero rows to a whole number of BN-token tiles. Warp f of the
// block owns the 16 x 16 output fragment f (rows f % (BM / 16), tokens f / (BM / 16)).
// PF steps' weight and activation loads are in flight at once: a step's loads are issued
// right after the step PF before it was stored to shared memory, so they overlap that
// step's products and the PF - 1 steps between (the same arithmetic for every PF).
template <GgmlType TYPE, int BN, int MIN_BLOCKS, int PF>
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    qgemm_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                 const __half* __restrict__ x, int64_t n_tokens, int steps_per_split, float* __restrict__ out,
                 const ExpertTile* __restrict__ groups) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  using Q = qk::QType<TYPE>;
  using D = UnitDecode<TYPE>;
  constexpr int kUnitsPerRow = TileRows<TYPE>::kUnitsPerRow, BM = TileRows<TYPE>::BM;
  constexpr int kFragM = BM / 16, kFrags = kFragM * (BN / 16);
  static_assert(kFrags <= kThreads / 32, "a fragment per warp");
  static_assert(Q::kRunLen % 8 == 0, "runs are stored 8 halves at a time");
  constexpr int kOutLd = BM + 4;  // f32 staging of the outputs, column-major C
  static_assert(BN * kOutLd * 4 <= (BM + BN) * kLd * 2, "output staging fits");
  constexpr int kXPer = BN * kBK / 8 / kThreads;  // 8-half chunks of activations per thread
  static_assert(kXPer >= 1 && kXPer * kThreads * 8 == BN * kBK, "activation chunks");
  extern __shared__ __align__(16) unsigned char smem[];
  __half* ws = reinterpret_cast<__half*>(smem);  // [BM][kLd]
  __half* xs = ws + BM * kLd;                    // [BN][kLd]
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const bool has_frag = warp < kFrags;
  const int fm = warp % kFragM, fn = warp / kFragM;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * BM;
  int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN, tok_end = n_tokens;
  if (groups != nullptr) {
    // Grouped (stacked experts): n_rows is one expert's; this tile is rows first ..
    // first + count - 1 of x (and of the output) times expert `expert`'s rows.
    const ExpertTile g = groups[blockIdx.y];
    tok0 = g.first;
    tok_end = static_cast<int64_t>(g.first) + g.count;
    w += static_cast<int64_t>(g.expert) * n_rows * row_bytes;
  }
  const int n_steps = static_cast<int>((n_cols + kBK - 1) / kBK);
  const int step0 = static_cast<int>(blockIdx.z) * steps_per_split;
  const int step1 = min(n_steps, step0 + steps_per_split);

  // This thread's unit: row r of the tile, block b of the step, unit s of the block;
  // consecutive threads take consecutive units of a row (consecutive bytes).
  const int r = static_cast<int>(threadIdx.x) / kUnitsPerRow, ur = static_cast<int>(threadIdx.x) % kUnitsPerRow;
  const int b = ur / Q::kSubs, s = ur % Q::kSubs;
  const uint8_t* wrow = w + min(row0 + r, n_rows - 1) * row_bytes;  // rows past the end: decoded, never stored

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  // Loads of step st into slot k (compile-time k: the slots stay in registers).
  typename D::Raw raw[PF];
  uint4 xv[PF][kXPer];
  bool full[PF];
  auto load_step = [&](int st, typename D::Raw& rw, uint4 (&xs_in)[kXPer], bool& ok) {
    const int64_t c0 = static_cast<int64_t>(st) * kBK;
#pragma unroll
    for (int i = 0; i < kXPer; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
      const int t = idx / (kBK / 8), c = (idx % (kBK / 8)) * 8;
      xs_in[i] = make_uint4(0, 0, 0, 0);
      if (c0 + c < n_cols) xs_in[i] = __ldg(reinterpret_cast<const uint4*>(x + (tok0 + t) * n_cols + c0 + c));
    }
    ok = c0 + static_cast<int64_t>(b + 1) * Q::kElems <= n_cols;
    if (ok) rw = D::load(wrow + (c0 / Q::kElems + b) * Q::kBytes, s);
  };
#pragma unroll
  for (int k = 0; k < PF; ++k) {
    if (step0 + k < step1) load_step(step0 + k, raw[k], xv[k], full[k]);
  }
  for (int base = step0; base < step1; base += PF) {
#pragma unroll
    for (int k = 0; k < PF; ++k) {
      const int step = base + k;
      if (step >= step1) break;  // the same for every thread
      const int64_t c0 = static_cast<int64_t>(step) * kBK;
      uint32_t h[Q::kPer / 2];  // half2 words in the unit's run order
      if (full[k]) {
        D::convert(raw[k], s, h);
      } else {
#pragma unroll
        for (int j = 0; j < Q::kPer / 2; ++j) h[j] = 0;
      }
      store_unit<Q>(h, b, s, ws + r * kLd);
#pragma unroll
      for (int i = 0; i < kXPer; ++i) {
        const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
        *reinterpret_cast<uint4*>(xs + (idx / (kBK / 8)) * kLd + (idx % (kBK / 8)) * 8) = xv[k][i];
      }
      __syncthreads();
      if (step + PF < step1) load_step(step + PF, raw[k], xv[k], full[k]);
      if (has_frag) {
        const int k_end = static_cast<int>(min(static_cast<int64_t>(kBK), n_cols - c0));
        for (int kk = 0; kk < k_end; kk += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf;
          wmma::load_matrix_sync(a, ws + fm * 16 * kLd + kk, kLd);
          wmma::load_matrix_sync(bf, xs + fn * 16 * kLd + kk, kLd);
          wmma::mma_sync(acc, a, bf, acc);
        }
      }
      __syncthreads();
    }
  }

  // Outputs through shared memory (C[row][token] column-major: token-major rows of BM),
  // then stored with consecutive threads on consecutive rows.
  float* cs = reinterpret_cast<float*>(smem);
  if (has_frag) wmma::store_matrix_sync(cs + fn * 16 * kOutLd + fm * 16, acc, kOutLd, wmma::mem_col_major);
  __syncthreads();
  float* dst = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
  for (int i = static_cast<int>(threadIdx.x); i < BM * BN; i += kThreads) {
    const int t = i / BM, rr = i % BM;
    if (tok0 + t < tok_end && row0 + rr < n_rows) dst[(tok0 + t) * n_rows + row0 + rr] = cs[t * kOutLd + rr];
  }
}

// y[i] = sum over splits in order of part[s][i].
__global__ void sum_splits_kernel(const float* __restrict__ part, int n_splits, int64_t n, float* __restrict__ y) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = part[i];
  for (int k = 1; k < n_splits; ++k) s += part[k * n + i];
  y[i] = s;
}

// y: [n_pad] f16 = x rounded for i < n, zeros up to n_pad.
__global__ void to_f16_kernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n, int64_t n_pad) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n_pad) y[i] = __float2half_rn(i < n ? x[i] : 0.0f);
}

}  // namespace

int device_sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 100;
    }
    return v;
  }();
  return n;
}

void sum_splits(const float* part, int n_splits, int64_t n, float* y, cudaStream_t stream) {
  ::hearth::cuda::launch_pdl(sum_splits_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, part, n_splits, n,
                             y);
}

namespace {

int tile_tokens(int64_t n_tokens) { return n_tokens <= 16 ? 16 : n_tokens <= 32 ? 32 : 64; }

struct Plan {
  int bn, splits, steps_per_split;
  int prefetch;       // steps of loads in flight (cuda.qgemm_pf: 1, 2 or 3)
  int64_t row_tiles, tok_tiles;
};

// One block per multiprocessor (up to 128 registers a thread), measured faster than two
// (whose 64 registers spill the 64-token tiles): q4_K 4096 x 14336, 16 tokens 49 vs 61 us,
// 64 tokens 89 vs 95 us.
constexpr int kBlocksPerSm = 1;

// Steps of loads in flight (cuda.qgemm_pf, 1 to 3; 2 by default).
int qgemm_prefetch() { return static_cast<int>(tune::get(tune::kCudaQgemmPf)); }

Plan plan_for(const DeviceWeight& w, int64_t n_tokens) {
  Plan p{};
  const int bm = ggml_traits(w.type).block_size == 256 ? 64 : 32;  // TileRows<type>::BM
  p.bn = tile_tokens(n_tokens);
  p.row_tiles = (w.n_rows + bm - 1) / bm;
  p.tok_tiles = (n_tokens + p.bn - 1) / p.bn;
  const int n_steps = static_cast<int>((w.n_cols + kBK - 1) / kBK);
  // Splits from the row tiles alone (never from the token count), and only while one tile
  // of tokens holds the batch: an output's sum order is then the same for 9..64 tokens.
  // Split until one wave fills the GPU.
  p.prefetch = qgemm_prefetch();
  const int64_t slots = kBlocksPerSm * static_cast<int64_t>(device_sm_count());
  int splits = n_tokens > 64 ? 1 : static_cast<int>(std::max<int64_t>(1, slots / p.row_tiles));
  splits = std::max(1, std::min({splits, kMaxSplits, n_steps / 2}));
  p.steps_per_split = (n_steps + splits - 1) / splits;
  p.splits = (n_steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }

template <GgmlType TYPE, int BN, int MIN_BLOCKS, int PF = 1>
void launch_tile(const DeviceWeight& w, const __half* x16, int64_t n_tokens, const Plan& p, float* out,
                 const ExpertTile* groups, cudaStream_t stream) {
  constexpr size_t kSmem = static_cast<size_t>(TileRows<TYPE>::BM + BN) * kLd * 2;
  static const cudaError_t attr = cudaFuncSetAttribute(qgemm_kernel<TYPE, BN, MIN_BLOCKS, PF>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(kSmem));
  if (attr != cudaSuccess) {
    fail(ErrorKind::kInternal, "cuda quant", std::string("quant_gemm: shared memory limit: ") + cudaGetErrorString(attr));
  }
  const dim3 grid(static_cast<unsigned>(p.row_tiles), static_cast<unsigned>(p.tok_tiles),
                  static_cast<unsigned>(p.splits));
  ::hearth::cuda::launch_pdl(qgemm_kernel<TYPE, BN, MIN_BLOCKS, PF>, grid, kThreads, kSmem, stream, static_cast<const uint8_t*>(w.data), w.row_bytes, w.n_rows, w.n_cols, x16, n_tokens, p.steps_per_split, out,
      groups);
}

template <GgmlType TYPE>
void launch_type(const DeviceWeight& w, const __half* x16, int64_t n_tokens, const Plan& p, float* out,
                 const ExpertTile* groups, cudaStream_t stream) {
  // Loads of several steps in flight for the types with fast (split load / convert)
  // decoders; the others load inside their decoder.
  constexpr bool kFast = qk::HalfDecode<TYPE>::kHas;
  if (kFast && p.prefetch >= 3) {
    switch (p.bn) {
      case 16: launch_tile<TYPE, 16, 1, 3>(w, x16, n_tokens, p, out, groups, stream); break;
      case 32: launch_tile<TYPE, 32, 1, 3>(w, x16, n_tokens, p, out, groups, stream); break;
      default: launch_tile<TYPE, 64, 1, 3>(w, x16, n_tokens, p, out, groups, stream); break;
    }
  } else if (kFast && p.prefetch == 2) {
    switch (p.bn) {
      case 16: launch_tile<TYPE, 16, 1, 2>(w, x16, n_tokens, p, out, groups, stream); break;
      case 32: launch_tile<TYPE, 32, 1, 2>(w, x16, n_tokens, p, out, groups, stream); break;
      default: launch_tile<TYPE, 64, 1, 2>(w, x16, n_tokens, p, out, groups, stream); break;
    }
  } else {
    switch (p.bn) {
      case 16: launch_tile<TYPE, 16, 1>(w, x16, n_tokens, p, out, groups, stream); break;
      case 32: launch_tile<TYPE, 32, 1>(w, x16, n_tokens, p, out, groups, stream); break;
      default: launch_tile<TYPE, 64, 1>(w, x16, n_tokens, p, out, groups, stream); break;
    }
  }
}

bool dispatch(const DeviceWeight& w, const __half* x16, int64_t n_tokens, const Plan& p, float* out,
              const ExpertTile* groups, cudaStream_t stream) {
  switch (w.type) {
    case GgmlType::Q4_0: launch_type<GgmlType::Q4_0>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q4_1: launch_type<GgmlType::Q4_1>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q5_0: launch_type<GgmlType::Q5_0>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q5_1: launch_type<GgmlType::Q5_1>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q8_0: launch_type<GgmlType::Q8_0>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q2_K: launch_type<GgmlType::Q2_K>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q3_K: launch_type<GgmlType::Q3_K>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q4_K: launch_type<GgmlType::Q4_K>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q5_K: launch_type<GgmlType::Q5_K>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::Q6_K: launch_type<GgmlType::Q6_K>(w, x16, n_tokens, p, out, groups, stream); return true;
    case GgmlType::IQ4_NL:
      launch_type<GgmlType::IQ4_NL>(w, x16, n_tokens, p, out, groups, stream);
      return true;
    case GgmlType::MXFP4: launch_type<GgmlType::MXFP4>(w, x16, n_tokens, p, out, groups, stream); return true;
    default: return false;
  }
}

}  // namespace

bool quant_gemm_supported(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_NL: case GgmlType::MXFP4:
      return true;
    default: return false;
  }
}

size_t quant_gemm_scratch_bytes(const DeviceWeight& w, int64_t n_tokens) {
  const Plan p = plan_for(w, n_tokens);
  const size_t x16 = align256(sizeof(__half) * static_cast<size_t>(p.tok_tiles * p.bn * w.n_cols));
  const size_t part = p.splits > 1 ? align256(sizeof(float) * static_cast<size_t>(p.splits) * n_tokens * w.n_rows) : 0;
  return x16 + part;
}

namespace {

[[noreturn]] void bad_args(const DeviceWeight& w, const char* op, const std::string& what) {
  fail(ErrorKind::kInvalidInput, "cuda quant",
       std::string(op) + " (" + std::string(ggml_type_name(w.type)) + ", " + std::to_string(w.n_rows) + " x " +
           std::to_string(w.n_cols) + "): " + what);
}

// The weight checks both entry points share; `op` names the caller in the messages.
void check_gemm_weight(const DeviceWeight& w, const char* op) {
  if (!quant_gemm_supported(w.type)) {
    fail(ErrorKind::kUnsupported, "cuda quant",
         std::string(op) + ": no tensor-core kernel for type " + std::string(ggml_type_name(w.type)));
  }
  check_device_weight(w, op);
}

}  // namespace

void quant_gemm(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
                size_t scratch_bytes, cudaStream_t stream) {
  auto bad = [&](const std::string& what) { bad_args(w, "quant_gemm", what); };
  check_gemm_weight(w, "quant_gemm");
  if (n_tokens < 0) bad("negative n_tokens " + std::to_string(n_tokens));
  if (n_tokens == 0 || w.n_rows == 0) return;
  if (reinterpret_cast<uintptr_t>(x) % 4 != 0) bad("x must be 4-byte aligned");
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0) bad("scratch must be 256-byte aligned");
  if (scratch_bytes < quant_gemm_scratch_bytes(w, n_tokens)) {
    bad("scratch of " + std::to_string(scratch_bytes) + " bytes, need " +
        std::to_string(quant_gemm_scratch_bytes(w, n_tokens)));
  }
  const Plan p = plan_for(w, n_tokens);
  auto* x16 = static_cast<__half*>(scratch);
  const int64_t nx = n_tokens * w.n_cols, n_pad = p.tok_tiles * p.bn * w.n_cols;
  ::hearth::cuda::launch_pdl(to_f16_kernel, static_cast<unsigned>((n_pad + 255) / 256), 256, 0, stream, x, x16, nx, n_pad);
  float* out = y;
  if (p.splits > 1) {
    out = reinterpret_cast<float*>(static_cast<char*>(scratch) +
                                   align256(sizeof(__half) * static_cast<size_t>(n_pad)));
  }
  dispatch(w, x16, n_tokens, p, out, nullptr, stream);
  if (p.splits > 1) {
    const int64_t n = n_tokens * w.n_rows;
    sum_splits(out, p.splits, n, y, stream);
  }
}

size_t quant_gemm_grouped_scratch_bytes(const DeviceWeight& w, int64_t n_pairs) {
  return align256(sizeof(__half) * static_cast<size_t>((n_pairs + 64) * w.n_cols));
}

void quant_gemm_grouped(const DeviceWeight& w, int64_t rows_per_expert, const ExpertTile* tiles, int n_tiles,
                        int tile_tokens_max, const float* x, int64_t n_pairs, float* y, void* scratch,
                        size_t scratch_bytes, cudaStream_t stream) {
  auto bad = [&](const std::string& what) { bad_args(w, "quant_gemm_grouped", what); };
  check_gemm_weight(w, "quant_gemm_grouped");
  if (rows_per_expert <= 0 || w.n_rows % rows_per_expert != 0) bad("rows are not a whole number of experts");
  if (tile_tokens_max < 1 || tile_tokens_max > 64) bad("tiles of 1 to 64 tokens");
  if (n_tiles <= 0 || n_pairs <= 0) return;
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0) bad("scratch must be 256-byte aligned");
  if (scratch_bytes < quant_gemm_grouped_scratch_bytes(w, n_pairs)) bad("scratch too small");
  Plan p{};
  p.bn = tile_tokens(tile_tokens_max);
  p.splits = 1;
  p.steps_per_split = static_cast<int>((w.n_cols + kBK - 1) / kBK);
  p.prefetch = qgemm_prefetch();
  const int bm = ggml_traits(w.type).block_size == 256 ? 64 : 32;
  p.row_tiles = (rows_per_expert + bm - 1) / bm;
  p.tok_tiles = n_tiles;
  auto* x16 = static_cast<__half*>(scratch);
  const int64_t nx = n_pairs * w.n_cols, n_pad = (n_pairs + 64) * w.n_cols;
  ::hearth::cuda::launch_pdl(to_f16_kernel, static_cast<unsigned>((n_pad + 255) / 256), 256, 0, stream, x, x16, nx, n_pad);
  DeviceWeight one = w;
  one.n_rows = rows_per_expert;  // the kernel's n_rows: one expert's
  dispatch(one, x16, n_pairs, p, y, tiles, stream);
}

}  // namespace hearth::cuda

// quant_gemm: products of quantized weights with more tokens than the matrix-vector
// kernels take (batched decode, prompt chunks), on tensor cores, reading the weights once
// per tile of tokens instead of dequantizing the whole matrix to memory first.
//
// A block of 128 threads owns BM weight rows x BN tokens. Per step of 256 columns it
// decodes its rows' blocks into shared memory as f16 (the fast half2 decoders of
// quant_half.cuh where a type has one, else the exact decoders of quant_blocks.cuh and the
// value dequantize_rows_f16 gives), copies the tokens' f16 activations next to
// them, and runs 16x16x16 tensor-core products accumulating in f32 (WMMA). When rows x
// tokens make fewer blocks than the GPU holds, the columns are split over blockIdx.z and
// the partial sums added in split order by a second kernel. The split depends on the
// weight's shape only (and is off past 64 tokens), so an output is the same sum in the same
// order for any batch of 9 to 64 tokens, and for any batch above 64.
#include <mma.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/quant_blocks.cuh"
#include "backends/cuda/quant_half.cuh"
#include "backends/cuda/quant_cuda.h"
#include "core/error.h"

namespace hearth::cuda {
namespace {

using namespace nvcuda;

constexpr int kBK = 256;             // columns per step: one K-quant super-block, eight legacy blocks
constexpr int kLd = kBK + 8;         // shared row stride in halves (16-byte aligned, spreads banks)
constexpr int kThreads = 128;        // four warps
constexpr int kMaxSplits = 8;

template <int BM, int BN>
struct Tiles {
  static constexpr int WM = BM >= 64 ? 4 : BM / 16;  // warps along the rows
  static constexpr int WN = 4 / WM;                  // and along the tokens
  static constexpr int FM = BM / 16 / WM, FN = BN / 16 / WN;  // 16x16 fragments per warp
  static_assert(FM >= 1 && FN >= 1 && WM * WN == 4, "tile shape");
  static constexpr int kOutLd = BM + 4;  // f32 staging of the outputs, column-major C
  static constexpr size_t kSmem = static_cast<size_t>(BM + BN) * kLd * 2;
  static_assert(static_cast<size_t>(BN) * kOutLd * 4 <= kSmem, "output staging fits");
};

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// out: [n_splits][n_tokens][n_rows] partial sums (or y itself with one split).
template <GgmlType TYPE, int BM, int BN>
__global__ void __launch_bounds__(kThreads)
    qgemm_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                 const __half* __restrict__ x, int64_t n_tokens, int steps_per_split, float* __restrict__ out) {
  using T = Tiles<BM, BN>;
  using Q = qk::QType<TYPE>;
  using H = qk::HalfDecode<TYPE>;
  static_assert(Q::kRunLen % 8 == 0, "runs are stored 8 halves at a time");
  extern __shared__ __align__(16) unsigned char smem[];
  __half* ws = reinterpret_cast<__half*>(smem);  // [BM][kLd]
  __half* xs = ws + BM * kLd;                    // [BN][kLd]
  const int warp = threadIdx.x >> 5;
  const int wm = warp % T::WM, wn = warp / T::WM;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int n_steps = static_cast<int>((n_cols + kBK - 1) / kBK);
  const int step0 = static_cast<int>(blockIdx.z) * steps_per_split;
  const int step1 = min(n_steps, step0 + steps_per_split);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[T::FM][T::FN];
#pragma unroll
  for (int i = 0; i < T::FM; ++i) {
#pragma unroll
    for (int j = 0; j < T::FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  constexpr int kBlocksPerStep = kBK / Q::kElems;
  constexpr int kUnitsPerRow = kBlocksPerStep * Q::kSubs;
  constexpr int kUnits = BM * kUnitsPerRow;
  static_assert(kUnits % kThreads == 0, "units spread evenly");
  constexpr int kXChunks = BN * kBK / 8;

  for (int step = step0; step < step1; ++step) {
    const int64_t c0 = static_cast<int64_t>(step) * kBK;
    const int valid_blocks = static_cast<int>(min(static_cast<int64_t>(kBlocksPerStep), (n_cols - c0) / Q::kElems));
    // Weights: unit u of the tile is row u / kUnitsPerRow; consecutive threads take
    // consecutive units of a row, so their loads cover consecutive bytes.
#pragma unroll
    for (int i = 0; i < kUnits / kThreads; ++i) {
      const int u = static_cast<int>(threadIdx.x) + i * kThreads;
      const int r = u / kUnitsPerRow, ur = u % kUnitsPerRow;
      const int b = ur / Q::kSubs, s = ur % Q::kSubs;
      uint32_t h[Q::kPer / 2];  // half2 words in the unit's run order
      if (b < valid_blocks) {
        const int64_t gr = min(row0 + r, n_rows - 1);  // rows past the end: decoded, never stored
        const uint8_t* blk = w + gr * row_bytes + (c0 / Q::kElems + b) * Q::kBytes;
        if constexpr (H::kHas) {
          H::decode(blk, s, h);
        } else {
          float v[Q::kPer];
          Q::decode(blk, s, v);
#pragma unroll
          for (int k = 0; k < Q::kPer / 2; ++k) h[k] = pack_half2(v[2 * k], v[2 * k + 1]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < Q::kPer / 2; ++k) h[k] = 0;
      }
      __half* dst = ws + r * kLd + b * Q::kElems;
#pragma unroll
      for (int run = 0; run < Q::kRuns; ++run) {
#pragma unroll
        for (int j = 0; j < Q::kRunLen / 8; ++j) {
          const uint32_t* p = h + (run * Q::kRunLen + 8 * j) / 2;
          *reinterpret_cast<uint4*>(dst + Q::run_col(s, run) + 8 * j) = make_uint4(p[0], p[1], p[2], p[3]);
        }
      }
    }
    // Activations: 8 halves per load, zeros past the tokens and the columns.
    for (int i = static_cast<int>(threadIdx.x); i < kXChunks; i += kThreads) {
      const int t = i / (kBK / 8), c = (i % (kBK / 8)) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (tok0 + t < n_tokens && c0 + c < n_cols) {
        val = __ldg(reinterpret_cast<const uint4*>(x + (tok0 + t) * n_cols + c0 + c));
      }
      *reinterpret_cast<uint4*>(xs + t * kLd + c) = val;
    }
    __syncthreads();
    const int k_end = static_cast<int>(min(static_cast<int64_t>(kBK), n_cols - c0));
    for (int kk = 0; kk < k_end; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[T::FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf[T::FN];
#pragma unroll
      for (int i = 0; i < T::FM; ++i) {
        wmma::load_matrix_sync(a[i], ws + ((wm * T::FM + i) * 16) * kLd + kk, kLd);
      }
#pragma unroll
      for (int j = 0; j < T::FN; ++j) {
        wmma::load_matrix_sync(bf[j], xs + ((wn * T::FN + j) * 16) * kLd + kk, kLd);
      }
#pragma unroll
      for (int i = 0; i < T::FM; ++i) {
#pragma unroll
        for (int j = 0; j < T::FN; ++j) wmma::mma_sync(acc[i][j], a[i], bf[j], acc[i][j]);
      }
    }
    __syncthreads();
  }

  // Outputs through shared memory (C[row][token] column-major: token-major rows of BM),
  // then stored with consecutive threads on consecutive rows.
  float* cs = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < T::FM; ++i) {
#pragma unroll
    for (int j = 0; j < T::FN; ++j) {
      wmma::store_matrix_sync(cs + ((wn * T::FN + j) * 16) * T::kOutLd + (wm * T::FM + i) * 16, acc[i][j],
                              T::kOutLd, wmma::mem_col_major);
    }
  }
  __syncthreads();
  float* dst = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
  for (int i = static_cast<int>(threadIdx.x); i < BM * BN; i += kThreads) {
    const int t = i / BM, r = i % BM;
    if (tok0 + t < n_tokens && row0 + r < n_rows) dst[(tok0 + t) * n_rows + row0 + r] = cs[t * T::kOutLd + r];
  }
}

// y[i] = sum over splits in order of part[s][i].
__global__ void sum_splits_kernel(const float* __restrict__ part, int n_splits, int64_t n, float* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = part[i];
  for (int k = 1; k < n_splits; ++k) s += part[k * n + i];
  y[i] = s;
}

__global__ void to_f16_kernel(const float* __restrict__ x, __half* __restrict__ y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 100;
    }
    return v;
  }();
  return n;
}

// The tile rows: 64 unless HEARTH_CUDA_QGEMM_BM says 128 (for measuring).
int tile_rows() {
  static const int bm = [] {
    const char* e = std::getenv("HEARTH_CUDA_QGEMM_BM");
    return e != nullptr && std::atoi(e) == 128 ? 128 : 64;
  }();
  return bm;
}
int tile_tokens(int64_t n_tokens) { return n_tokens <= 16 ? 16 : n_tokens <= 32 ? 32 : 64; }

struct Plan {
  int bm, bn, splits, steps_per_split;
  int64_t row_tiles, tok_tiles;
};

Plan plan_for(const DeviceWeight& w, int64_t n_tokens) {
  Plan p{};
  p.bm = tile_rows();
  p.bn = tile_tokens(n_tokens);
  p.row_tiles = (w.n_rows + p.bm - 1) / p.bm;
  p.tok_tiles = (n_tokens + p.bn - 1) / p.bn;
  const int n_steps = static_cast<int>((w.n_cols + kBK - 1) / kBK);
  // Splits from the row tiles alone (never from the token count), and only while one tile
  // of tokens holds the batch: an output's sum order is then the same for 9..64 tokens.
  const int64_t target = 2 * static_cast<int64_t>(sm_count());
  int splits = n_tokens > 64 || p.row_tiles >= target ? 1 : static_cast<int>((target + p.row_tiles - 1) / p.row_tiles);
  splits = std::max(1, std::min({splits, kMaxSplits, n_steps / 2}));
  p.steps_per_split = (n_steps + splits - 1) / splits;
  p.splits = (n_steps + p.steps_per_split - 1) / p.steps_per_split;
  return p;
}

size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }

template <GgmlType Q, int BM, int BN>
void launch_tile(const DeviceWeight& w, const __half* x16, int64_t n_tokens, const Plan& p, float* out,
                 cudaStream_t stream) {
  using T = Tiles<BM, BN>;
  static const cudaError_t attr = cudaFuncSetAttribute(qgemm_kernel<Q, BM, BN>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(T::kSmem));
  if (attr != cudaSuccess) {
    fail(ErrorKind::kInternal, "cuda quant", std::string("quant_gemm: shared memory limit: ") + cudaGetErrorString(attr));
  }
  const dim3 grid(static_cast<unsigned>(p.row_tiles), static_cast<unsigned>(p.tok_tiles),
                  static_cast<unsigned>(p.splits));
  qgemm_kernel<Q, BM, BN><<<grid, kThreads, T::kSmem, stream>>>(static_cast<const uint8_t*>(w.data), w.row_bytes,
                                                                 w.n_rows, w.n_cols, x16, n_tokens,
                                                                 p.steps_per_split, out);
}

template <GgmlType Q>
void launch_type(const DeviceWeight& w, const __half* x16, int64_t n_tokens, const Plan& p, float* out,
                 cudaStream_t stream) {
  switch (p.bm * 1000 + p.bn) {
    case 64016: launch_tile<Q, 64, 16>(w, x16, n_tokens, p, out, stream); break;
    case 64032: launch_tile<Q, 64, 32>(w, x16, n_tokens, p, out, stream); break;
    case 64064: launch_tile<Q, 64, 64>(w, x16, n_tokens, p, out, stream); break;
    case 128016: launch_tile<Q, 128, 16>(w, x16, n_tokens, p, out, stream); break;
    case 128032: launch_tile<Q, 128, 32>(w, x16, n_tokens, p, out, stream); break;
    default: launch_tile<Q, 128, 64>(w, x16, n_tokens, p, out, stream); break;
  }
}

bool dispatch(const DeviceWeight& w, const __half* x16, int64_t n_tokens, const Plan& p, float* out,
              cudaStream_t stream) {
  switch (w.type) {
    case GgmlType::Q4_0: launch_type<GgmlType::Q4_0>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q4_1: launch_type<GgmlType::Q4_1>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q5_0: launch_type<GgmlType::Q5_0>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q5_1: launch_type<GgmlType::Q5_1>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q8_0: launch_type<GgmlType::Q8_0>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q2_K: launch_type<GgmlType::Q2_K>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q3_K: launch_type<GgmlType::Q3_K>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q4_K: launch_type<GgmlType::Q4_K>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q5_K: launch_type<GgmlType::Q5_K>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::Q6_K: launch_type<GgmlType::Q6_K>(w, x16, n_tokens, p, out, stream); return true;
    case GgmlType::IQ4_NL:
      launch_type<GgmlType::IQ4_NL>(w, x16, n_tokens, p, out, stream);
      return true;
    case GgmlType::MXFP4: launch_type<GgmlType::MXFP4>(w, x16, n_tokens, p, out, stream); return true;
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
  const size_t x16 = align256(sizeof(__half) * static_cast<size_t>(n_tokens * w.n_cols));
  const size_t part = p.splits > 1 ? align256(sizeof(float) * static_cast<size_t>(p.splits) * n_tokens * w.n_rows) : 0;
  return x16 + part;
}

void quant_gemm(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
                size_t scratch_bytes, cudaStream_t stream) {
  auto bad = [&](const std::string& what) {
    fail(ErrorKind::kInvalidInput, "cuda quant",
         "quant_gemm (" + std::string(ggml_type_name(w.type)) + ", " + std::to_string(w.n_rows) + " x " +
             std::to_string(w.n_cols) + "): " + what);
  };
  if (!quant_gemm_supported(w.type)) {
    fail(ErrorKind::kUnsupported, "cuda quant",
         "quant_gemm: no tensor-core kernel for type " + std::string(ggml_type_name(w.type)));
  }
  if (n_tokens < 0) bad("negative n_tokens " + std::to_string(n_tokens));
  check_device_weight(w, "quant_gemm");
  if (n_tokens == 0 || w.n_rows == 0) return;
  if (reinterpret_cast<uintptr_t>(x) % 4 != 0) bad("x must be 4-byte aligned");
  if (reinterpret_cast<uintptr_t>(scratch) % 256 != 0) bad("scratch must be 256-byte aligned");
  if (scratch_bytes < quant_gemm_scratch_bytes(w, n_tokens)) {
    bad("scratch of " + std::to_string(scratch_bytes) + " bytes, need " +
        std::to_string(quant_gemm_scratch_bytes(w, n_tokens)));
  }
  const Plan p = plan_for(w, n_tokens);
  auto* x16 = static_cast<__half*>(scratch);
  const int64_t nx = n_tokens * w.n_cols;
  to_f16_kernel<<<static_cast<unsigned>((nx + 255) / 256), 256, 0, stream>>>(x, x16, nx);
  float* out = y;
  if (p.splits > 1) {
    out = reinterpret_cast<float*>(static_cast<char*>(scratch) +
                                   align256(sizeof(__half) * static_cast<size_t>(nx)));
  }
  dispatch(w, x16, n_tokens, p, out, stream);
  if (p.splits > 1) {
    const int64_t n = n_tokens * w.n_rows;
    sum_splits_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, p.splits, n, y);
  }
}

}  // namespace hearth::cuda

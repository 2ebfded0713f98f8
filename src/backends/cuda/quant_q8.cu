// The decode matrix-vector product on 8-bit activations (quant_cuda.h: q8_matvec):
// x is quantized once per call in chunks of 32 (as the CPU back-end and llama.cpp do
// for these weight types), then each block of kThreads threads computes kRows rows,
// its threads striding over the rows' 32-element units and multiplying with dp4a
// (quant_q8_dot.cuh). Weights are read once for all tokens of the call.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/quant_shared.cuh"
#include "backends/cuda/quant_q8_dot.cuh"
#include "backends/cuda/quant_q8_internal.cuh"
#include "backends/cuda/quant_q8_stream.cuh"
#include "backends/cuda/quant_q8_wide.cuh"
#include "core/error.h"
#include "core/tune.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

using q8::align_up;
using q8::bad;
using q8::check;
using q8::kChunk;
using q8::kThreads;
using q8::Q8Dot;
using q8::Q8Wide;
using q8::quantize_into;
using q8::warp_add;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// One warp per chunk of 32 values: d = max |x| / 127, q = round(x / d) (ties to even),
// xd = (d, d * sum q). An all-zero chunk has d = 0 and q = 0.
__global__ void __launch_bounds__(256)
    quantize_chunks(const float* __restrict__ x, int64_t n_chunks, int8_t* __restrict__ xq, float2* __restrict__ xd) {
  // The product after this may start (and load its weights) while this waits: it waits
  // for this kernel's end, which follows the end of the one before.
  ::hearth::cuda::pdl_trigger();
  ::hearth::cuda::pdl_wait();
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (chunk >= n_chunks) return;
  const int lane = threadIdx.x & 31;
  const float v = x[chunk * kChunk + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.f;
  const int q = amax == 0.f ? 0 : __float2int_rn(v / d);
  const int sum = warp_add(q);
  xq[chunk * kChunk + lane] = static_cast<int8_t>(q);
  if (lane == 0) xd[chunk] = make_float2(d, d * static_cast<float>(sum));
}

// Up to kMaxTargets weights of one type sharing x in one launch: blocks
// [block_end[i - 1], block_end[i]) compute weight i.
constexpr int kMaxTargets = 4;
struct Targets {
  const uint8_t* w[kMaxTargets];
  uint64_t row_bytes[kMaxTargets];
  int64_t n_rows[kMaxTargets];
  float* y[kMaxTargets];
  unsigned block_end[kMaxTargets];
  int n;
};

// ws[0..n) and ys as Targets, block_end[i] counting units of `rows_per_unit` rows of
// weights 0..i (only weight 0's with first_only); returns the units in all.
unsigned make_targets(const DeviceWeight* ws, float* const* ys, int n, int64_t rows_per_unit, bool first_only,
                      Targets* tg) {
  *tg = Targets{};
  unsigned units = 0;
  for (int i = 0; i < n; ++i) {
    tg->w[i] = static_cast<const uint8_t*>(ws[i].data);
    tg->row_bytes[i] = ws[i].row_bytes;
    tg->n_rows[i] = ws[i].n_rows;
    tg->y[i] = ys[i];
    if (!first_only || i == 0) units += static_cast<unsigned>((ws[i].n_rows + rows_per_unit - 1) / rows_per_unit);
    tg->block_end[i] = units;
  }
  tg->n = n;
  return units;
}

// TPR threads per row (32: a warp per row, no block-wide step; kThreads: the block), R
// rows per group of TPR threads, NT tokens. Each thread strides over its rows' units,
// decoding ILP of them (their weight loads in flight together) before multiplying them
// in order, so the sums do not depend on ILP. kEarly: the first ILP units' weights are
// loaded before pdl_wait() (weights are constant; only x comes from the kernel before),
// overlapping their latency with the end of that kernel. kSwiGLU (R = 2, tg.n = 1):
// each group computes row r of tg.w[0] (gate) and of tg.w[1] (up), same shape, and
// writes y[t, r] = silu(gate . x) * (up . x), what swiglu_kernel makes of the two sums.
// kSmemX: the block first copies the NT tokens' activation quants into shared memory
// (coalesced 16-byte loads; stored swizzled, q8::SharedX) and its warps read them from
// there: read from global memory, a warp's loads of its lanes' 64-element units are 64
// bytes apart, four times the L1 wavefronts of contiguous ones.
template <class T, int NT, int R, int TPR, int ILP, bool kEarly, bool kSwiGLU = false, bool kSmemX = false>
__global__ void __launch_bounds__(kThreads)
    q8_matvec_kernel(const Targets tg, int n_units, const int8_t* __restrict__ xq, const float2* __restrict__ xd,
                     int64_t n_cols) {
  extern __shared__ int4 xs[];  // kSmemX: NT rows of n_cols / 16 chunks
  constexpr int kGroups = kThreads / TPR;
  // This block's weight, chosen with constant indices only (no local-memory copy).
  const uint8_t* w = tg.w[0];
  uint64_t row_bytes = tg.row_bytes[0];
  int64_t n_rows = tg.n_rows[0];
  float* y = tg.y[0];
  unsigned first_block = 0;
#pragma unroll
  for (int k = 1; k < kMaxTargets; ++k) {
    if (k < tg.n && blockIdx.x >= tg.block_end[k - 1]) {
      w = tg.w[k];
      row_bytes = tg.row_bytes[k];
      n_rows = tg.n_rows[k];
      y = tg.y[k];
      first_block = tg.block_end[k - 1];
    }
  }
  static_assert(!kSwiGLU || R == 2, "the fused SwiGLU takes one row of gate and one of up");
  const int group = threadIdx.x / TPR, tid = threadIdx.x % TPR;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x - first_block) * kGroups + group) * (kSwiGLU ? 1 : R);
  const uint8_t* rows[R];
  if constexpr (kSwiGLU) {
    rows[0] = w + min(row0, n_rows - 1) * row_bytes;
    rows[1] = tg.w[1] + min(row0, n_rows - 1) * row_bytes;
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = w + min(row0 + r, n_rows - 1) * row_bytes;
  }
  float acc[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  }
  typename T::Dec dec[ILP][R];
  auto fetch = [&](int u0) {
#pragma unroll
    for (int k = 0; k < ILP; ++k) {
      const int u = u0 + k * TPR;
      if (u < n_units) {
        const int b = u / T::kUnits, s = u % T::kUnits;
#pragma unroll
        for (int r = 0; r < R; ++r) dec[k][r] = T::decode(rows[r] + static_cast<int64_t>(b) * T::kBytes, s);
      }
    }
  };
  if constexpr (kEarly) fetch(tid);
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  // Staged rows hold whole groups of 8 chunks (the swizzle permutes within a group).
  const int n16 = static_cast<int>(n_cols / 16), n16p = (n16 + 7) & ~7;
  if constexpr (kSmemX) {
    const auto* src = reinterpret_cast<const int4*>(xq);
    for (int c = threadIdx.x; c < NT * n16; c += kThreads) {
      const int t = c / n16, k = c - t * n16;
      xs[t * n16p + q8::swizzle16(k)] = __ldg(src + c);
    }
    __syncthreads();
  }
  if constexpr (!kEarly) fetch(tid);
  const int64_t chunks = n_cols / kChunk;
  for (int u0 = tid; u0 < n_units; u0 += TPR * ILP) {
    if (u0 != tid) fetch(u0);
#pragma unroll
    for (int k = 0; k < ILP; ++k) {
      const int u = u0 + k * TPR;
      if (u < n_units) {
        const int b = u / T::kUnits, s = u % T::kUnits;
        const int8_t* xb = xq + static_cast<int64_t>(b) * T::kElems;
        const float2* db = xd + static_cast<int64_t>(b) * (T::kElems / kChunk);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if constexpr (kSmemX) {
              const q8::SharedX x{xs + t * n16p, b * (T::kElems / 16)};
              acc[r][t] += T::dot(dec[k][r], s, x, db + t * chunks);
            } else {
              acc[r][t] += T::dot(dec[k][r], s, q8::GlobalX{xb + t * n_cols}, db + t * chunks);
            }
          }
        }
      }
    }
  }
  // Warp sums, then (TPR > 32) the group's warps' sums in a fixed order.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (kSwiGLU) {
    static_assert(TPR == 32, "the fused SwiGLU runs a warp per row");
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float g = warp_add(acc[0][t]), u = warp_add(acc[1][t]);
      if (lane == 0 && row0 < n_rows) y[t * n_rows + row0] = g / (1.0f + expf(-g)) * u;
    }
  } else if constexpr (TPR == 32) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float v = warp_add(acc[r][t]);
        if (lane == 0 && row0 + r < n_rows) y[t * n_rows + row0 + r] = v;
      }
    }
  } else {
    __shared__ float part[kThreads / 32][R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float v = warp_add(acc[r][t]);
        if (lane == 0) part[warp][r][t] = v;
      }
    }
    __syncthreads();
    constexpr int kWarps = TPR / 32;
    if (tid < R * NT) {
      const int r = tid / NT, t = tid % NT;
      if (row0 + r < n_rows) {
        const int w0 = group * kWarps;
        float v = part[w0][r][t];
#pragma unroll
        for (int k = 1; k < kWarps; ++k) v += part[w0 + k][r][t];
        y[t * n_rows + row0 + r] = v;
      }
    }
  }
}

// ws[0..n) (one type, with rows) times x; ys[i] at token t0 already.
// The kernel's shape, from the tuning keys cuda.matvec_* (core/tune_keys.h), read at each
// launch; every shape gives the same sums (for measuring).
int matvec_tpr() { return static_cast<int>(tune::get(tune::kCudaMatvecTpr)); }  // 0: the default, 32
int matvec_ilp() { return static_cast<int>(tune::get(tune::kCudaMatvecIlp)); }  // 0: the default, 1
int matvec_early() { return static_cast<int>(tune::get(tune::kCudaMatvecEarly)); }  // -1: the default, 1
int matvec_rows() { return static_cast<int>(tune::get(tune::kCudaMatvecRows)); }  // 0: the default, 2 rows a warp
// 1: activations staged in shared memory, NT <= 2
int matvec_smem() { return static_cast<int>(tune::get(tune::kCudaMatvecSmem)); }
int64_t matvec_stream_rows() { return tune::get(tune::kCudaMatvecStreamRows); }  // 0: no limit
// 0: a block per group of rows
int matvec_persist() { return static_cast<int>(tune::get(tune::kCudaMatvecPersist)); }
// 0: off; 1-4: the shapes of launch_stream_shape
int matvec_stream() { return static_cast<int>(tune::get(tune::kCudaMatvecStream)); }
constexpr int64_t kMaxSmemX = 48 * 1024;

// Compute capability major and opt-in shared memory per block of the current device.
struct DeviceLimits {
  int major = 0, smem_optin = 0;
};
const DeviceLimits& device_limits() {
  static DeviceLimits cached[16];
  static bool known[16] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 16) {
    static const DeviceLimits none;
    return none;
  }
  if (!known[dev]) {
    cudaDeviceGetAttribute(&cached[dev].major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&cached[dev].smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    known[dev] = true;
  }
  return cached[dev];
}

// The streamed-weight kernel (quant_q8_stream.cuh) for ws[0..n) and NT tokens: W warps a
// block (2 W rows), S segments in flight. Returns false where it does not apply (before
// Hopper, rows not in whole segments, misaligned rows, too much shared memory).
template <class T, int NT, int W, int S, bool kProducer = false>
bool launch_stream(const DeviceWeight* ws, float* const* ys, int n, const int8_t* xq, const float2* xd,
                   cudaStream_t stream) {
  const int64_t n_cols = ws[0].n_cols;
  const size_t smem = q8::stream_smem_bytes<T, NT, W, S>(n_cols);
  const DeviceLimits& lim = device_limits();
  if (lim.major < 9 || n_cols % q8::StreamSeg<T>::kCols != 0 || smem > static_cast<size_t>(lim.smem_optin)) {
    return false;
  }
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    if ((reinterpret_cast<uintptr_t>(ws[i].data) | ws[i].row_bytes) % 16 != 0) return false;
    rows += ws[i].n_rows;
  }
  // Tall matrices of short rows (the output projection: 128k-248k rows of 4,096) stay on the
  // register-fed kernel: measured on the H200 (cuda_quant_test --perf, q6_K 128,256 x 4,096,
  // one token) 142 us there against 170 us streamed.
  if (matvec_stream_rows() > 0 && rows > matvec_stream_rows()) return false;
  auto* kernel = q8::q8_matvec_stream_kernel<T, NT, W, S, kMaxTargets, Targets, kProducer>;
  constexpr int kBlock = (W + (kProducer ? 1 : 0)) * 32;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, device_limits().smem_optin);
  check_launch(attr);
  Targets tg;
  const unsigned groups = make_targets(ws, ys, n, 2 * W, false, &tg);  // block_end: groups of 2 W rows
  // Blocks the device holds at once with this much shared memory (cached per kilobyte).
  static std::atomic<int> resident[256];
  const size_t kib = std::min<size_t>(smem >> 10, 255);
  int per_sm = resident[kib].load(std::memory_order_relaxed);
  if (per_sm == 0) {
    check_launch(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, smem));
    per_sm = std::max(per_sm, 1);
    resident[kib].store(per_sm, std::memory_order_relaxed);
  }
  const unsigned slots = static_cast<unsigned>(per_sm) * static_cast<unsigned>(device_sm_count());
  const unsigned blocks = matvec_persist() != 0 ? std::min(groups, slots) : groups;
  const int n_units = static_cast<int>(n_cols / T::kElems) * T::kUnits;
  ::hearth::cuda::launch_pdl(kernel, blocks, kBlock, smem, stream, tg, n_units, xq, xd, n_cols);
  return true;
}

template <class T, int NT>
bool launch_stream_shape(const DeviceWeight* ws, float* const* ys, int n, const int8_t* xq, const float2* xd,
                         cudaStream_t stream) {
  switch (matvec_stream()) {
    // Measured on the H200 (docs/BENCHMARKS.md): decode steps of the Llama-3-8B / Qwen3.5-9B
    // shapes 2,590 / 2,724 us with eight warps and three segments, 2,702 / 2,792 with four
    // and four, 2,921 / 2,963 with two warps and six, 2,739 / 2,826 with the register-fed
    // kernel (a block per 16 rows, one call); with persistent blocks and a producer warp of
    // its own (4, the default) 2,577 / 2,621 against 2,682 / 2,764 without (another call).
    case 1: return launch_stream<T, NT, 8, 3>(ws, ys, n, xq, xd, stream);
    case 2: return launch_stream<T, NT, 4, 4>(ws, ys, n, xq, xd, stream);
    case 3: return launch_stream<T, NT, 16, 2>(ws, ys, n, xq, xd, stream);
    case 4: return launch_stream<T, NT, 8, 3, true>(ws, ys, n, xq, xd, stream);
    default: return false;
  }
}

template <class T, int NT, int R, int TPR, int ILP, bool kEarly, bool kSwiGLU = false, bool kSmemX = false>
void launch_tpr(const DeviceWeight* ws, float* const* ys, int n, const int8_t* xq, const float2* xd,
                cudaStream_t stream) {
  constexpr int kRowsPerBlock = kThreads / TPR * (kSwiGLU ? 1 : R);
  Targets tg;
  const unsigned blocks = make_targets(ws, ys, n, kRowsPerBlock, kSwiGLU, &tg);
  if constexpr (kSwiGLU) tg.n = 1;  // every block: rows of both (gate first)
  const int n_units = static_cast<int>(ws[0].n_cols / T::kElems) * T::kUnits;
  const size_t smem = kSmemX ? static_cast<size_t>(NT) * ((ws[0].n_cols / 16 + 7) / 8) * 128 : 0;
  ::hearth::cuda::launch_pdl(q8_matvec_kernel<T, NT, R, TPR, ILP, kEarly, kSwiGLU, kSmemX>, blocks, kThreads, smem,
                             stream, tg, n_units, xq, xd, ws[0].n_cols);
}

template <class T, int NT>
void launch_nt(const DeviceWeight* ws, float* const* ys, int n, const int8_t* xq, const float2* xd,
               cudaStream_t stream, bool swiglu) {
  const bool early = matvec_early() != 0;
  if (swiglu) {  // ws = {gate, up}: two rows a warp
    if (NT <= 2 && matvec_smem() != 0 && early && NT * (ws[0].n_cols + 127) <= kMaxSmemX) {
      launch_tpr<T, NT, 2, 32, 1, true, true, NT <= 2>(ws, ys, n, xq, xd, stream);
      return;
    }
    early ? launch_tpr<T, NT, 2, 32, 1, true, true>(ws, ys, n, xq, xd, stream)
          : launch_tpr<T, NT, 2, 32, 1, false, true>(ws, ys, n, xq, xd, stream);
    return;
  }
  // A warp per group of rows by default: measured on the H200 (docs/BENCHMARKS.md), a decode step of the Llama-3-8B
  // shape took 3.05 ms of device time against 3.41 with a block of 128 threads per row
  // (no block-wide reduction, more units in flight per thread). The threads per row do
  // not depend on the batch (a token's sums are the same in any batch).
  // One unit at a time, its first weights loaded before the wait, by default: measured on
  // the H200 (cuda_quant_test --perf, q4_K 4096 x 14336) 21 us with one, 20 with two and
  // 32 with four units ahead (the registers of four units cut the warps in flight); in
  // the Llama-3-8B decode step the early loads took 3.3 % off the step's device time.
  // A warp per row for long rows too: measured on the H200 (cuda_quant_test --perf, q4_K
  // 4096 x 14336, one token) 18 us with 32 threads a row, 22 with 64 or 128.
  // Two rows per warp for every batch: each lane's activation loads then serve both rows
  // (measured on the H200, decode steps of the 8B / 9B / 35B-A3B shapes 2,863 / 3,042 /
  // 3,007 us against 3,016 / 3,183 / 3,032 with one row a warp below 3 tokens; the L1 was
  // 75 % busy, mostly with activations). A row's sum is the same either way.
  constexpr int R = 2;
  const int tpr = matvec_tpr() != 0 ? matvec_tpr() : 32;
  // One or two tokens in the default shape: the weights streamed through shared memory
  // (Hopper), else the activations staged in shared memory (at most 48 KiB).
  if constexpr (NT <= 2) {
    if (matvec_smem() != 0 && tpr == 32 && matvec_rows() != 1 && matvec_ilp() != 2 && early) {
      if (launch_stream_shape<T, NT>(ws, ys, n, xq, xd, stream)) return;
      if (NT * (ws[0].n_cols + 127) <= kMaxSmemX) {
        launch_tpr<T, NT, R, 32, 1, true, false, true>(ws, ys, n, xq, xd, stream);
        return;
      }
    }
  }
  if (tpr == 128) {
    launch_tpr<T, NT, R, 128, 1, false>(ws, ys, n, xq, xd, stream);
  } else if (tpr == 64) {
    early ? launch_tpr<T, NT, R, 64, 1, true>(ws, ys, n, xq, xd, stream)
          : launch_tpr<T, NT, R, 64, 1, false>(ws, ys, n, xq, xd, stream);
  } else if (matvec_rows() == 1 && NT < 3) {
    early ? launch_tpr<T, NT, 1, 32, 1, true>(ws, ys, n, xq, xd, stream)
          : launch_tpr<T, NT, 1, 32, 1, false>(ws, ys, n, xq, xd, stream);
  } else if (matvec_ilp() == 2) {
    early ? launch_tpr<T, NT, R, 32, 2, true>(ws, ys, n, xq, xd, stream)
          : launch_tpr<T, NT, R, 32, 2, false>(ws, ys, n, xq, xd, stream);
  } else {
    early ? launch_tpr<T, NT, R, 32, 1, true>(ws, ys, n, xq, xd, stream)
          : launch_tpr<T, NT, R, 32, 1, false>(ws, ys, n, xq, xd, stream);
  }
}

template <class T>
void launch(const DeviceWeight* ws, float* const* ys, int n, int64_t n_tokens, const int8_t* xq, const float2* xd,
            cudaStream_t stream, bool swiglu) {
  switch (n_tokens) {
    case 1: launch_nt<T, 1>(ws, ys, n, xq, xd, stream, swiglu); break;
    case 2: launch_nt<T, 2>(ws, ys, n, xq, xd, stream, swiglu); break;
    case 3: launch_nt<T, 3>(ws, ys, n, xq, xd, stream, swiglu); break;
    case 4: launch_nt<T, 4>(ws, ys, n, xq, xd, stream, swiglu); break;
    case 5: launch_nt<T, 5>(ws, ys, n, xq, xd, stream, swiglu); break;
    case 6: launch_nt<T, 6>(ws, ys, n, xq, xd, stream, swiglu); break;
    case 7: launch_nt<T, 7>(ws, ys, n, xq, xd, stream, swiglu); break;
    default: launch_nt<T, 8>(ws, ys, n, xq, xd, stream, swiglu); break;
  }
}


// Block bytes and the alignment the decoders assume for data and row_bytes.
bool layout(GgmlType t, int* block_elems, int* block_bytes, int* align) {
  switch (t) {
    case GgmlType::Q4_0: *block_elems = 32, *block_bytes = 18, *align = 2; return true;
    case GgmlType::Q4_1: *block_elems = 32, *block_bytes = 20, *align = 4; return true;
    case GgmlType::Q5_0: *block_elems = 32, *block_bytes = 22, *align = 2; return true;
    case GgmlType::Q5_1: *block_elems = 32, *block_bytes = 24, *align = 4; return true;
    case GgmlType::Q8_0: *block_elems = 32, *block_bytes = 34, *align = 2; return true;
    case GgmlType::Q4_K: *block_elems = 256, *block_bytes = 144, *align = 16; return true;
    case GgmlType::Q5_K: *block_elems = 256, *block_bytes = 176, *align = 16; return true;
    case GgmlType::Q6_K: *block_elems = 256, *block_bytes = 210, *align = 2; return true;
    case GgmlType::Q2_K: *block_elems = 256, *block_bytes = 84, *align = 4; return true;
    case GgmlType::Q3_K: *block_elems = 256, *block_bytes = 110, *align = 2; return true;
    default: return false;
  }
}


// ws[0..n): one type, each with rows; ys at token t0.
void launch_type(const DeviceWeight* ws, float* const* ys, int n, int64_t nt, const int8_t* xq, const float2* xd,
                 cudaStream_t stream, bool swiglu = false) {
  switch (ws[0].type) {
    case GgmlType::Q4_0: launch<Q8Dot<GgmlType::Q4_0>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q4_1: launch<Q8Dot<GgmlType::Q4_1>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q5_0: launch<Q8Dot<GgmlType::Q5_0>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q5_1: launch<Q8Dot<GgmlType::Q5_1>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q8_0: launch<Q8Dot<GgmlType::Q8_0>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q4_K: launch<Q8Wide<GgmlType::Q4_K>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q5_K: launch<Q8Wide<GgmlType::Q5_K>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q6_K: launch<Q8Wide<GgmlType::Q6_K>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q2_K: launch<Q8Wide<GgmlType::Q2_K>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    case GgmlType::Q3_K: launch<Q8Wide<GgmlType::Q3_K>>(ws, ys, n, nt, xq, xd, stream, swiglu); break;
    default: break;
  }
}

}  // namespace

namespace q8 {

void bad(const std::string& what) { fail(ErrorKind::kInvalidInput, "cuda q8_matvec", what); }

size_t align_up(size_t v) { return (v + 255) & ~static_cast<size_t>(255); }

bool check(const DeviceWeight& w, int64_t n_cols) {
  int elems = 0, bytes = 0, align = 0;
  if (!layout(w.type, &elems, &bytes, &align)) {
    fail(ErrorKind::kUnsupported, "cuda q8_matvec",
         "no 8-bit activation kernel for tensor type id " + std::to_string(static_cast<uint32_t>(w.type)));
  }
  // The message prefix is built only on failure (this runs on every launch).
  auto where = [&] {
    return "q8_matvec (" + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) + "): ";
  };
  if (w.n_rows < 0 || w.n_cols <= 0 || w.n_cols % elems != 0) {
    bad(where() + "n_cols must be a positive multiple of " + std::to_string(elems));
  }
  if (w.n_cols != n_cols) bad(where() + "weights sharing x must have equal n_cols (" + std::to_string(n_cols) + ")");
  if (w.row_bytes < static_cast<uint64_t>(w.n_cols / elems) * bytes) bad(where() + "row_bytes too small");
  if ((reinterpret_cast<uintptr_t>(w.data) | w.row_bytes) % static_cast<uint64_t>(align) != 0) {
    bad(where() + "data and row_bytes must be multiples of " + std::to_string(align) + " bytes");
  }
  if (w.n_rows > 0 && w.data == nullptr) bad(where() + "data is null");
  return w.n_rows > 0;
}

void quantize_into(const float* x, int64_t n_rows, int64_t n_cols, void* scratch, int8_t** xq, float2** xd,
                   cudaStream_t stream) {
  *xq = static_cast<int8_t*>(scratch);
  *xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(scratch) + align_up(static_cast<size_t>(n_rows * n_cols)));
  q8_quantize(x, n_rows, n_cols, *xq, *xd, stream);
}

}  // namespace q8

bool q8_matvec_supported(GgmlType type) {
  int e, b, a;
  return layout(type, &e, &b, &a);
}

size_t q8_matvec_scratch_bytes(int64_t n_cols, int64_t n_tokens) {
  const auto tokens = static_cast<size_t>(std::min<int64_t>(n_tokens, kMaxMatvecTokens));
  const auto cols = static_cast<size_t>(n_cols);
  return align_up(tokens * cols) + align_up(tokens * (cols / kChunk) * sizeof(float2));
}

void q8_matvec(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
               size_t scratch_bytes, cudaStream_t stream) {
  q8_matvec_multi(&w, 1, x, n_tokens, &y, scratch, scratch_bytes, stream);
}

size_t q8_scratch_scales_offset(int64_t n_tokens, int64_t n_cols) {
  return align_up(static_cast<size_t>(n_tokens * n_cols));
}

void q8_matvec_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream, bool x_ready) {
  if (n <= 0) return;
  const int64_t n_cols = ws[0].n_cols;
  bool any = false;
  for (int i = 0; i < n; ++i) any = check(ws[i], n_cols) || any;
  if (n_tokens < 0) bad("negative n_tokens " + std::to_string(n_tokens));
  if (n_tokens == 0 || !any) return;
  if (x == nullptr) bad("x is null");
  if (x_ready && n_tokens > kMaxMatvecTokens) bad("x quantized ahead for more than kMaxMatvecTokens tokens");
  if (scratch_bytes < q8_matvec_scratch_bytes(n_cols, n_tokens) || reinterpret_cast<uintptr_t>(scratch) % 256 != 0) {
    bad("scratch must hold q8_matvec_scratch_bytes and be 256-byte aligned");
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxMatvecTokens) {
    const int64_t nt = std::min<int64_t>(kMaxMatvecTokens, n_tokens - t0);
    auto* xq = static_cast<int8_t*>(scratch);
    auto* xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(scratch) + align_up(static_cast<size_t>(nt * n_cols)));
    if (!x_ready) q8_quantize(x + t0 * n_cols, nt, n_cols, xq, xd, stream);
    // One launch per run of consecutive weights of one type (at most kMaxTargets).
    int i = 0;
    while (i < n) {
      DeviceWeight group[kMaxTargets];
      float* group_y[kMaxTargets];
      int k = 0;
      for (; i < n && k < kMaxTargets && (k == 0 || ws[i].type == group[0].type); ++i) {
        if (ws[i].n_rows == 0) continue;
        if (ys[i] == nullptr) bad("y " + std::to_string(i) + " is null");
        group[k] = ws[i];
        group_y[k] = ys[i] + t0 * ws[i].n_rows;
        ++k;
      }
      if (k > 0) launch_type(group, group_y, k, nt, xq, xd, stream);
    }
  }
}

void q8_matvec_swiglu(const DeviceWeight& gate, const DeviceWeight& up, const float* x, int64_t n_tokens, float* y,
                      void* scratch, size_t scratch_bytes, cudaStream_t stream, bool x_ready) {
  if (up.type != gate.type || up.n_rows != gate.n_rows || up.n_cols != gate.n_cols) {
    bad("q8_matvec_swiglu: gate and up must have one type and shape");
  }
  const int64_t n_cols = gate.n_cols;
  if (!check(gate, n_cols) || !check(up, n_cols)) return;
  if (n_tokens < 0) bad("negative n_tokens " + std::to_string(n_tokens));
  if (n_tokens == 0) return;
  if (x == nullptr || y == nullptr) bad("q8_matvec_swiglu: x or y is null");
  if (x_ready && n_tokens > kMaxMatvecTokens) bad("x quantized ahead for more than kMaxMatvecTokens tokens");
  if (scratch_bytes < q8_matvec_scratch_bytes(n_cols, n_tokens) || reinterpret_cast<uintptr_t>(scratch) % 256 != 0) {
    bad("scratch must hold q8_matvec_scratch_bytes and be 256-byte aligned");
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kMaxMatvecTokens) {
    const int64_t nt = std::min<int64_t>(kMaxMatvecTokens, n_tokens - t0);
    int8_t* xq = nullptr;
    float2* xd = nullptr;
    if (x_ready) {
      xq = static_cast<int8_t*>(scratch);
      xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(scratch) + q8_scratch_scales_offset(nt, n_cols));
    } else {
      quantize_into(x + t0 * n_cols, nt, n_cols, scratch, &xq, &xd, stream);
    }
    const DeviceWeight ws[2] = {gate, up};
    float* ys[2] = {y + t0 * gate.n_rows, nullptr};
    launch_type(ws, ys, 2, nt, xq, xd, stream, true);
  }
}

void q8_quantize(const float* x, int64_t n_rows, int64_t n_cols, int8_t* xq, float2* xd, cudaStream_t stream) {
  const int64_t n_chunks = n_rows * n_cols / kChunk;
  ::hearth::cuda::launch_pdl(quantize_chunks, static_cast<unsigned>((n_chunks + 7) / 8), 256, 0, stream, x, n_chunks, xq,
                             xd);
}

size_t q8_scratch_bytes(int64_t n_cols, int64_t n_rows) {
  const auto rows = static_cast<size_t>(n_rows), cols = static_cast<size_t>(n_cols);
  return align_up(rows * cols) + align_up(rows * (cols / kChunk) * sizeof(float2));
}

}  // namespace hearth::cuda

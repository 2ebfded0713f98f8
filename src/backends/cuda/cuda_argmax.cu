// CudaBackend::fetch_rows: the output rows of a step to the host, the rows of greedy
// sequences reduced on the device to the index of their first largest value (and of
// their first non-finite value), and the rows of temperature draws (engine::Sampler::
// drawable) to the drawn token (cuda_draw.cuh), so that a 150k-250k entry row does not
// cross PCIe and get scanned on the host for every sequence and token.
#include <climits>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_draw.cuh"
#include "backends/cuda/launch.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

constexpr int kArgmaxThreads = draw::kDrawThreads;

// (value, index) pairs: the larger value, the smaller index on a tie (std::max_element's
// first largest value); an index of INT_MAX is "none".
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (i2 != INT_MAX && (i == INT_MAX || v2 > v || (v2 == v && i2 < i))) {
    v = v2;
    i = i2;
  }
}

// One block per row: out[row] = (first largest finite value's index, first non-finite
// value's index or -1, 1 if that value is NaN). kVec: the row read as float4 (n_cols a
// multiple of 4, rows 16-byte aligned). Each thread visits its elements in increasing
// index order, so a strict > keeps the first of equal values.
template <bool kVec>
__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(float* __restrict__ x, int64_t n_cols,
                                                                     const ops::RowReduce* __restrict__ reduce,
                                                                     const ops::PenaltyToken* __restrict__ pens,
                                                                     int4* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  float* row = x + static_cast<int64_t>(blockIdx.x) * n_cols;
  const ops::RowReduce rr = reduce[blockIdx.x];
  const bool penalized = rr.kind != ops::RowKind::kCopy && rr.n_penalty > 0;
  if (penalized) {
    // engine::Sampler's penalties, in place, each operation rounded as there (distinct tokens).
    const ops::PenaltyToken* pt = pens + static_cast<int64_t>(blockIdx.x) * ops::kMaxPenaltyTokens;
    for (int j = static_cast<int>(threadIdx.x); j < min(rr.n_penalty, ops::kMaxPenaltyTokens); j += kArgmaxThreads) {
      const int tok = pt[j].token;
      if (tok < 0 || tok >= n_cols) continue;
      float l = row[tok];
      l = l > 0.0f ? __fdiv_rn(l, rr.repeat_penalty) : __fmul_rn(l, rr.repeat_penalty);
      row[tok] = __fsub_rn(l, __fadd_rn(__fmul_rn(static_cast<float>(pt[j].count), rr.frequency_penalty),
                                        rr.presence_penalty));
    }
    __syncthreads();
  }
  float best = -INFINITY;
  int bi = INT_MAX, bad = INT_MAX;
  auto visit = [&](float v, int i) {
    if (!isfinite(v)) {
      bad = min(bad, i);
    } else if (bi == INT_MAX || v > best) {
      best = v;
      bi = i;
    }
  };
  if constexpr (kVec) {
    const auto* r4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = n_cols / 4;
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < n4; j += kArgmaxThreads) {
      const float4 v = r4[j];
      const int i = static_cast<int>(4 * j);
      visit(v.x, i);
      visit(v.y, i + 1);
      visit(v.z, i + 2);
      visit(v.w, i + 3);
    }
  } else {
    for (int64_t i = threadIdx.x; i < n_cols; i += kArgmaxThreads) visit(row[i], static_cast<int>(i));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, best, off);
    const int i2 = __shfl_xor_sync(0xffffffffu, bi, off);
    bad = min(bad, __shfl_xor_sync(0xffffffffu, bad, off));
    better(best, bi, v2, i2);
  }
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int si[kArgmaxThreads / 32], sb[kArgmaxThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = bi;
    sb[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) {
      better(sv[0], si[0], sv[w], si[w]);
      sb[0] = min(sb[0], sb[w]);
    }
    const int b = sb[0] == INT_MAX ? -1 : sb[0];
    out[blockIdx.x] = make_int4(si[0] == INT_MAX ? -1 : si[0], b, b >= 0 && isnan(row[b]) ? 1 : 0, penalized ? 1 : 0);
  }
  if (rr.kind != ops::RowKind::kDraw || n_cols > draw::kMaxCols) return;
  __syncthreads();  // (si, sb final)
  if (sb[0] != INT_MAX || si[0] == INT_MAX) return;  // a non-finite row is not drawn (the host reports it)
  __shared__ draw::Smem sm;
  const int n = static_cast<int>(n_cols);
  const float top = row[si[0]];
  const bool filtered = (rr.top_k > 0 && rr.top_k < n) || rr.top_p < 1.0f || rr.min_p > 0.0f;
  int tok = filtered ? draw::draw_filtered(row, n, top, rr, sm) : -2;
  if (tok == -2) tok = draw::draw_full(row, n, top, rr.scale, rr.u, sm);
  if (threadIdx.x == 0) out[blockIdx.x].x = tok;  // -1: left to the host (the row is copied)
}

}  // namespace

void CudaBackend::fetch_rows(ops::Buffer& src, int64_t n_rows, int64_t n_cols, const ops::RowReduce* reduce,
                             const ops::PenaltyToken* penalties, float* dst, ops::ArgmaxRow* picks) {
  rt_.bind();
  if (n_rows < 0 || n_cols <= 0 || n_rows * n_cols > src.size() || n_cols > INT_MAX) {
    fail(ErrorKind::kInternal, "cuda", "fetch_rows: rows out of the buffer");
  }
  if (n_rows == 0 || reduce == nullptr) {
    copy_to_host(src, 0, n_rows * n_cols, dst);
    return;
  }
  // Rows reduced here: argmax rows, and draw rows when drawing is on and the row fits.
  const bool draws = device_draw_ && n_cols <= draw::kMaxCols;
  auto reduced = [&](int64_t r) {
    return reduce[r].kind == ops::RowKind::kArgmax || (draws && reduce[r].kind == ops::RowKind::kDraw);
  };
  // The rows' reduce kinds as given (the step description's, read where begin_step
  // uploaded them) when the kernel may take them as they are: draws on and a penalty
  // list. Else a copy with the draws turned into copies and no penalties, staged. (Which
  // of the two depends on the settings and the call, never on the rows' contents: a
  // step's uploads must not change with its sequences' sampling.)
  const size_t n_pen = static_cast<size_t>(n_rows) * ops::kMaxPenaltyTokens;
  const ops::RowReduce* kinds_src = reduce;
  std::vector<ops::RowReduce> kinds;
  if (!draws || penalties == nullptr) {
    kinds.assign(reduce, reduce + n_rows);
    if (!draws) {
      for (auto& k : kinds) {
        if (k.kind == ops::RowKind::kDraw) k = ops::RowReduce{};
      }
    }
    if (penalties == nullptr) {
      // Every row's penalty slot is staged (the step's uploads do not depend on which rows have penalties).
      pen_zero_.assign(n_pen, ops::PenaltyToken{});
      penalties = pen_zero_.data();
      for (auto& k : kinds) k.n_penalty = 0;
    }
    kinds_src = kinds.data();
  }
  const auto* d_reduce = rt_.stage_array(kinds_src, n_rows, "fetch_rows");
  const auto* d_pens = rt_.stage_array(penalties, static_cast<int64_t>(n_pen), "fetch_rows");
  // The kernel runs whichever rows are greedy, even none: a step's launches (and so its
  // recorded graph) must not depend on its sequences' sampling settings, or steps of one
  // size would alternate between two recordings.
  auto* d_out = static_cast<int4*>(rt_.scratch(9, sizeof(int4) * static_cast<size_t>(n_rows), "fetch_rows"));
  // Every row is reduced (the step's launches do not depend on which rows are greedy).
  const bool vec = n_cols % 4 == 0 && reinterpret_cast<uintptr_t>(src.data()) % 16 == 0;
  if (!rt_.skip_launch()) {
    if (vec) {
      ::hearth::cuda::launch_pdl(argmax_rows_kernel<true>, static_cast<unsigned>(n_rows), kArgmaxThreads, 0, stream_,
                                 src.data(), n_cols, d_reduce, d_pens, d_out);
    } else {
      ::hearth::cuda::launch_pdl(argmax_rows_kernel<false>, static_cast<unsigned>(n_rows), kArgmaxThreads, 0, stream_,
                                 src.data(), n_cols, d_reduce, d_pens, d_out);
    }
    HEARTH_CUDA_LAUNCHED("argmax_rows");
  }
  rt_.end_step();  // the end of a graph step, as in copy_to_host
  if (rt_.wait_timing()) rt_.wait("fetch_rows");
  std::vector<int4> h(static_cast<size_t>(n_rows));
  HEARTH_CUDA_CHECK("fetch_rows",
                    cudaMemcpyAsync(h.data(), d_out, sizeof(int4) * h.size(), cudaMemcpyDeviceToHost, stream_));
  // The other rows, each run of consecutive ones in one copy.
  for (int64_t r = 0; r < n_rows;) {
    if (reduced(r)) {
      ++r;
      continue;
    }
    int64_t e = r;
    while (e < n_rows && !reduced(e)) ++e;
    HEARTH_CUDA_CHECK("fetch_rows", cudaMemcpyAsync(dst + r * n_cols, src.data() + r * n_cols,
                                                    sizeof(float) * (e - r) * n_cols, cudaMemcpyDeviceToHost, stream_));
    r = e;
  }
  rt_.wait("fetch_rows");
  // Draws the device left undecided (too many candidates for a top-p or min-p cut, or a
  // cut that rounding put past them): their rows now, drawn on the host.
  bool late = false;
  for (int64_t r = 0; r < n_rows; ++r) {
    if (reduced(r) && reduce[r].kind == ops::RowKind::kDraw && h[r].x < 0 && h[r].y < 0) {
      HEARTH_CUDA_CHECK("fetch_rows", cudaMemcpyAsync(dst + r * n_cols, src.data() + r * n_cols,
                                                      sizeof(float) * n_cols, cudaMemcpyDeviceToHost, stream_));
      late = true;
    }
  }
  if (late) rt_.wait("fetch_rows");
  for (int64_t r = 0; r < n_rows; ++r) {
    if (reduced(r)) {
      picks[r] = ops::ArgmaxRow{h[r].x, h[r].y, h[r].z, h[r].w};
    } else if (reduce[r].kind == ops::RowKind::kDraw) {
      picks[r] = ops::ArgmaxRow{};  // copied: drawn on the host
    }
  }
}

}  // namespace hearth::cuda

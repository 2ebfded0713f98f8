// The routed experts' decode products on 8-bit activations (quant_cuda.h: q8_moe_*).
// A block per (pair, rows) reads the pair's expert rows for that pair alone; when a batch's
// pairs are grouped by expert first (q8_moe_group: one small kernel, stable, on the
// device), a block per (used expert, rows) reads each row once and multiplies it with
// every pair of that expert. Both give a pair the same sums in the same order (a lane's
// units in order, the lanes' butterfly), so a pair's outputs are the same bits either way
// and do not depend on the other pairs of the batch. Rows longer than kMaxGroupUnits
// units take a block per (pair, row) and are never grouped.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/launch.cuh"
#include "backends/cuda/quant_cuda.h"
#include "backends/cuda/quant_q8_dot.cuh"
#include "backends/cuda/quant_q8_internal.cuh"
#include "backends/cuda/quant_q8_wide.cuh"
#include "core/error.h"
#include "core/tune.h"

namespace hearth::cuda {
namespace {

using q8::bad;
using q8::check;
using q8::check_groups;
using q8::check_shared;
using q8::group_view;
using q8::GroupView;
using q8::kChunk;
using q8::kTilePairs;
using q8::kThreads;
using q8::Q8Dot;
using q8::Q8Wide;
using q8::quantize_into;
using q8::warp_add;

constexpr int kSortThreads = 512;       // one thread per expert: n_expert <= 512
constexpr int kMaxGroupPairs = 64 * 32;  // pairs a group call takes (64 tokens x 32 experts)
constexpr int kGroupThreads = 256;      // grouped products: eight warps a block
constexpr int kGroupTokens = 8;         // pairs an expert row meets per pass (registers)
constexpr int kMaxGroupUnits = 64;      // longer rows keep a block per (pair, row)

struct ExpertArgs {
  const uint8_t* w;
  const uint8_t* w2;  // kGateUp: the up rows (same layout as w)
  uint64_t row_bytes;
  int64_t rows_per_expert;
  int n_units;
  const int32_t* ids;  // per pair: its expert
  int n_used;
  const int8_t* xq;
  const float2* xd;
  int64_t n_cols;
  float* out;
  // Grouped: *n_runs runs of pairs, run i = pairs order[runs[i].first ..] of expert runs[i].expert.
  const int32_t* n_runs;
  const ExpertTile* runs;
  const int32_t* order;
  // The shared expert: pairs with id shared_id read its rows at ws (ws2: up rows).
  const uint8_t* ws;
  const uint8_t* ws2;
  int64_t shared_id;
};

// Row r of expert e (the stacked weights, or the shared expert's own) and, for gate / up,
// the matching up row.
__device__ __forceinline__ const uint8_t* expert_row(const ExpertArgs& a, const uint8_t* w, const uint8_t* ws,
                                                     int64_t e, int64_t r) {
  return e == a.shared_id ? ws + static_cast<uint64_t>(r) * a.row_bytes
                          : w + static_cast<uint64_t>(e * a.rows_per_expert + r) * a.row_bytes;
}

// Sum of v over the block in a fixed order (warps' butterflies, then warp by warp);
// valid in thread 0.
__device__ __forceinline__ float block_sum_fixed(float v) {
  v = warp_add(v);
  __shared__ float part[kThreads / 32];
  __syncthreads();  // part may still be read from a previous call
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = part[0];
#pragma unroll
  for (int k = 1; k < kThreads / 32; ++k) s += part[k];
  return s;
}

__device__ __forceinline__ float gate_up_out(float g, float u) { return g / (1.f + expf(-g)) * u; }

// Rows of more than kMaxGroupUnits units: a block per (row, pair); pair p = blockIdx.y
// is token p / n_used with expert ids[p]; expert e's rows start at row e * rows_per_expert.
// kGateUp: out[p, r] = silu(w[r] . x) * (w2[r] . x) with x the token's quantized input;
// else out[p, r] = w[r] . x with x pair p's own quantized row.
template <class T, bool kGateUp>
__global__ void __launch_bounds__(kThreads) q8_expert_kernel(const ExpertArgs a) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int p = blockIdx.y;
  const int64_t r = blockIdx.x;
  const int64_t e = a.ids[p];
  const int x_row = kGateUp ? p / a.n_used : p;
  const int8_t* xb = a.xq + x_row * a.n_cols;
  const float2* db = a.xd + x_row * (a.n_cols / kChunk);
  const uint8_t* w = expert_row(a, a.w, a.ws, e, r);
  [[maybe_unused]] const uint8_t* w2 = kGateUp ? expert_row(a, a.w2, a.ws2, e, r) : nullptr;
  float acc = 0.f, acc2 = 0.f;
  for (int u = static_cast<int>(threadIdx.x); u < a.n_units; u += kThreads) {
    const int b = u / T::kUnits, s = u % T::kUnits;
    const q8::GlobalX x{xb + static_cast<int64_t>(b) * T::kElems};
    const float2* du = db + static_cast<int64_t>(b) * (T::kElems / kChunk);
    acc += T::dot(T::decode(w + static_cast<uint64_t>(b) * T::kBytes, s), s, x, du);
    if constexpr (kGateUp) acc2 += T::dot(T::decode(w2 + static_cast<uint64_t>(b) * T::kBytes, s), s, x, du);
  }
  acc = block_sum_fixed(acc);
  if constexpr (kGateUp) acc2 = block_sum_fixed(acc2);
  if (threadIdx.x == 0) a.out[static_cast<int64_t>(p) * a.rows_per_expert + r] = kGateUp ? gate_up_out(acc, acc2) : acc;
}

// Rows of up to kMaxGroupUnits units: block (rows, run blockIdx.y), a run being the pairs
// of one expert (grouped: order[first .. first + count)) or, without groups, pair
// blockIdx.y alone. Each group of L lanes owns one row of the run's expert and meets the
// run's pairs kGroupTokens at a time, decoding each unit of the row once per pass; lane l
// takes units l, l + L, ... (L: the smallest power of two >= n_units / units_per_lane(),
// 2 to 32; two units a lane by default) and the L lanes' butterfly sums them. A pair's
// sums involve its own row of x only, in one order: the same bits grouped or not, in any
// batch.
template <class T, int L, bool kGateUp>
__global__ void __launch_bounds__(kGroupThreads) q8_expert_grouped_kernel(const ExpertArgs a) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  ExpertTile run;  // without groups: pair blockIdx.y alone
  if (a.runs != nullptr) {
    if (static_cast<int>(blockIdx.y) >= *a.n_runs) return;
    run = a.runs[blockIdx.y];
  } else {
    run = ExpertTile{a.ids[blockIdx.y], static_cast<int32_t>(blockIdx.y), 1};
  }
  const int lane = threadIdx.x & 31, l = lane % L;
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * (kGroupThreads / 32) + (threadIdx.x >> 5)) * (32 / L) + lane / L;
  const bool live = r < a.rows_per_expert;
  const uint8_t* w = expert_row(a, a.w, a.ws, run.expert, live ? r : 0);
  [[maybe_unused]] const uint8_t* w2 = kGateUp ? expert_row(a, a.w2, a.ws2, run.expert, live ? r : 0) : nullptr;
  const int64_t n_blocks_x = a.n_cols / kChunk;
  for (int c0 = 0; c0 < run.count; c0 += kGroupTokens) {
    const int nt = min(kGroupTokens, run.count - c0);
    int pair[kGroupTokens];
    float acc[kGroupTokens], acc2[kGroupTokens];
#pragma unroll
    for (int j = 0; j < kGroupTokens; ++j) {
      const int i = run.first + c0 + min(j, nt - 1);
      pair[j] = a.runs != nullptr ? a.order[i] : i;
      acc[j] = 0.f;
      acc2[j] = 0.f;
    }
    for (int u = live ? l : a.n_units; u < a.n_units; u += L) {
      const int b = u / T::kUnits, s = u % T::kUnits;
      const auto dec = T::decode(w + static_cast<uint64_t>(b) * T::kBytes, s);
      [[maybe_unused]] const auto dec2 = kGateUp ? T::decode(w2 + static_cast<uint64_t>(b) * T::kBytes, s) : dec;
#pragma unroll
      for (int j = 0; j < kGroupTokens; ++j) {
        if (j >= nt) break;
        const int64_t x_row = kGateUp ? pair[j] / a.n_used : pair[j];
        const q8::GlobalX x{a.xq + x_row * a.n_cols + static_cast<int64_t>(b) * T::kElems};
        const float2* du = a.xd + x_row * n_blocks_x + static_cast<int64_t>(b) * (T::kElems / kChunk);
        acc[j] += T::dot(dec, s, x, du);
        if constexpr (kGateUp) acc2[j] += T::dot(dec2, s, x, du);
      }
    }
#pragma unroll
    for (int j = 0; j < kGroupTokens; ++j) {
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1) {
        acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
        if constexpr (kGateUp) acc2[j] += __shfl_xor_sync(0xffffffffu, acc2[j], o);
      }
    }
    if (live && l == 0) {
#pragma unroll
      for (int j = 0; j < kGroupTokens; ++j) {
        if (j >= nt) break;
        a.out[static_cast<int64_t>(pair[j]) * a.rows_per_expert + r] = kGateUp ? gate_up_out(acc[j], acc2[j]) : acc[j];
      }
    }
  }
}

// One block: the pairs of ids grouped by expert, stable (pairs in order within an expert):
// order[] holds pair indices expert by expert, runs[i] the i-th used expert's range of
// order (experts ascending), *n_runs their number; tiles[] the same ranges cut into
// pieces of at most kTilePairs pairs (*n_tiles of them: the tensor-core kernels' blocks).
// Thread e counts expert e's pairs.
__global__ void __launch_bounds__(kSortThreads)
    moe_group_kernel(const int32_t* __restrict__ ids, int n_pairs, int n_expert, int32_t* __restrict__ n_runs,
                     ExpertTile* __restrict__ runs, int32_t* __restrict__ order, int32_t* __restrict__ n_tiles,
                     ExpertTile* __restrict__ tiles) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ int32_t sids[kMaxGroupPairs];
  __shared__ int32_t start[kSortThreads], slot[kSortThreads], tslot[kSortThreads];
  const int e = threadIdx.x;
  for (int i = e; i < n_pairs; i += kSortThreads) sids[i] = ids[i];
  __syncthreads();
  int c = 0;
  if (e < n_expert) {
    for (int i = 0; i < n_pairs; ++i) c += sids[i] == e;
  }
  // Inclusive scans (Hillis-Steele) of the counts and of the used flags.
  const int nt = (c + kTilePairs - 1) / kTilePairs;  // tiles of at most kTilePairs pairs
  start[e] = c;
  slot[e] = c > 0;
  tslot[e] = nt;
  __syncthreads();
  for (int d = 1; d < kSortThreads; d <<= 1) {
    const int s0 = e >= d ? start[e - d] : 0, u0 = e >= d ? slot[e - d] : 0, t0 = e >= d ? tslot[e - d] : 0;
    __syncthreads();
    start[e] += s0;
    slot[e] += u0;
    tslot[e] += t0;
    __syncthreads();
  }
  const int first = start[e] - c, run = slot[e] - (c > 0), tile = tslot[e] - nt;
  if (e == kSortThreads - 1) {
    *n_runs = slot[e];
    *n_tiles = tslot[e];
  }
  for (int j = 0; j < nt; ++j) {
    tiles[tile + j] = ExpertTile{e, first + kTilePairs * j, min(kTilePairs, c - kTilePairs * j)};
  }
  if (c > 0) {
    runs[run] = ExpertTile{e, first, c};
    int k = first;
    for (int i = 0; i < n_pairs; ++i) {
      if (sids[i] == e) order[k++] = i;
    }
  }
}

// Units a lane of the grouped kernel takes (cuda.moe_upl). Two,
// measured on the H200 (Qwen3.5-35B-A3B shape, 8 layers, against one a lane): one token
// 0.67 -> 0.66 ms a step, 16 tokens 2.72 -> 2.66, 64 tokens 6.06 -> 5.50 (more loads in
// flight a lane); four: 64 tokens 5.43, but 16 tokens 2.86.
int units_per_lane() { return static_cast<int>(tune::get(tune::kCudaMoeUpl)); }

// Rows of up to kMaxGroupUnits units on the grouped kernel (without groups: a run per
// pair, which also gives short rows such as a 512-wide down projection's 8 units whole
// warps), longer ones a block per (pair, row).
template <class T, bool kGateUp>
void launch_expert(const ExpertArgs& a, int64_t n_pairs, int max_runs, cudaStream_t stream) {
  if (a.n_units <= kMaxGroupUnits) {
    auto go = [&](auto kernel, int lanes) {
      const int64_t rows_per_block = (kGroupThreads / 32) * (32 / lanes);
      const dim3 grid(static_cast<unsigned>((a.rows_per_expert + rows_per_block - 1) / rows_per_block),
                      static_cast<unsigned>(a.runs != nullptr ? max_runs : n_pairs));
      ::hearth::cuda::launch_pdl(kernel, grid, kGroupThreads, 0, stream, a);
    };
    // Lanes a row: enough for units_per_lane() units each (1: a unit a lane).
    const int want = (a.n_units + units_per_lane() - 1) / units_per_lane();
    if (want <= 2) {
      go(q8_expert_grouped_kernel<T, 2, kGateUp>, 2);
    } else if (want <= 4) {
      go(q8_expert_grouped_kernel<T, 4, kGateUp>, 4);
    } else if (want <= 8) {
      go(q8_expert_grouped_kernel<T, 8, kGateUp>, 8);
    } else if (want <= 16) {
      go(q8_expert_grouped_kernel<T, 16, kGateUp>, 16);
    } else {
      go(q8_expert_grouped_kernel<T, 32, kGateUp>, 32);
    }
    return;
  }
  const dim3 grid(static_cast<unsigned>(a.rows_per_expert), static_cast<unsigned>(n_pairs));
  ::hearth::cuda::launch_pdl(q8_expert_kernel<T, kGateUp>, grid, kThreads, 0, stream, a);
}

template <bool kGateUp>
void launch_expert_type(GgmlType type, ExpertArgs a, int64_t n_pairs, int max_runs, cudaStream_t stream) {
  a.n_units = 0;
#define HEARTH_Q8_EXPERT(D, T)                                                           \
  a.n_units = static_cast<int>(a.n_cols / D<GgmlType::T>::kElems) * D<GgmlType::T>::kUnits; \
  launch_expert<D<GgmlType::T>, kGateUp>(a, n_pairs, max_runs, stream)
  switch (type) {
    case GgmlType::Q4_0: HEARTH_Q8_EXPERT(Q8Dot, Q4_0); break;
    case GgmlType::Q4_1: HEARTH_Q8_EXPERT(Q8Dot, Q4_1); break;
    case GgmlType::Q5_0: HEARTH_Q8_EXPERT(Q8Dot, Q5_0); break;
    case GgmlType::Q5_1: HEARTH_Q8_EXPERT(Q8Dot, Q5_1); break;
    case GgmlType::Q8_0: HEARTH_Q8_EXPERT(Q8Dot, Q8_0); break;
    case GgmlType::Q4_K: HEARTH_Q8_EXPERT(Q8Wide, Q4_K); break;
    case GgmlType::Q5_K: HEARTH_Q8_EXPERT(Q8Wide, Q5_K); break;
    case GgmlType::Q6_K: HEARTH_Q8_EXPERT(Q8Wide, Q6_K); break;
    case GgmlType::Q2_K: HEARTH_Q8_EXPERT(Q8Wide, Q2_K); break;
    case GgmlType::Q3_K: HEARTH_Q8_EXPERT(Q8Wide, Q3_K); break;
    default: break;
  }
#undef HEARTH_Q8_EXPERT
}

ExpertArgs expert_args(const DeviceWeight& w, const void* w2, int64_t rows_per_expert, const int32_t* ids, int n_used,
                       const int8_t* xq, const float2* xd, float* out, const void* groups, int64_t n_pairs,
                       int n_expert, int* max_runs, const void* shared_w, const void* shared_w2) {
  ExpertArgs a{};
  a.w = static_cast<const uint8_t*>(w.data);
  a.w2 = static_cast<const uint8_t*>(w2);
  a.ws = static_cast<const uint8_t*>(shared_w);
  a.ws2 = static_cast<const uint8_t*>(shared_w2);
  a.shared_id = shared_w != nullptr ? w.n_rows / rows_per_expert : -1;
  a.row_bytes = w.row_bytes;
  a.rows_per_expert = rows_per_expert;
  a.ids = ids;
  a.n_used = n_used;
  a.xq = xq;
  a.xd = xd;
  a.n_cols = w.n_cols;
  a.out = out;
  *max_runs = 0;
  if (groups != nullptr) {
    const GroupView g = group_view(groups, n_pairs, n_expert);
    a.n_runs = g.n_runs;
    a.runs = g.runs;
    a.order = g.order;
    *max_runs = g.max_runs;
  }
  return a;
}

}  // namespace

namespace q8 {

GroupView group_view(const void* groups, int64_t n_pairs, int n_expert) {
  auto* base = static_cast<uint8_t*>(const_cast<void*>(groups));
  GroupView g{};
  g.max_runs = static_cast<int>(std::min<int64_t>(n_pairs, n_expert));
  // Each used expert's pairs in tiles of kTilePairs: at most one part-filled tile an expert.
  g.max_tiles = g.max_runs + static_cast<int>(n_pairs / kTilePairs);
  g.n_runs = reinterpret_cast<int32_t*>(base);
  g.n_tiles = reinterpret_cast<int32_t*>(base + 4);
  g.runs = reinterpret_cast<ExpertTile*>(base + 16);
  const size_t runs_bytes = align_up(sizeof(ExpertTile) * static_cast<size_t>(g.max_runs));
  g.order = reinterpret_cast<int32_t*>(base + 16 + runs_bytes);
  g.tiles = reinterpret_cast<ExpertTile*>(base + 16 + runs_bytes + align_up(sizeof(int32_t) * static_cast<size_t>(n_pairs)));
  return g;
}

void check_shared(const void* shared_w, bool with_w2, const void* shared_w2, const char* what) {
  if (shared_w == nullptr) return;
  if ((reinterpret_cast<uintptr_t>(shared_w) | (with_w2 ? reinterpret_cast<uintptr_t>(shared_w2) : 0)) % 16 != 0 ||
      (with_w2 && shared_w2 == nullptr)) {
    q8::bad(std::string(what) + ": the shared expert's rows must be given (gate and up) at 16-byte aligned addresses");
  }
}

void check_groups(const void* groups, int64_t n_pairs, int n_expert, int64_t experts_in_weight, const char* what) {
  if (groups == nullptr) return;
  if (n_expert <= 0 || n_expert > kSortThreads || n_expert > experts_in_weight || n_pairs > kMaxGroupPairs ||
      reinterpret_cast<uintptr_t>(groups) % 16 != 0) {
    q8::bad(std::string(what) + ": grouped pairs need 1 to " + std::to_string(kSortThreads) + " experts (the weight's " +
        std::to_string(experts_in_weight) + "), at most " + std::to_string(kMaxGroupPairs) +
        " pairs and a 16-byte aligned buffer");
  }
}

}  // namespace q8

bool q8_moe_group_fits(int64_t n_pairs, int64_t n_expert) {
  return n_pairs > 0 && n_pairs <= kMaxGroupPairs && n_expert > 0 && n_expert <= kSortThreads;
}

size_t q8_moe_group_bytes(int64_t n_pairs, int n_expert) {
  const auto runs = static_cast<size_t>(std::min<int64_t>(n_pairs, n_expert));
  const size_t tiles = runs + static_cast<size_t>(n_pairs / q8::kTilePairs);
  return 16 + q8::align_up(sizeof(ExpertTile) * runs) + q8::align_up(sizeof(int32_t) * static_cast<size_t>(n_pairs)) +
         sizeof(ExpertTile) * tiles;
}

void q8_moe_group(const int32_t* ids, int64_t n_pairs, int n_expert, void* groups, cudaStream_t stream) {
  if (n_pairs <= 0) return;
  check_groups(groups, n_pairs, n_expert, n_expert, "q8_moe_group");
  if (groups == nullptr) bad("q8_moe_group: groups is null");
  const GroupView g = group_view(groups, n_pairs, n_expert);
  ::hearth::cuda::launch_pdl(moe_group_kernel, 1, kSortThreads, 0, stream, ids, static_cast<int>(n_pairs), n_expert,
                             g.n_runs, g.runs, g.order, g.n_tiles, g.tiles);
}

void q8_moe_gate_up(const DeviceWeight& gate, const DeviceWeight& up, int64_t rows_per_expert, const int32_t* ids,
                    int64_t n_tokens, int n_used, const float* x, float* h, void* scratch, size_t scratch_bytes,
                    cudaStream_t stream, const void* groups, int n_expert, const void* shared_w,
                    const void* shared_w2, bool x_ready) {
  check(gate, gate.n_cols);
  check_shared(shared_w, true, shared_w2, "q8_moe_gate_up");
  check(up, gate.n_cols);
  if (up.type != gate.type || up.row_bytes != gate.row_bytes || up.n_rows != gate.n_rows) {
    bad("q8_moe_gate_up: gate and up must have one type and shape");
  }
  if (rows_per_expert <= 0 || gate.n_rows % rows_per_expert != 0 || n_used <= 0) {
    bad("q8_moe_gate_up: rows_per_expert " + std::to_string(rows_per_expert) + " does not divide " +
        std::to_string(gate.n_rows) + " rows");
  }
  if (n_tokens <= 0) return;
  if (scratch_bytes < q8_scratch_bytes(gate.n_cols, n_tokens) || reinterpret_cast<uintptr_t>(scratch) % 256 != 0) {
    bad("q8_moe_gate_up: scratch must hold q8_scratch_bytes and be 256-byte aligned");
  }
  const int64_t n_pairs = n_tokens * n_used;
  check_groups(groups, n_pairs, n_expert, gate.n_rows / rows_per_expert + (shared_w != nullptr ? 1 : 0),
               "q8_moe_gate_up");
  int8_t* xq = static_cast<int8_t*>(scratch);
  auto* xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(scratch) + q8_scratch_scales_offset(n_tokens, gate.n_cols));
  if (!x_ready) quantize_into(x, n_tokens, gate.n_cols, scratch, &xq, &xd, stream);
  int max_runs = 0;
  const ExpertArgs a =
      expert_args(gate, up.data, rows_per_expert, ids, n_used, xq, xd, h, groups, n_pairs, n_expert, &max_runs,
                  shared_w, shared_w2);
  launch_expert_type<true>(gate.type, a, n_pairs, max_runs, stream);
}

void q8_moe_down(const DeviceWeight& down, int64_t rows_per_expert, const int32_t* ids, int64_t n_pairs,
                 const float* h, float* y, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                 const void* groups, int n_expert, const void* shared_w) {
  check(down, down.n_cols);
  check_shared(shared_w, false, nullptr, "q8_moe_down");
  if (rows_per_expert <= 0 || down.n_rows % rows_per_expert != 0) {
    bad("q8_moe_down: rows_per_expert " + std::to_string(rows_per_expert) + " does not divide " +
        std::to_string(down.n_rows) + " rows");
  }
  if (n_pairs <= 0) return;
  if (scratch_bytes < q8_scratch_bytes(down.n_cols, n_pairs) || reinterpret_cast<uintptr_t>(scratch) % 256 != 0) {
    bad("q8_moe_down: scratch must hold q8_scratch_bytes and be 256-byte aligned");
  }
  check_groups(groups, n_pairs, n_expert, down.n_rows / rows_per_expert + (shared_w != nullptr ? 1 : 0),
               "q8_moe_down");
  int8_t* hq = nullptr;
  float2* hd = nullptr;
  quantize_into(h, n_pairs, down.n_cols, scratch, &hq, &hd, stream);
  int max_runs = 0;
  const ExpertArgs a = expert_args(down, nullptr, rows_per_expert, ids, 1, hq, hd, y, groups, n_pairs, n_expert,
                                   &max_runs, shared_w, nullptr);
  launch_expert_type<false>(down.type, a, n_pairs, max_runs, stream);
}

}  // namespace hearth::cuda

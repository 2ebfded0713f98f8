// What the 8-bit activation product files share (quant_q8.cu: dense products,
// quant_q8_moe.cu / quant_mmq_moe.cu: routed experts): block size, the activations' chunk, the warp sum and
// the argument checks. Internal to those files.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/cuda/quant_cuda.h"

namespace hearth::cuda::q8 {

constexpr int kThreads = 128;
constexpr int kChunk = 32;  // activations are quantized in chunks of 32 values

// Sum over the warp's 32 lanes by a butterfly (16, 8, 4, 2, 1): every lane gets it.
template <class V>
__device__ __forceinline__ V warp_add(V v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

[[noreturn]] void bad(const std::string& what);
// Checks w against the decoders' assumptions; returns false when it has no rows.
bool check(const DeviceWeight& w, int64_t n_cols);
size_t align_up(size_t v);  // to 256 bytes
// x: [n_rows, n_cols] quantized into scratch (q8_scratch_bytes); returns the (xq, xd) pair.
void quantize_into(const float* x, int64_t n_rows, int64_t n_cols, void* scratch, int8_t** xq, float2** xd,
                   cudaStream_t stream);

// The layout of q8_moe_group's `groups`: n_runs and n_tiles, then runs[min(n_pairs,
// n_expert)], order[n_pairs] and tiles[max_tiles] (quant_q8_moe.cu; the tiles, each at most
// kTilePairs pairs of one expert, are quant_mmq_moe.cu's blocks).
constexpr int kTilePairs = 8;
struct GroupView {
  int32_t* n_runs;
  int32_t* n_tiles;
  ExpertTile* runs;
  int32_t* order;
  ExpertTile* tiles;
  int max_runs, max_tiles;
};
GroupView group_view(const void* groups, int64_t n_pairs, int n_expert);
// What the grouped expert products require of a call (a precise message otherwise).
void check_shared(const void* shared_w, bool with_w2, const void* shared_w2, const char* what);
void check_groups(const void* groups, int64_t n_pairs, int n_expert, int64_t experts_in_weight, const char* what);

}  // namespace hearth::cuda::q8

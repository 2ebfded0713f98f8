// The scalar prompt attention (CudaBackend::attention's kernel for prompts where the
// tensor-core one does not take the call, or with cuda.attn_tc=0): f32 arithmetic over the
// paged f32, f16 or q8_0 cache.
#include <cuda_fp16.h>

#include "backends/cuda/cuda_attention.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_kv_q8.cuh"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

// Prompts: one block per (tile of query rows of one sequence, KV head) computes the
// kPrefillQ query vectors of those rows and of the heads sharing the KV head, over
// chunks of 32 keys staged in shared memory (converted to f32) and read once for all of
// them. Lane j scores key j of the chunk (K rows padded by one float: no bank
// conflicts), the chunk's softmax update is one warp max and sum, and the value sum has
// lanes over dimensions (V rows broadcast per key). Warp w owns queries w, w + 4, ...
constexpr int kPrefillWarps = 4, kChunk = 32;

template <class T, int EPL>
__global__ void __launch_bounds__(kPrefillWarps * 32)
    attention_prefill_kernel(const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                             const SeqDesc* __restrict__ seqs, const Tile* __restrict__ tiles,
                             const int32_t* __restrict__ tables, int n_head, int group, int head_dim,
                             int64_t kv_stride, int bs_log2, float scale, float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  extern __shared__ float smem[];
  const int D = head_dim, DP = head_dim + 1;
  float* Ks = smem;                   // [kChunk][D + 1]
  float* Vs = Ks + kChunk * DP;       // [kChunk][D]
  float* Qs = Vs + kChunk * D;        // [kPrefillQ][D], scaled
  const Tile tile = tiles[blockIdx.x];
  const SeqDesc sd = seqs[tile.seq];
  const int hkv = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nq = tile.n_rows * group;
  const int32_t* table = tables + sd.table_off;
  const int64_t kv_off = static_cast<int64_t>(hkv) * D / kv_unit<T>;  // (kv_stride too: in units of T)
  // Query qq: row tile.row0 + qq / group, head hkv * group + qq % group.
  for (int i = threadIdx.x; i < kPrefillQ * D; i += blockDim.x) {
    const int qq = i / D, d = i % D;
    float v = 0.0f;
    if (qq < nq) {
      const int64_t row = sd.first_row + tile.row0 + qq / group;
      v = q[(row * n_head + hkv * group + qq % group) * D + d] * scale;
    }
    Qs[i] = v;
  }
  constexpr int kPerWarp = kPrefillQ / kPrefillWarps;
  float m[kPerWarp], l[kPerWarp], acc[kPerWarp][EPL];
  int limit[kPerWarp];
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int qq = warp + i * kPrefillWarps;
    m[i] = -INFINITY;
    l[i] = 0.0f;
    limit[i] = qq < nq ? sd.pos0 + tile.row0 + qq / group + 1 : 0;  // keys this query sees
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[i][e] = 0.0f;
  }
  const int n_keys = sd.pos0 + tile.row0 + tile.n_rows;  // the tile's last row sees these
  const int bs_mask = (1 << bs_log2) - 1;
  for (int c0 = 0; c0 < n_keys; c0 += kChunk) {
    __syncthreads();  // the previous chunk is no longer read
    for (int i = threadIdx.x; i < kChunk * D; i += blockDim.x) {
      const int j = i / D, d = i % D, key = c0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (key < n_keys) {
        const int64_t r = static_cast<int64_t>(table[key >> bs_log2]) * (bs_mask + 1) + (key & bs_mask);
        kv = kv_at(kc + r * kv_stride + kv_off, d);
        vv = kv_at(vc + r * kv_stride + kv_off, d);
      }
      Ks[j * DP + d] = kv;
      Vs[j * D + d] = vv;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int qq = warp + i * kPrefillWarps;
      if (qq >= nq || c0 >= limit[i]) continue;  // warp-uniform
      const float* qv = Qs + qq * D;
      const float* kr = Ks + lane * DP;
      float s = 0.0f;
      for (int d = 0; d < D; ++d) s += qv[d] * kr[d];
      if (c0 + lane >= limit[i]) s = -INFINITY;
      float cm = s;
      for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
      const float m_new = fmaxf(m[i], cm);
      const float corr = expf(m[i] - m_new);
      const float p = expf(s - m_new);
      l[i] = l[i] * corr + warp_sum(p);
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[i][e] *= corr;
      const int nj = min(kChunk, limit[i] - c0);
      for (int j = 0; j < nj; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const float* vr = Vs + j * D;
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
          const int d = lane + 32 * e;
          if (d < D) acc[i][e] += pj * vr[d];
        }
      }
      m[i] = m_new;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerWarp; ++i) {
    const int qq = warp + i * kPrefillWarps;
    if (qq >= nq) continue;
    const int64_t row = sd.first_row + tile.row0 + qq / group;
    float* o = out + (row * n_head + hkv * group + qq % group) * D;
    const float inv = 1.0f / l[i];
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const int d = lane + 32 * e;
      if (d < D) o[d] = acc[i][e] * inv;
    }
  }
}

template <class T, int EPL>
void launch_prefill_t(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v, const SeqDesc* seqs,
                      const Tile* tiles, const int32_t* tables, int n_head, int group, int head_dim, int64_t kv_stride,
                      int bs_log2, float scale, float* out) {
  const size_t smem = sizeof(float) * (static_cast<size_t>(kChunk) * (head_dim + 1) + kChunk * head_dim +
                                       static_cast<size_t>(kPrefillQ) * head_dim);
  static bool raised = false;  // per instantiation: allow more than 48 KiB of shared memory
  if (!raised) {
    LaunchRuntime::check(cudaFuncSetAttribute(attention_prefill_kernel<T, EPL>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024),
                       "attention", "cudaFuncSetAttribute");
    raised = true;
  }
  ::hearth::cuda::launch_pdl(attention_prefill_kernel<T, EPL>, grid, kPrefillWarps * 32, smem, st, q, static_cast<const T*>(k), static_cast<const T*>(v), seqs, tiles, tables, n_head, group, head_dim, kv_stride,
      bs_log2, scale, out);
}

template <class T>
void launch_prefill(int epl, dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v,
                    const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head, int group, int head_dim,
                    int64_t kv_stride, int bs_log2, float scale, float* out) {
  switch (epl) {
    case 2:
      launch_prefill_t<T, 2>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, head_dim, kv_stride, bs_log2, scale,
                             out);
      break;
    case 4:
      launch_prefill_t<T, 4>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, head_dim, kv_stride, bs_log2, scale,
                             out);
      break;
    default:
      launch_prefill_t<T, 8>(grid, st, q, k, v, seqs, tiles, tables, n_head, group, head_dim, kv_stride, bs_log2, scale,
                             out);
      break;
  }
}

}  // namespace

void launch_prefill_scalar(ops::KvType type, int epl, dim3 grid, cudaStream_t st, const float* q, const void* k,
                           const void* v, const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head,
                           int group, int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out) {
  if (type == ops::KvType::Q8_0) {
    launch_prefill<KvQ8Block>(epl, grid, st, q, k, v, seqs, tiles, tables, n_head, group, head_dim, kv_stride, bs_log2,
                              scale, out);
  } else if (type == ops::KvType::F16) {
    launch_prefill<__half>(epl, grid, st, q, k, v, seqs, tiles, tables, n_head, group, head_dim, kv_stride, bs_log2,
                           scale, out);
  } else {
    launch_prefill<float>(epl, grid, st, q, k, v, seqs, tiles, tables, n_head, group, head_dim, kv_stride, bs_log2,
                          scale, out);
  }
}

}  // namespace hearth::cuda

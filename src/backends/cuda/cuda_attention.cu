// CudaBackend::attention: causal grouped-query attention over the paged KV cache,
// decode and prefill alike. One block per (query row, query head); its warps take keys
// j = warp, warp + n_warps, ... and keep an online softmax (running max, sum and
// weighted value sum, each lane holding head_dim / 32 dimensions); the warps' partial
// results are merged at the end. Keys are read through the sequence's block table.
// f32 arithmetic throughout (scores and softmax in f32 with expf).
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

constexpr int kAttnWarps = 8;

struct SeqDesc {
  int32_t first_row, n_tokens, pos0, table_off;
};

__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const __half* p) { return __half2float(*p); }

// EPL: dimensions per lane (head_dim <= 32 * EPL).
template <class T, int EPL>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                     const SeqDesc* __restrict__ seqs, const int32_t* __restrict__ row_seq,
                     const int32_t* __restrict__ tables, int n_head, int group, int head_dim, int64_t kv_stride,
                     int bs_log2, float scale, float* __restrict__ out) {
  const int row = blockIdx.x, h = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int si = row_seq[row];
  if (si < 0) return;  // a row of no sequence (the whole block leaves)
  const SeqDesc sd = seqs[si];
  const int n_keys = sd.pos0 + (row - sd.first_row) + 1;
  const int32_t* table = tables + sd.table_off;
  const int64_t kv_off = static_cast<int64_t>(h / group) * head_dim;
  const float* qr = q + (static_cast<int64_t>(row) * n_head + h) * head_dim;
  float qv[EPL], acc[EPL];
#pragma unroll
  for (int e = 0; e < EPL; ++e) {
    const int d = lane + 32 * e;
    qv[e] = d < head_dim ? qr[d] : 0.0f;
    acc[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int bs_mask = (1 << bs_log2) - 1;
  for (int j = warp; j < n_keys; j += kAttnWarps) {
    const int64_t r = static_cast<int64_t>(table[j >> bs_log2]) * (bs_mask + 1) + (j & bs_mask);
    const T* kp = kc + r * kv_stride + kv_off;
    const T* vp = vc + r * kv_stride + kv_off;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const int d = lane + 32 * e;
      if (d < head_dim) s += qv[e] * kv_load(kp + d);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const int d = lane + 32 * e;
      const float v = d < head_dim ? kv_load(vp + d) : 0.0f;
      acc[e] = acc[e] * corr + p * v;
    }
    m = m_new;
  }
  __shared__ float sm[kAttnWarps], sl[kAttnWarps];
  __shared__ float sacc[kAttnWarps][32 * EPL];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < EPL; ++e) sacc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f;
  float f[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = sm[w] == -INFINITY ? 0.0f : expf(sm[w] - M);
    L += sl[w] * f[w];
  }
  const float inv = 1.0f / L;
  float* o = out + (static_cast<int64_t>(row) * n_head + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) s += sacc[w][d] * f[w];
    o[d] = s * inv;
  }
}

template <class T>
void launch_attention(int epl, dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v,
                      const SeqDesc* seqs, const int32_t* row_seq, const int32_t* tables, int n_head, int group,
                      int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out) {
  const auto* kc = static_cast<const T*>(k);
  const auto* vc = static_cast<const T*>(v);
  const int threads = kAttnWarps * 32;
  switch (epl) {
    case 2:
      attention_kernel<T, 2><<<grid, threads, 0, st>>>(q, kc, vc, seqs, row_seq, tables, n_head, group, head_dim,
                                                       kv_stride, bs_log2, scale, out);
      break;
    case 4:
      attention_kernel<T, 4><<<grid, threads, 0, st>>>(q, kc, vc, seqs, row_seq, tables, n_head, group, head_dim,
                                                       kv_stride, bs_log2, scale, out);
      break;
    default:
      attention_kernel<T, 8><<<grid, threads, 0, st>>>(q, kc, vc, seqs, row_seq, tables, n_head, group, head_dim,
                                                       kv_stride, bs_log2, scale, out);
      break;
  }
}

}  // namespace

void CudaBackend::attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                            int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  OpTimer timer(*this, "attention");
  if (head_dim > 256 || head_dim <= 0) {
    fail(ErrorKind::kUnsupported, "cuda", "attention: head size " + std::to_string(head_dim) +
                                              " (the CUDA back-end takes 1 to 256)");
  }
  if (n_head_kv <= 0 || n_head % n_head_kv != 0) {
    fail(ErrorKind::kInvalidInput, "cuda", "attention: query heads must be a multiple of the KV heads");
  }
  int bs_log2 = 0;
  while ((int64_t{1} << bs_log2) < cache.block_size) ++bs_log2;
  if ((int64_t{1} << bs_log2) != cache.block_size) {
    fail(ErrorKind::kInvalidInput, "cuda", "attention: block size is not a power of two");
  }
  // The batch description: per sequence its rows, start and block table offset; per
  // query row its sequence; the block tables one after another.
  std::vector<SeqDesc> desc;
  std::vector<int32_t> row_seq, tables;
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    const ops::AttentionSeq& a = seqs[s];
    const int64_t n_blocks = (a.pos0 + a.n_tokens + cache.block_size - 1) / cache.block_size;
    desc.push_back(SeqDesc{static_cast<int32_t>(a.first_row), static_cast<int32_t>(a.n_tokens),
                           static_cast<int32_t>(a.pos0), static_cast<int32_t>(tables.size())});
    tables.insert(tables.end(), a.block_table, a.block_table + n_blocks);
    n_rows = std::max(n_rows, a.first_row + a.n_tokens);
  }
  if (n_rows == 0) return;
  row_seq.assign(static_cast<size_t>(n_rows), -1);
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t t = 0; t < seqs[s].n_tokens; ++t) row_seq[seqs[s].first_row + t] = static_cast<int32_t>(s);
  }
  const SeqDesc* d_desc = stage_array(desc.data(), n_seqs, "attention");
  const int32_t* d_row_seq = stage_array(row_seq.data(), n_rows, "attention");
  const int32_t* d_tables = stage_array(tables.data(), static_cast<int64_t>(tables.size()), "attention");
  const int epl = head_dim <= 64 ? 2 : head_dim <= 128 ? 4 : 8;
  const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_head));
  const auto group = static_cast<int>(n_head / n_head_kv);
  if (cache.type == ops::KvType::F16) {
    launch_attention<__half>(epl, grid, stream_, q, cache.k, cache.v, d_desc, d_row_seq, d_tables,
                             static_cast<int>(n_head), group, static_cast<int>(head_dim), cache.n_kv_dim, bs_log2,
                             scale, out);
  } else {
    launch_attention<float>(epl, grid, stream_, q, cache.k, cache.v, d_desc, d_row_seq, d_tables,
                            static_cast<int>(n_head), group, static_cast<int>(head_dim), cache.n_kv_dim, bs_log2,
                            scale, out);
  }
  HEARTH_CUDA_LAUNCHED("attention");
}

}  // namespace hearth::cuda

// CudaBackend::attention: causal grouped-query attention over the paged KV cache.
// Decode: one block per (query row, KV head with up to four of its query heads, range of
// keys: split-K, merged by the range that finishes last or a second kernel); its warps
// take batches of consecutive keys of the range (each batch's K and V rows loaded together,
// the first batch's earlier-step keys before waiting for the kernel before) and keep an
// online softmax (running max, sum and weighted value sum, each lane holding head_dim / 32
// dimensions); the warps' partial results are merged at the end. Keys are read through
// the sequence's block table.
// f32 arithmetic throughout (scores and softmax in f32 with expf).
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_attention.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_kv_q8.cuh"
#include "core/error.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

constexpr int kAttnWarps = 8;


// EPL: dimensions per lane (head_dim <= 32 * EPL). Block (row, KV head and chunk of up to
// kDecodeHeads of its query heads, key range): each K and V row is read once for all of
// the chunk's query heads (grouped-query attention reads a KV head for `group` queries).
constexpr int kDecodeHeads = 4;

// out for heads h0 .. h0 + ng - 1 of `row` from their n_split (<= kMaxSplits) key
// ranges' partial results [max, sum, acc[head_dim]], by the whole block: the ranges'
// maxima and sums read in one parallel pass, each head's weights exp(m_z - M) and 1 / L
// by one thread from shared memory, then every (head, dimension) output by one thread
// summing the ranges in order. Reads go past L1: other blocks of the same launch may
// have written the partial results.
constexpr int kMaxSplits = 128;
// Key ranges of the scalar and the tensor-core decode kernels, at most (the warp decode
// kernel takes up to kMaxSplits).
constexpr int kSplitsTc = 64;
__device__ void merge_splits(const float* part, int row, int h0, int ng, int n_split, int n_head, int head_dim,
                             float* __restrict__ out) {
  __shared__ float sf[kDecodeHeads][kMaxSplits], sl[kDecodeHeads][kMaxSplits], sinv[kDecodeHeads];
  const int64_t stride = head_dim + 2;
  const float* base = part + (static_cast<int64_t>(row) * n_head + h0) * n_split * stride;
  for (int i = threadIdx.x; i < ng * n_split; i += blockDim.x) {
    const int g = i / n_split, z = i % n_split;
    sf[g][z] = __ldcg(base + (static_cast<int64_t>(g) * n_split + z) * stride);
    sl[g][z] = __ldcg(base + (static_cast<int64_t>(g) * n_split + z) * stride + 1);
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < ng) {
    const int g = threadIdx.x;
    float M = -INFINITY;
    for (int z = 0; z < n_split; ++z) M = fmaxf(M, sf[g][z]);
    float L = 0.0f;
    for (int z = 0; z < n_split; ++z) {
      const float f = sf[g][z] == -INFINITY ? 0.0f : expf(sf[g][z] - M);
      sf[g][z] = f;
      L += sl[g][z] * f;
    }
    sinv[g] = 1.0f / L;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < ng * head_dim; i += blockDim.x) {
    const int g = i / head_dim, d = i % head_dim;
    const float* pp = base + static_cast<int64_t>(g) * n_split * stride + 2 + d;
    float s = 0.0f;
#pragma unroll 8
    for (int z = 0; z < n_split; ++z) s += __ldcg(pp + z * stride) * sf[g][z];
    out[(static_cast<int64_t>(row) * n_head + h0 + g) * head_dim + d] = s * sinv[g];
  }
}

// Dimensions of a head row per lane: lane + 32 e (e < EPL) in general; with kVec (head_dim
// == 32 * EPL) the EPL consecutive ones from lane * EPL, loaded as one vector.
template <bool kVec, int EPL>
__device__ __forceinline__ int lane_dim(int lane, int e) {
  return kVec ? lane * EPL + e : lane + 32 * e;
}
template <int EPL>
__device__ __forceinline__ void load_dims(const float* p, int lane, float* out) {
  if constexpr (EPL == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p + lane * 2);
    out[0] = v.x, out[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < EPL; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + lane * EPL + i);
      out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
    }
  }
}
template <int EPL>
__device__ __forceinline__ void load_dims(const __half* p, int lane, float* out) {
  __half2 h[EPL / 2];
  if constexpr (EPL == 2) {
    *reinterpret_cast<uint32_t*>(h) = *reinterpret_cast<const uint32_t*>(p + lane * 2);
  } else if constexpr (EPL == 4) {
    *reinterpret_cast<uint2*>(h) = *reinterpret_cast<const uint2*>(p + lane * 4);
  } else {
    *reinterpret_cast<uint4*>(h) = *reinterpret_cast<const uint4*>(p + lane * 8);
  }
#pragma unroll
  for (int i = 0; i < EPL / 2; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x, out[2 * i + 1] = f.y;
  }
}

// Keys per warp and batch: the K and V rows of a batch are loaded together (one latency
// for the batch instead of one per key) and their scores reduced together.
template <int EPL>
constexpr int kDecodeBatch = 32 / EPL;

template <class T, int EPL, bool kVec>
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const float* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                     const SeqDesc* __restrict__ seqs, const int32_t* __restrict__ row_seq,
                     const int32_t* __restrict__ tables, int n_head, int group, int head_dim, int64_t kv_stride,
                     int bs_log2, float scale, float* __restrict__ out, unsigned* __restrict__ counters,
                     float* __restrict__ part) {
  constexpr int G = kDecodeHeads, KB = kDecodeBatch<EPL>;
  const int row = blockIdx.x;
  const int n_chunks = (group + G - 1) / G;
  const int hkv = static_cast<int>(blockIdx.y) / n_chunks, chunk = static_cast<int>(blockIdx.y) % n_chunks;
  const int h0 = hkv * group + chunk * G;
  const int ng = min(G, group - chunk * G);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Before the wait for the kernel before (the RoPE + KV store of this step's rows): the
  // batch description and block tables (staged before the step's first kernel) and the
  // keys of earlier steps (positions < pos0), which no kernel of this step writes. Every
  // kernel before the one before has finished when this one starts (each waits before
  // it lets the next one start; launch.cuh). This step's keys are loaded after the wait.
  const int si = row_seq[row];
  if (si < 0) return;  // a row of no sequence (the whole block leaves)
  const SeqDesc sd = seqs[si];
  const int n_keys = sd.pos0 + (row - sd.first_row) + 1;
  const int32_t* table = tables + sd.table_off;
  const int64_t kv_off = static_cast<int64_t>(hkv) * head_dim / kv_unit<T>;  // (kv_stride too: in units of T)
  const int bs_mask = (1 << bs_log2) - 1;
  // Split over keys (part != null): this row's keys in gridDim.z ranges of equal length
  // (the range count fixed per context bucket, so a recorded step's launch serves every
  // length of the bucket); this block takes range blockIdx.z. Warp w takes batches of KB
  // consecutive keys starting at k_begin + KB w, KB (kAttnWarps) apart.
  const int row_split = (n_keys + static_cast<int>(gridDim.z) - 1) / static_cast<int>(gridDim.z);
  const int k_begin = part != nullptr ? static_cast<int>(blockIdx.z) * row_split : 0;
  const int k_end = part != nullptr ? min(n_keys, k_begin + row_split) : n_keys;
  float kv[KB][EPL], vv[KB][EPL];
  // Keys [max(base, lo), min(base + KB, hi)) of the batch at base into kv / vv.
  auto load_batch = [&](int base, int lo, int hi) {
#pragma unroll
    for (int i = 0; i < KB; ++i) {
      const int j = base + i;
      if (j < lo || j >= hi) continue;
      const int64_t r = static_cast<int64_t>(table[j >> bs_log2]) * (bs_mask + 1) + (j & bs_mask);
      const T* kp = kc + r * kv_stride + kv_off;
      const T* vp = vc + r * kv_stride + kv_off;
      if constexpr (kVec) {
        load_dims<EPL>(kp, lane, kv[i]);
        load_dims<EPL>(vp, lane, vv[i]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
          const int d = lane + 32 * e;
          kv[i][e] = d < head_dim ? kv_at(kp, d) : 0.0f;
          vv[i][e] = d < head_dim ? kv_at(vp, d) : 0.0f;
        }
      }
    }
  };
  const int first = k_begin + KB * warp;
  load_batch(first, 0, min(k_end, sd.pos0));
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  load_batch(first, sd.pos0, k_end);
  float qv[G][EPL], acc[G][EPL], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float* qr = q + (static_cast<int64_t>(row) * n_head + h0 + min(g, ng - 1)) * head_dim;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const int d = lane_dim<kVec, EPL>(lane, e);
      qv[g][e] = d < head_dim && g < ng ? qr[d] : 0.0f;
      acc[g][e] = 0.0f;
    }
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  for (int base = first; base < k_end; base += KB * kAttnWarps) {
    if (base != first) load_batch(base, 0, k_end);
    const int nb = min(KB, k_end - base);  // keys of this batch (warp-uniform)
    // The batch's scores for every head: partial dot products, then the warp sums
    // (independent of each other, so their shuffles overlap).
    float s[G][KB];
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int i = 0; i < KB; ++i) {
        float t = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) t += qv[g][e] * kv[i][e];
        s[g][i] = t;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int i = 0; i < KB; ++i) s[g][i] += __shfl_xor_sync(0xffffffffu, s[g][i], o);
      }
    }
    // Online softmax, one key at a time in key order (the arithmetic of a key-by-key loop).
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= ng) break;
#pragma unroll
      for (int i = 0; i < KB; ++i) {
        if (i >= nb) break;
        const float sc = s[g][i] * scale;
        const float m_new = fmaxf(m[g], sc);
        const float corr = expf(m[g] - m_new), p = expf(sc - m_new);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + p * vv[i][e];
        m[g] = m_new;
      }
    }
  }
  __shared__ float sm[G][kAttnWarps], sl[G][kAttnWarps];
  __shared__ float sacc[G][kAttnWarps][32 * EPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      sm[g][warp] = m[g];
      sl[g][warp] = l[g];
    }
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
      const int d = lane_dim<kVec, EPL>(lane, e);
      if (d < 32 * EPL) sacc[g][warp][d] = acc[g][e];
    }
  }
  __syncthreads();
  for (int g = 0; g < ng; ++g) {
    const int h = h0 + g;
    float M = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm[g][w]);
    float L = 0.0f;
    float f[kAttnWarps];
    for (int w = 0; w < kAttnWarps; ++w) {
      f[w] = sm[g][w] == -INFINITY ? 0.0f : expf(sm[g][w] - M);
      L += sl[g][w] * f[w];
    }
    if (part != nullptr) {
      // Partial result of this key range: [max, sum, unnormalised acc[head_dim]].
      const int64_t stride = head_dim + 2;
      float* pp = part + ((static_cast<int64_t>(row) * n_head + h) * gridDim.z + blockIdx.z) * stride;
      if (threadIdx.x == 0) {
        pp[0] = M;
        pp[1] = L;
      }
      for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float s = 0.0f;
        for (int w = 0; w < kAttnWarps; ++w) s += sacc[g][w][d] * f[w];
        pp[2 + d] = s;
      }
      continue;
    }
    const float inv = 1.0f / L;
    float* o = out + (static_cast<int64_t>(row) * n_head + h) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
      float s = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) s += sacc[g][w][d] * f[w];
      o[d] = s * inv;
    }
  }
  if (part == nullptr || counters == nullptr) return;
  // The last of the key ranges of this (row, block of heads) to finish merges them all
  // (the same arithmetic and order as attention_combine_kernel) and resets the counter.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  unsigned* counter = counters + static_cast<int64_t>(row) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.z - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_splits(part, row, h0, ng, static_cast<int>(gridDim.z), n_head, head_dim, out);
  if (threadIdx.x == 0) *counter = 0u;
}

// Merges the key ranges' partial results of one (row, head): block (row, head).
__global__ void attention_combine_kernel(const float* __restrict__ part, const int32_t* __restrict__ row_seq,
                                         int n_split, int n_head, int head_dim, float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int row = blockIdx.x, h = blockIdx.y;
  if (row_seq[row] < 0) return;
  merge_splits(part, row, h, 1, n_split, n_head, head_dim, out);
}

template <class T, int EPL>
void launch_attention_t(dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v,
                        const SeqDesc* seqs, const int32_t* row_seq, const int32_t* tables, int n_head, int group,
                        int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out, unsigned* counters,
                        float* part) {
  const auto* kc = static_cast<const T*>(k);
  const auto* vc = static_cast<const T*>(v);
  // Vector loads of a lane's dimensions when they are consecutive and aligned (f32 and
  // f16; a q8_0 row's lanes read one byte each of a block, dimension lane + 32 e).
  const int threads = kAttnWarps * 32;
  if constexpr (std::is_same_v<T, KvQ8Block>) {
    ::hearth::cuda::launch_pdl(attention_kernel<T, EPL, false>, grid, threads, 0, st, q, kc, vc, seqs, row_seq, tables,
                               n_head, group, head_dim, kv_stride, bs_log2, scale, out, counters, part);
  } else {
    const bool vec = head_dim == 32 * EPL && kv_stride % EPL == 0 &&
                     reinterpret_cast<uintptr_t>(k) % (EPL * sizeof(T)) == 0 &&
                     reinterpret_cast<uintptr_t>(v) % (EPL * sizeof(T)) == 0;
    if (vec) {
      ::hearth::cuda::launch_pdl(attention_kernel<T, EPL, true>, grid, threads, 0, st, q, kc, vc, seqs, row_seq,
                                 tables, n_head, group, head_dim, kv_stride, bs_log2, scale, out, counters, part);
    } else {
      ::hearth::cuda::launch_pdl(attention_kernel<T, EPL, false>, grid, threads, 0, st, q, kc, vc, seqs, row_seq,
                                 tables, n_head, group, head_dim, kv_stride, bs_log2, scale, out, counters, part);
    }
  }
}

template <class T>
void launch_attention(int epl, dim3 grid, cudaStream_t st, const float* q, const void* k, const void* v,
                      const SeqDesc* seqs, const int32_t* row_seq, const int32_t* tables, int n_head, int group,
                      int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out, unsigned* counters,
                      float* part) {
  switch (epl) {
    case 2:
      launch_attention_t<T, 2>(grid, st, q, k, v, seqs, row_seq, tables, n_head, group, head_dim, kv_stride, bs_log2,
                               scale, out, counters, part);
      break;
    case 4:
      launch_attention_t<T, 4>(grid, st, q, k, v, seqs, row_seq, tables, n_head, group, head_dim, kv_stride, bs_log2,
                               scale, out, counters, part);
      break;
    default:
      launch_attention_t<T, 8>(grid, st, q, k, v, seqs, row_seq, tables, n_head, group, head_dim, kv_stride, bs_log2,
                               scale, out, counters, part);
      break;
  }
}

}  // namespace

void CudaBackend::step_attention_prepare(const ops::StepDesc& d) {
  // The front of the step's device arena: per row its sequence when that has one row
  // (else -1: the decode kernels' rows in a step with prompts), then a one-row tile per
  // such sequence (the tensor-core decode kernel's). Sizes depend on the counts only.
  StepAttn a;
  const int64_t n = d.n_tokens(), ns = d.n_seqs();
  const ops::StepSeq* seqs = d.seqs();
  const int32_t* row_seq = d.row_seq();
  for (int64_t s = 0; s < ns; ++s) {
    a.max_keys = std::max<int64_t>(a.max_keys, int64_t{seqs[s].pos0} + seqs[s].n_tokens);
    a.n_rows = std::max<int64_t>(a.n_rows, int64_t{seqs[s].first_row} + seqs[s].n_tokens);
    a.rows_in += seqs[s].n_tokens;
    if (seqs[s].n_tokens == 1) ++a.n_decode;
    if (seqs[s].n_tokens > 1) a.any_multi = true;
  }
  constexpr size_t kAlign = 16;
  const size_t rows_bytes = (sizeof(int32_t) * static_cast<size_t>(n) + kAlign - 1) / kAlign * kAlign;
  a.row_seq_decode = 0;
  a.decode_tiles = rows_bytes;
  step_front_.assign(rows_bytes + sizeof(Tile) * static_cast<size_t>(a.n_decode), 0);
  auto* rs = reinterpret_cast<int32_t*>(step_front_.data());
  for (int64_t r = 0; r < n; ++r) rs[r] = row_seq[r] >= 0 && seqs[row_seq[r]].n_tokens == 1 ? row_seq[r] : -1;
  auto* tiles = reinterpret_cast<Tile*>(step_front_.data() + a.decode_tiles);
  int64_t t = 0;
  for (int64_t s = 0; s < ns; ++s) {
    if (seqs[s].n_tokens == 1) tiles[t++] = Tile{static_cast<int32_t>(s), 0, 1};
  }
  step_attn_ = a;
}

void CudaBackend::attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                            int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) {
  OpTimer timer(rt_, "attention");
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
  // The batch description on the device: per sequence its rows, start and block table
  // offset; per query row its sequence; the block tables. For the step description's
  // own sequences (begin_step(const StepDesc&)) all of it is in the step's uploaded arena,
  // derived once per step (step_attention_prepare): nothing is built or copied here,
  // whatever the layer. Other calls (tests, a step without a description) build it now and
  // stage it, each block table padded to the context bucket (the longest context rounded
  // up to a power of two, at least 64 keys) so that the staged sizes change only when the
  // bucket does.
  const ops::StepDesc* step = rt_.step();
  const bool from_step = step != nullptr && seqs == step->attn_seqs() && n_seqs == step->n_seqs() &&
                         step->block_size() == cache.block_size;
  const SeqDesc* d_desc = nullptr;
  const int32_t* d_tables = nullptr;
  int64_t max_keys = 0, n_rows = 0;
  std::vector<SeqDesc> desc;
  std::vector<int32_t> row_seq;
  if (from_step) {
    d_desc = reinterpret_cast<const SeqDesc*>(rt_.step_desc_arena() + step->offsets().seqs);
    d_tables = reinterpret_cast<const int32_t*>(rt_.step_desc_arena() + step->offsets().tables);
    max_keys = step_attn_.max_keys;
    n_rows = step_attn_.n_rows;
  } else {
    for (int64_t s = 0; s < n_seqs; ++s) max_keys = std::max(max_keys, seqs[s].pos0 + seqs[s].n_tokens);
  }
  int64_t bucket_keys = 64;
  while (bucket_keys < max_keys) bucket_keys *= 2;
  if (!from_step) {
    const int64_t table_stride = (bucket_keys + cache.block_size - 1) / cache.block_size;
    std::vector<int32_t> tables(static_cast<size_t>(n_seqs * table_stride), 0);
    for (int64_t s = 0; s < n_seqs; ++s) {
      const ops::AttentionSeq& a = seqs[s];
      const int64_t n_blocks = (a.pos0 + a.n_tokens + cache.block_size - 1) / cache.block_size;
      desc.push_back(SeqDesc{static_cast<int32_t>(a.first_row), static_cast<int32_t>(a.n_tokens),
                             static_cast<int32_t>(a.pos0), static_cast<int32_t>(s * table_stride),
                             static_cast<int32_t>(n_blocks)});
      std::copy(a.block_table, a.block_table + n_blocks, tables.begin() + s * table_stride);
      n_rows = std::max(n_rows, a.first_row + a.n_tokens);
    }
    if (n_rows == 0) return;
    row_seq.assign(static_cast<size_t>(n_rows), -1);
    for (int64_t s = 0; s < n_seqs; ++s) {
      for (int64_t t = 0; t < seqs[s].n_tokens; ++t) row_seq[seqs[s].first_row + t] = static_cast<int32_t>(s);
    }
    d_desc = rt_.stage_array(desc.data(), n_seqs, "attention");
    d_tables = rt_.stage_array(tables.data(), static_cast<int64_t>(tables.size()), "attention");
  }
  if (n_rows == 0) return;
  const int epl = head_dim <= 64 ? 2 : head_dim <= 128 ? 4 : 8;
  const auto group = static_cast<int>(n_head / n_head_kv);
  // Deterministic: every row through the prompt kernels (one row of a sequence is a tile
  // of one), whatever else the step holds: a row's sums then depend on its own keys only.
  bool decode_only = false;  // the decode kernels below take only the one-row sequences' rows
  bool prompt = deterministic_ || (from_step && step_attn_.any_multi);
  for (int64_t s = 0; s < n_seqs && !from_step; ++s) prompt = prompt || seqs[s].n_tokens > 1;
  // q8_0 rows are indexed in blocks of 32 values by the kernels (cuda_kv_q8.cuh).
  const bool q8 = cache.type == ops::KvType::Q8_0;
  if (q8 && (head_dim % ops::kQ8Block != 0 || cache.n_kv_dim % ops::kQ8Block != 0)) {
    fail(ErrorKind::kInvalidInput, "cuda", "attention: a q8_0 cache needs head and row sizes that are multiples of 32");
  }
  const int64_t kv_stride = q8 ? cache.n_kv_dim / ops::kQ8Block : cache.n_kv_dim;
  const bool tc_kv = cache.type == ops::KvType::F16 || q8;
  const bool tc = prompt && tc_attention_ && tc_kv &&
                  prefill_tc_supported(head_dim, group, cache.k, cache.v, cache.n_kv_dim);
  if (prompt && (tc || group <= kPrefillQ)) {
    // Tiles of the sequences that bring several query rows (with the scalar kernel: of
    // every sequence); on the tensor cores the one-row sequences go to the decode kernel
    // below, as in a step without prompts.
    timer.rename("attention prefill");
    const int rows_per_tile = tc ? kTcQueries / group : kPrefillQ / group;
    const bool skip_single = tc && !deterministic_;
    // The step's tiles are staged once per step and tile height (every layer reuses them
    // while the ring holds them); other calls' are staged each time.
    StepTiles& st = step_tiles_;
    const bool cached = from_step && st.dev != nullptr && st.serial == step->serial() &&
                        st.epoch == rt_.stage_epoch() && st.rows_per_tile == rows_per_tile &&
                        st.skip_single == skip_single;
    const Tile* d_tiles = cached ? static_cast<const Tile*>(st.dev) : nullptr;
    int64_t n_ptiles = cached ? st.n : 0;
    if (!cached) {
      std::vector<Tile> tiles;
      for (int64_t s = 0; s < n_seqs; ++s) {
        if (skip_single && seqs[s].n_tokens == 1) continue;
        for (int64_t r = 0; r < seqs[s].n_tokens; r += rows_per_tile) {
          tiles.push_back(Tile{static_cast<int32_t>(s), static_cast<int32_t>(r),
                               static_cast<int32_t>(std::min<int64_t>(rows_per_tile, seqs[s].n_tokens - r))});
        }
      }
      n_ptiles = static_cast<int64_t>(tiles.size());
      d_tiles = rt_.stage_array(tiles.data(), n_ptiles, "attention");
      if (from_step) st = StepTiles{step->serial(), rt_.stage_epoch(), rows_per_tile, skip_single, d_tiles, n_ptiles};
    }
    const dim3 pgrid(static_cast<unsigned>(n_ptiles), static_cast<unsigned>(n_head_kv));
    if (!rt_.skip_launch()) {
      if (tc) {
        launch_prefill_tc(pgrid, stream_, q, cache.k, cache.v, q8, d_desc, d_tiles, d_tables, static_cast<int>(n_head),
                          group, static_cast<int>(head_dim), kv_stride, bs_log2, scale, out);
      } else {
        launch_prefill_scalar(cache.type, epl, pgrid, stream_, q, cache.k, cache.v, d_desc, d_tiles, d_tables,
                              static_cast<int>(n_head), group, static_cast<int>(head_dim),
                              q8 ? kv_stride : cache.n_kv_dim, bs_log2, scale, out);
      }
      HEARTH_CUDA_LAUNCHED("attention");
    }
    if (!tc || deterministic_) return;
    // The decode kernel takes the one-row sequences' rows only.
    decode_only = true;
    if (from_step) {
      if (step_attn_.n_decode == 0) return;
    } else {
      bool any = false;
      for (int64_t s = 0; s < n_seqs; ++s) {
        if (seqs[s].n_tokens == 1) {
          any = true;
          continue;
        }
        for (int64_t t = 0; t < seqs[s].n_tokens; ++t) row_seq[seqs[s].first_row + t] = -1;
      }
      if (!any) return;
    }
  }
  // Per row its sequence (-1: none, or a row the prompt kernel above took).
  const int32_t* d_row_seq = nullptr;
  int64_t rows_in = 0;  // rows with a sequence
  if (from_step) {
    d_row_seq = decode_only ? reinterpret_cast<const int32_t*>(rt_.step_arena() + step_attn_.row_seq_decode)
                            : reinterpret_cast<const int32_t*>(rt_.step_desc_arena() + step->offsets().row_seq);
    rows_in = decode_only ? step_attn_.n_decode : step_attn_.rows_in;
  } else {
    d_row_seq = rt_.stage_array(row_seq.data(), n_rows, "attention");
    rows_in = std::count_if(row_seq.begin(), row_seq.end(), [](int32_t r) { return r >= 0; });
  }
  int64_t decode_rows = 0;
  if (from_step) {
    decode_rows = step_attn_.n_decode;
  } else {
    for (int64_t s = 0; s < n_seqs; ++s) decode_rows += seqs[s].n_tokens == 1 ? 1 : 0;
  }
  if (!deterministic_ && tc_attention_ && tc_kv &&
      (bucket_keys >= tc_decode_min_keys_ || decode_rows >= tc_decode_min_rows_) &&
      prefill_tc_supported(head_dim, group, cache.k, cache.v, cache.n_kv_dim)) {
    // Long contexts, and batches of decode rows: the one-row sequences on the tensor cores,
    // their keys split over ranges of at least tc_decode_range_keys_ (about
    // tc_decode_blocks_ blocks in all), merged by attention_combine_kernel. (The scalar kernel below spends ~200 us a
    // layer on the 8B's 32k keys, and ~300 us on 64 rows of 640 keys: ~180 registers a
    // thread hold one block an SM, each warp a chain of shuffles and exps per key.)
    std::vector<Tile> dt;
    if (!from_step) {
      for (int64_t s = 0; s < n_seqs; ++s) {
        if (seqs[s].n_tokens == 1) dt.push_back(Tile{static_cast<int32_t>(s), 0, 1});
      }
    }
    const int64_t n_tiles = from_step ? step_attn_.n_decode : static_cast<int64_t>(dt.size());
    if (n_tiles == 0) return;  // (every row belongs to a prompt, done above)
    const Tile* d_tiles = from_step ? reinterpret_cast<const Tile*>(rt_.step_arena() + step_attn_.decode_tiles)
                                    : rt_.stage_array(dt.data(), n_tiles, "attention");
    if (decode_warp_ && decode_warp_supported(head_dim, group, q8, cache.k, cache.v, cache.n_kv_dim)) {
      // Warps that share only the query vectors (cuda_attention_decode.cu), their key
      // ranges filling the GPU's resident blocks once (at most kMaxSplits, none shorter
      // than tc_decode_range_keys_).
      const int64_t wave = tc_decode_blocks_ > 0 ? tc_decode_blocks_
                                                 : decode_warp_resident_blocks(static_cast<int>(head_dim), group, q8, decode_warp_stages_,
                                                                               decode_warp_dot_);
      const int64_t want = std::max<int64_t>(1, wave / (n_tiles * n_head_kv));
      const int64_t n_split =
          std::max<int64_t>(1, std::min({int64_t{kMaxSplits}, bucket_keys / tc_decode_range_keys_, want}));
      float* part = static_cast<float*>(
          rt_.scratch(4, sizeof(float) * static_cast<size_t>(n_rows * n_head * n_split * (head_dim + 2)), "attention"));
      if (rt_.skip_launch()) return;
      launch_decode_warp(dim3(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_head_kv),
                              static_cast<unsigned>(n_split)),
                         stream_, q, cache.k, cache.v, q8, d_desc, d_tiles, d_tables, static_cast<int>(n_head), group,
                         static_cast<int>(head_dim), cache.n_kv_dim, bs_log2, scale, part, decode_warp_stages_,
                         decode_warp_dot_);
      HEARTH_CUDA_LAUNCHED("attention");
      ::hearth::cuda::launch_pdl(attention_combine_kernel, dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_head)), 128, 0, stream_, part, d_row_seq, static_cast<int>(n_split), static_cast<int>(n_head), static_cast<int>(head_dim), out);
      HEARTH_CUDA_LAUNCHED("attention");
      return;
    }
    // Key ranges: as many as fill the GPU's resident blocks once (one wave; measured on the
    // H200: a single 32k row of the 8B in 32 ranges 52 us against 68 in 64, 64 rows of 640
    // keys unsplit 63-72 us against 74-127 in 2 ranges), none shorter than
    // tc_decode_range_keys_. (--tune cuda.tc_decode_blocks=N sets the wave instead.)
    const int mode = group <= kTcDecodeGroup ? tc_decode_mode_ : 0;
    // q8_0 in the decode variant: raw copies in flight (cuda_attention_tc.cu), 0: staged.
    const int q8_raw = q8 && mode > 0 ? tc_decode_q8_raw_stages(head_dim, cache.n_kv_dim, mode) : 0;
    // The wave is the staged variant's also when the raw one runs: the key ranges, and so
    // the order the partial results are combined in, must not depend on the variant (raw
    // and staged give the same bits; with head size 64 their residency differs).
    const int64_t wave =
        tc_decode_blocks_ > 0 ? tc_decode_blocks_
        : mode > 0            ? tc_decode_resident_blocks(static_cast<int>(head_dim), mode, 0)
                              : 1024;
    const int64_t want = std::max<int64_t>(1, wave / (n_tiles * n_head_kv));
    const int64_t n_split = std::max<int64_t>(1, std::min({int64_t{kSplitsTc}, bucket_keys / tc_decode_range_keys_, want}));
    float* part = static_cast<float*>(
        rt_.scratch(4, sizeof(float) * static_cast<size_t>(n_rows * n_head * n_split * (head_dim + 2)), "attention"));
    if (rt_.skip_launch()) {
      return;
    }
    launch_prefill_tc(dim3(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_head_kv),
                           static_cast<unsigned>(n_split)),
                      stream_, q, cache.k, cache.v, q8, d_desc, d_tiles, d_tables, static_cast<int>(n_head), group,
                      static_cast<int>(head_dim), kv_stride, bs_log2, scale, out, part, mode, q8_raw);
    HEARTH_CUDA_LAUNCHED("attention");
    ::hearth::cuda::launch_pdl(attention_combine_kernel, dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_head)), 128, 0, stream_, part, d_row_seq, static_cast<int>(n_split), static_cast<int>(n_head), static_cast<int>(head_dim), out);
    HEARTH_CUDA_LAUNCHED("attention");
    return;
  }
  // Decode: the keys are split over blocks of kSplitKeys (at most kMaxSplits of them per
  // row and head), whose partial softmax results one more kernel merges; a short
  // context runs in one block per row and head.
  constexpr int64_t kSplitKeys = 64;
  // Blocks along y: each KV head's query heads in chunks of kDecodeHeads.
  const int64_t n_chunks = (group + kDecodeHeads - 1) / kDecodeHeads;
  const int64_t head_blocks = n_head_kv * n_chunks;
  // Enough splits to give the GPU about 1,024 blocks, no more (each split adds a partial
  // result to write and merge).
  const int64_t rows_busy = std::max<int64_t>(1, rows_in);
  const int64_t want = std::max<int64_t>(1, (1024 + rows_busy * head_blocks - 1) / (rows_busy * head_blocks));
  // (From the bucket, not the exact length: each row divides its own keys among them.)
  // (Deterministic: one range, the row's keys in order, whatever the batch.)
  const int64_t n_split = deterministic_ ? 1 : std::min({int64_t{kSplitsTc}, bucket_keys / kSplitKeys, want});
  float* part = nullptr;
  if (n_split > 1) {
    part = static_cast<float*>(
        rt_.scratch(4, sizeof(float) * static_cast<size_t>(n_rows * n_head * n_split * (head_dim + 2)), "attention"));
  }
  if (rt_.skip_launch()) {
    return;
  }
  // The last key range of each (row, block of heads) merges them (fuse_; else one more kernel).
  unsigned* counters = part != nullptr && fuse_ && n_rows * head_blocks <= kAttnCounters ? attn_counters_ : nullptr;
  const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(head_blocks), static_cast<unsigned>(n_split));
  if (q8) {
    launch_attention<KvQ8Block>(epl, grid, stream_, q, cache.k, cache.v, d_desc, d_row_seq, d_tables,
                                static_cast<int>(n_head), group, static_cast<int>(head_dim), kv_stride, bs_log2,
                                scale, out, counters, part);
  } else if (cache.type == ops::KvType::F16) {
    launch_attention<__half>(epl, grid, stream_, q, cache.k, cache.v, d_desc, d_row_seq, d_tables,
                             static_cast<int>(n_head), group, static_cast<int>(head_dim), cache.n_kv_dim, bs_log2,
                             scale, out, counters, part);
  } else {
    launch_attention<float>(epl, grid, stream_, q, cache.k, cache.v, d_desc, d_row_seq, d_tables,
                            static_cast<int>(n_head), group, static_cast<int>(head_dim), cache.n_kv_dim, bs_log2,
                            scale, out, counters, part);
  }
  HEARTH_CUDA_LAUNCHED("attention");
  if (part != nullptr && counters == nullptr) {
    ::hearth::cuda::launch_pdl(attention_combine_kernel, dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_head)), 128, 0, stream_, part, d_row_seq, static_cast<int>(n_split), static_cast<int>(n_head), static_cast<int>(head_dim), out);
  }
  HEARTH_CUDA_LAUNCHED("attention");
}

}  // namespace hearth::cuda

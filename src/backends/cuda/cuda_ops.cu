// CudaBackend element-wise and row operations: bias, RMS norms, RoPE, KV writes,
// SwiGLU, sigmoid gates, add / copy / fill, and the row gathers and weighted
// scatter-adds of routed experts. Memory-bound and simple: grid-stride loops, one
// block per row where a row reduction is needed.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kv_q8.cuh"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/quant_cuda.h"
#include "core/error.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

#define GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

__global__ void add_bias_kernel(float* x, const float* b, int64_t n_cols, int64_t total) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, total) x[i] += b[i % n_cols];
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n) x[i] += y[i];
}

__global__ void fill_kernel(float* x, float v, int64_t n) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n) x[i] = v;
}

__global__ void swiglu_kernel(const float* g, const float* u, int64_t n, float* out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n) out[i] = silu_f(g[i]) * u[i];
}

// Value v of lane `lane` of a warp that holds one chunk of 32 values, quantized for
// q8_matvec as its quantize_chunks does it (quant_q8.cu): d = max |v| / 127, q = round(v /
// d) ties to even, into *q; lane 0 writes the chunk's (d, d * sum q) to *d_out.
__device__ __forceinline__ void quantize_in_warp(float v, int lane, int8_t* q_out, float2* d_out) {
  float amax = fabsf(v);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float d = amax / 127.f;
  const int q = amax == 0.f ? 0 : __float2int_rn(v / d);
  int sum = q;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  *q_out = static_cast<int8_t>(q);
  if (lane == 0) *d_out = make_float2(d, d * static_cast<float>(sum));
}

// swiglu_kernel whose output is also quantized for q8_matvec, one warp per chunk of 32
// values (quantize_in_warp); the same bits. out may alias g.
__global__ void __launch_bounds__(256)
    swiglu_q8_kernel(const float* g, const float* u, int64_t n_chunks, float* out, int8_t* __restrict__ xq,
                     float2* __restrict__ xd) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (chunk >= n_chunks) return;
  const int lane = threadIdx.x & 31;
  const int64_t i = chunk * 32 + lane;
  const float v = silu_f(g[i]) * u[i];
  out[i] = v;
  quantize_in_warp(v, lane, xq + i, xd + chunk);
}

__global__ void sigmoid_mul_kernel(float* x, const float* g, int64_t n) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n) x[i] *= sigmoid_f(g[i]);
}

__global__ void sigmoid_scale_rows_kernel(float* x, const float* g, int64_t n_cols, int64_t n) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n) x[i] *= sigmoid_f(g[i / n_cols]);
}

// One block per row: y = x / sqrt(mean(x^2) + eps) * w.
__global__ void rms_norm_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

// The same for rows of a multiple of 4 floats (16-byte aligned), each thread holding
// up to kPer float4 of its row in registers: x read once, 16-byte loads.
template <int kPer>
__global__ void rms_norm_vec_kernel(const float4* __restrict__ x, const float4* __restrict__ w, int64_t n4, float eps,
                                    float4* __restrict__ y) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  const float4* xr = x + blockIdx.x * n4;
  float4* yr = y + blockIdx.x * n4;
  float4 v[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    v[k] = i < n4 ? xr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  }
  ss = block_sum(ss, red);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(4 * n4) + eps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < n4) {
      const float4 g = w[i];
      yr[i] = make_float4(v[k].x * scale * g.x, v[k].y * scale * g.y, v[k].z * scale * g.z, v[k].w * scale * g.w);
    }
  }
}

// rms_norm_vec_kernel after x += y (the residual add): x written back, out = the norm.
// The sums in rms_norm_vec_kernel's order: the same values as add then rms_norm.
// kQ8 (n4 a multiple of 8): out also quantized for q8_matvec, as its quantize_chunks
// does it (quant_q8.cu): per 32 values (8 threads' float4) d = max |v| / 127,
// q = round(v / d) ties to even, xd = (d, d * sum q); the same bits.
// y as the weighted sum of a MoE layer's pair rows (MoePairs: y row t = sum over k < per
// of wts[t * per + k] * pairs row t * per + k, in k order as moe_combine_kernel sums them),
// also written to y_out: the experts' combine, the residual add and the norm in one kernel.
struct MoePairs {
  const float4* pairs = nullptr;
  const float* wts = nullptr;
  int per = 0;
  float4* y_out = nullptr;
};

template <int kPer, bool kQ8 = false, bool kPairs = false>
__global__ void add_rms_norm_vec_kernel(float4* __restrict__ x, const float4* y, const float4* __restrict__ w,
                                        int64_t n4, float eps, float4* out, char4* __restrict__ xq,
                                        float2* __restrict__ xd, MoePairs mp) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  float4* xr = x + blockIdx.x * n4;
  const float4* yr = y + blockIdx.x * n4;
  float4* outr = out + blockIdx.x * n4;
  float4 v[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < n4) {
      float4 b;
      if constexpr (kPairs) {
        b = make_float4(0.f, 0.f, 0.f, 0.f);
        const int64_t p0 = static_cast<int64_t>(blockIdx.x) * mp.per;
        for (int e = 0; e < mp.per; ++e) {
          const float we = mp.wts[p0 + e];
          const float4 pv = mp.pairs[(p0 + e) * n4 + i];
          b.x += we * pv.x;
          b.y += we * pv.y;
          b.z += we * pv.z;
          b.w += we * pv.w;
        }
        mp.y_out[blockIdx.x * n4 + i] = b;
      } else {
        b = yr[i];
      }
      const float4 a = xr[i];
      v[k] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
      xr[i] = v[k];
    } else {
      v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  }
  ss = block_sum(ss, red);  // (synchronises: every y of the row is read before out, which may alias y, is written)
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(4 * n4) + eps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < n4) {
      const float4 g = w[i];
      o = make_float4(v[k].x * scale * g.x, v[k].y * scale * g.y, v[k].z * scale * g.z, v[k].w * scale * g.w);
      outr[i] = o;
    }
    if constexpr (kQ8) {
      // Every lane takes part in the shuffles; groups of 8 lanes are wholly in or out.
      float amax = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      const float d = amax / 127.f;
      const int q0 = amax == 0.f ? 0 : __float2int_rn(o.x / d), q1 = amax == 0.f ? 0 : __float2int_rn(o.y / d);
      const int q2 = amax == 0.f ? 0 : __float2int_rn(o.z / d), q3 = amax == 0.f ? 0 : __float2int_rn(o.w / d);
      int sum = q0 + q1 + q2 + q3;
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      if (i < n4) {
        xq[blockIdx.x * n4 + i] = make_char4(static_cast<signed char>(q0), static_cast<signed char>(q1),
                                             static_cast<signed char>(q2), static_cast<signed char>(q3));
        if ((threadIdx.x & 7) == 0) xd[(blockIdx.x * n4 + i) / 8] = make_float2(d, d * static_cast<float>(sum));
      }
    }
  }
}

// x = x / sqrt(mean(x^2) + eps) * w * silu(z), one block per row.
// gated_rms_norm_kernel with one value a thread (blockDim == n, a multiple of 32), whose
// output is also quantized for q8_matvec (quantize_in_warp, a warp a chunk of 32; the
// chunks of consecutive rows follow each other): the same bits as both kernels.
__global__ void gated_rms_norm_q8_kernel(float* x, const float* z, const float* w, int64_t n, float eps,
                                         int8_t* __restrict__ xq, float2* __restrict__ xd) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * n + threadIdx.x;
  const float xv = x[i];
  float ss = 0.0f;
  ss += xv * xv;
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  const float v = xv * inv * w[threadIdx.x] * silu_f(z[i]);
  x[i] = v;
  quantize_in_warp(v, static_cast<int>(threadIdx.x & 31), xq + i, xd + i / 32);
}

__global__ void gated_rms_norm_kernel(float* x, const float* z, const float* w, int64_t n, float eps) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  float* xr = x + blockIdx.x * n;
  const float* zr = z + blockIdx.x * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] = xr[i] * inv * w[i] * silu_f(zr[i]);
}

// Multi-axis positions (ops::RopeMulti) as the kernels take them: kind 0 is plain RoPE
// (pos[t]); otherwise pos3 [n_tokens, 3] in device memory, the sections, and the
// frequency steps of the vision sections (step_v[s] = base^(-1 / sections[s])).
struct RopeMultiArgs {
  const int32_t* pos3 = nullptr;
  int kind = 0;
  int sections[3] = {0, 0, 0};
  float step_v[2] = {1.0f, 1.0f};
};

// The angle of pair i of token t before freq_scale: the position of its axis times
// step^i, by repeated multiplication as the CPU computes it (ref::rope_angles and
// rope_angles_multi: with equal positions kInterleaved gives plain RoPE's bits).
__device__ __forceinline__ float rope_theta(int64_t t, int64_t i, const int32_t* pos, float step,
                                            const RopeMultiArgs& m) {
  int64_t n_steps = i;
  float theta;
  if (m.kind == static_cast<int>(ops::RopeMulti::kNone)) {
    theta = static_cast<float>(pos[t]);
  } else if (m.kind == static_cast<int>(ops::RopeMulti::kVision)) {
    const bool row = i < m.sections[0];
    theta = static_cast<float>(m.pos3[3 * t + (row ? 1 : 2)]);
    step = m.step_v[row ? 0 : 1];
    n_steps = row ? i : i - m.sections[0];
  } else {
    const int axis = (i % 3 == 1 && i < 3 * m.sections[1]) ? 1 : (i % 3 == 2 && i < 3 * m.sections[2]) ? 2 : 0;
    theta = static_cast<float>(m.pos3[3 * t + axis]);
  }
  for (int64_t k = 0; k < n_steps; ++k) theta *= step;
  return theta;
}

// One thread per (token, head, pair): the angle as the CPU computes it (repeated
// multiplication by `step`), then the rotation with the same fused multiply-adds.
__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                            int64_t n_rot, float step, float freq_scale, bool neox, RopeMultiArgs multi) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t half = n_rot / 2;
  GRID_LOOP(idx, n_tokens * n_heads * half) {
    const int64_t i = idx % half, th = idx / half, t = th / n_heads;
    const float theta = rope_theta(t, i, pos, step, multi);
    const float a = freq_scale * theta;
    const float c = cosf(a), s = sinf(a);
    float* v = x + th * head_dim;
    const int64_t ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    const float x0 = v[ia], x1 = v[ib];
    v[ia] = fmaf(x0, c, -(x1 * s));
    v[ib] = fmaf(x0, s, x1 * c);
  }
}

template <class T>
__device__ __forceinline__ T to_kv(float v);
template <>
__device__ __forceinline__ float to_kv<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half to_kv<__half>(float v) { return __float2half_rn(v); }

// rope_kernel on q and k, then store_kv_kernel, in one launch: one thread per (token,
// head of q | k | v, pair of dimensions). A q pair is rotated in place; a k pair is
// rotated (when within n_rot), written back and to the cache row slots[t]; a v pair is
// copied to the cache. The arithmetic of the separate kernels, so the same values.
template <class T>
__global__ void rope_store_kv_kernel(float* q, float* k, const float* v, int64_t n_tokens, int64_t n_head,
                                     int64_t n_head_kv, int64_t head_dim, const int32_t* pos, int64_t n_rot, float step,
                                     float freq_scale, bool neox, RopeMultiArgs multi, const int32_t* slots, T* kc,
                                     T* vc) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t half = n_rot / 2, pairs = head_dim / 2, heads = n_head + 2 * n_head_kv;
  GRID_LOOP(idx, n_tokens * heads * pairs) {
    const int64_t p = idx % pairs, th = idx / pairs, t = th / heads, h = th % heads;
    int64_t ia, ib;
    if (p < half) {
      ia = neox ? p : 2 * p;
      ib = neox ? p + half : 2 * p + 1;
    } else {
      ia = n_rot + 2 * (p - half);
      ib = ia + 1;
    }
    if (h >= n_head + n_head_kv) {  // v: to the cache
      const int64_t e = (h - n_head - n_head_kv) * head_dim;
      const float* vr = v + t * n_head_kv * head_dim + e;
      T* dst = vc + static_cast<int64_t>(slots[t]) * n_head_kv * head_dim + e;
      dst[2 * p] = to_kv<T>(vr[2 * p]);
      dst[2 * p + 1] = to_kv<T>(vr[2 * p + 1]);
      continue;
    }
    const bool is_k = h >= n_head;
    float* x = is_k ? k + (t * n_head_kv + (h - n_head)) * head_dim : q + (t * n_head + h) * head_dim;
    float x0 = x[ia], x1 = x[ib];
    if (p < half) {
      const float theta = rope_theta(t, p, pos, step, multi);
      const float a = freq_scale * theta;
      const float c = cosf(a), s = sinf(a);
      const float r0 = fmaf(x0, c, -(x1 * s)), r1 = fmaf(x0, s, x1 * c);
      x0 = r0;
      x1 = r1;
      x[ia] = x0;
      x[ib] = x1;
    }
    if (is_k) {
      T* dst = kc + static_cast<int64_t>(slots[t]) * n_head_kv * head_dim + (h - n_head) * head_dim;
      dst[ia] = to_kv<T>(x0);
      dst[ib] = to_kv<T>(x1);
    }
  }
}

template <class T>
__global__ void store_kv_kernel(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim,
                                const int32_t* slots, T* kc, T* vc) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n_tokens * n_kv_dim) {
    const int64_t t = i / n_kv_dim, e = i % n_kv_dim;
    const int64_t row = slots[t];
    kc[row * n_kv_dim + e] = to_kv<T>(k[i]);
    vc[row * n_kv_dim + e] = to_kv<T>(v[i]);
  }
}

// q8_0 cache rows: one thread per 32-value block of a token's K or V row.
__global__ void store_kv_q8_kernel(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim,
                                   const int32_t* slots, KvQ8Block* kc, KvQ8Block* vc) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t nb = n_kv_dim / 32;
  GRID_LOOP(i, n_tokens * nb * 2) {
    const int64_t tb = i >> 1, t = tb / nb, b = tb % nb;
    const bool is_v = (i & 1) != 0;
    kv_quantize_q8((is_v ? v : k) + t * n_kv_dim + b * 32, (is_v ? vc : kc) + slots[t] * nb + b);
  }
}

__global__ void gather_rows_kernel(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n_ids * n) dst[i] = src[static_cast<int64_t>(ids[i / n]) * n + i % n];
}

__global__ void scatter_add_rows_kernel(const float* src, int64_t n, const int32_t* ids, const float* w,
                                        int64_t n_ids, float* dst) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  GRID_LOOP(i, n_ids * n) {
    const int64_t r = i / n;
    dst[static_cast<int64_t>(ids[r]) * n + i % n] += w[r] * src[i];
  }
}

// Checks p's multi-axis fields as backend.h defines them (throws Error(kInvalidInput)),
// then the kernels' form of them with pos3 staged at d_pos3 (null for plain RoPE).
void check_rope_multi(const ops::RopeParams& p) {
  if (p.multi == ops::RopeMulti::kNone) return;
  const std::string what = "rope: multi-axis positions ";
  if (p.multi != ops::RopeMulti::kVision && p.multi != ops::RopeMulti::kInterleaved) {
    fail(ErrorKind::kInvalidInput, "cuda", what + "of unknown kind " + std::to_string(static_cast<int>(p.multi)));
  }
  if (!p.neox) fail(ErrorKind::kInvalidInput, "cuda", what + "need the NeoX layout");
  if (p.pos3 == nullptr) fail(ErrorKind::kInvalidInput, "cuda", what + "without pos3");
  if (p.multi == ops::RopeMulti::kVision &&
      (p.sections[0] <= 0 || p.sections[1] <= 0 || p.sections[0] + p.sections[1] != p.n_rot / 2)) {
    fail(ErrorKind::kInvalidInput, "cuda",
         what + "(vision): sections " + std::to_string(p.sections[0]) + " + " + std::to_string(p.sections[1]) +
             " must be positive and cover n_rot / 2 = " + std::to_string(p.n_rot / 2) + " pairs");
  }
}
RopeMultiArgs rope_multi_args(const ops::RopeParams& p, const int32_t* d_pos3) {
  RopeMultiArgs m;
  if (p.multi == ops::RopeMulti::kNone) return m;
  m.pos3 = d_pos3;
  m.kind = static_cast<int>(p.multi);
  for (int i = 0; i < 3; ++i) m.sections[i] = p.sections[i];
  if (p.multi == ops::RopeMulti::kVision) {
    // As ref::rope_angles_multi computes them (the same float pow, so the same steps).
    for (int i = 0; i < 2; ++i) m.step_v[i] = std::pow(p.freq_base, -1.0f / static_cast<float>(p.sections[i]));
  }
  return m;
}

int row_threads(int64_t n) {
  int t = 32;
  while (t < 1024 && t < n) t *= 2;
  return t > 256 ? 256 : t;
}

}  // namespace

void CudaBackend::add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens) {
  OpTimer timer(rt_, "add_bias");
  const int64_t n = bias.n_cols;
  const float* b = f32_values(bias, n, "add_bias");
  if (n_tokens <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(add_bias_kernel, grid_for(n * n_tokens), kThreads, 0, stream_, x, b, n, n * n_tokens);
  HEARTH_CUDA_LAUNCHED("add_bias");
}

void CudaBackend::rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                           float* y) {
  OpTimer timer(rt_, "rms_norm");
  const float* w = f32_values(weight, n, "rms_norm");
  if (n_rows <= 0) return;
  if (rt_.skip_launch()) return;
  const bool vec = n % 4 == 0 && n <= 4 * 4 * 1024 &&
                   ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y)) &
                    15) == 0;
  if (vec) {
    const int64_t n4 = n / 4;
    const int threads = static_cast<int>(std::min<int64_t>(1024, (n4 + 31) / 32 * 32));
    const int64_t per = (n4 + threads - 1) / threads;
    const auto grid = static_cast<unsigned>(n_rows);
    const auto* x4 = reinterpret_cast<const float4*>(x);
    const auto* w4 = reinterpret_cast<const float4*>(w);
    auto* y4 = reinterpret_cast<float4*>(y);
    if (per <= 1) {
      ::hearth::cuda::launch_pdl(rms_norm_vec_kernel<1>, grid, threads, 0, stream_, x4, w4, n4, eps, y4);
    } else if (per <= 2) {
      ::hearth::cuda::launch_pdl(rms_norm_vec_kernel<2>, grid, threads, 0, stream_, x4, w4, n4, eps, y4);
    } else {
      ::hearth::cuda::launch_pdl(rms_norm_vec_kernel<4>, grid, threads, 0, stream_, x4, w4, n4, eps, y4);
    }
  } else {
    ::hearth::cuda::launch_pdl(rms_norm_kernel, static_cast<unsigned>(n_rows), row_threads(n), 0, stream_, x, w, n, eps, y);
  }
  HEARTH_CUDA_LAUNCHED("rms_norm");
}

void CudaBackend::gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                                 float eps, int64_t rows_per_token) {
  OpTimer timer(rt_, "gated_rms_norm");
  const float* wt = f32_values(w, n, "gated_rms_norm");
  if (n_rows <= 0) return;
  // With the product after it quantizing x ([tokens, rows_per_token * n]): done here when a
  // thread holds one value (the same sums as the plain kernel).
  void* q8 = nullptr;
  if (gated_norm_q8_ && n % 32 == 0 && row_threads(n) == n && rows_per_token > 0 && n_rows % rows_per_token == 0) {
    q8 = q8_ready_scratch(x, n_rows / rows_per_token, rows_per_token * n);
  }
  if (rt_.skip_launch()) {
    return;
  }
  if (q8 != nullptr) {
    auto* xq = static_cast<int8_t*>(q8);
    auto* xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(q8) +
                                         q8_scratch_scales_offset(n_rows / rows_per_token, rows_per_token * n));
    ::hearth::cuda::launch_pdl(gated_rms_norm_q8_kernel, static_cast<unsigned>(n_rows), static_cast<int>(n), 0, stream_,
                               x, z, wt, n, eps, xq, xd);
  } else {
    ::hearth::cuda::launch_pdl(gated_rms_norm_kernel, static_cast<unsigned>(n_rows), row_threads(n), 0, stream_, x, z,
                               wt, n, eps);
  }
  HEARTH_CUDA_LAUNCHED("gated_rms_norm");
}

void CudaBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                       const ops::RopeParams& p) {
  OpTimer timer(rt_, "rope");
  if (n_tokens <= 0 || p.n_rot <= 0) return;
  if (p.n_rot > head_dim || p.n_rot % 2 != 0) {
    fail(ErrorKind::kInvalidInput, "cuda", "rope: n_rot " + std::to_string(p.n_rot) + " for head size " +
                                               std::to_string(head_dim));
  }
  check_rope_multi(p);
  const bool has_multi = p.multi != ops::RopeMulti::kNone;
  // Multi-axis positions are staged like plain ones: a replayed step uploads this step's.
  const RopeMultiArgs multi = rope_multi_args(p, has_multi ? rt_.stage_array(p.pos3, 3 * n_tokens, "rope") : nullptr);
  const int32_t* pos = has_multi ? nullptr : rt_.stage_array(positions, n_tokens, "rope");
  const float step = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const int64_t total = n_tokens * n_heads * (p.n_rot / 2);
  if (rt_.skip_launch()) {
    return;
  }
  ::hearth::cuda::launch_pdl(rope_kernel, grid_for(total), kThreads, 0, stream_, x, n_tokens, n_heads, head_dim, pos, p.n_rot, step,
                                                         p.freq_scale, p.neox, multi);
  HEARTH_CUDA_LAUNCHED("rope");
}

void CudaBackend::store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                           const ops::KvLayer& cache) {
  OpTimer timer(rt_, "store_kv");
  if (n_tokens <= 0) return;
  if (cache.type == ops::KvType::Q8_0 && n_kv_dim % ops::kQ8Block != 0) {
    fail(ErrorKind::kInvalidInput, "cuda", "store_kv: a q8_0 row of " + std::to_string(n_kv_dim) +
                                               " values (a multiple of 32 is needed)");
  }
  const int32_t* d_slots = rt_.stage_array(slots, n_tokens, "store_kv");
  const unsigned grid = grid_for(n_tokens * n_kv_dim);
  if (rt_.skip_launch()) {
    return;
  }
  if (cache.type == ops::KvType::Q8_0) {
    ::hearth::cuda::launch_pdl(store_kv_q8_kernel, grid_for(n_tokens * (n_kv_dim / 32) * 2), kThreads, 0, stream_, k,
                               v, n_tokens, n_kv_dim, d_slots, static_cast<KvQ8Block*>(cache.k),
                               static_cast<KvQ8Block*>(cache.v));
  } else if (cache.type == ops::KvType::F16) {
    ::hearth::cuda::launch_pdl(store_kv_kernel<__half>, grid, kThreads, 0, stream_, k, v, n_tokens, n_kv_dim, d_slots,
                                                            static_cast<__half*>(cache.k),
                                                            static_cast<__half*>(cache.v));
  } else {
    ::hearth::cuda::launch_pdl(store_kv_kernel<float>, grid, kThreads, 0, stream_, k, v, n_tokens, n_kv_dim, d_slots,
                                                           static_cast<float*>(cache.k), static_cast<float*>(cache.v));
  }
  HEARTH_CUDA_LAUNCHED("store_kv");
}

bool CudaBackend::add_rms_norm_vec_ok(const float* x, const float* y, const float* out, const ops::WeightView& weight,
                                      int64_t n) const {
  return fuse_ && n % 4 == 0 && n <= 4 * 4 * 1024 && x != out &&
         ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(out)) & 15) ==
             0 &&
         (weight.type != GgmlType::F32 || (reinterpret_cast<uintptr_t>(weight.backend_data) & 15) == 0);
}

void CudaBackend::add_rms_norm(float* x, const float* y, const ops::WeightView& weight, int64_t n_rows, int64_t n,
                               float eps, float* out) {
  if (!add_rms_norm_vec_ok(x, y, out, weight, n)) {
    Backend::add_rms_norm(x, y, weight, n_rows, n, eps, out);
    return;
  }
  OpTimer timer(rt_, "add_rms_norm");
  const float* w = f32_values(weight, n, "add_rms_norm");
  if (n_rows <= 0) return;
  if ((reinterpret_cast<uintptr_t>(w) & 15) != 0) {
    fail(ErrorKind::kInternal, "cuda", "add_rms_norm: weight values not 16-byte aligned");
  }
  // With the product after it quantizing out: done here (n4 a multiple of 8).
  void* q8 = n % 32 == 0 ? q8_ready_scratch(out, n_rows, n) : nullptr;
  if (rt_.skip_launch()) {
    return;
  }
  launch_add_rms_norm(x, y, w, n_rows, n, eps, out, q8, nullptr, nullptr, 0, nullptr);
  HEARTH_CUDA_LAUNCHED("add_rms_norm");
}

void CudaBackend::launch_add_rms_norm(float* x, const float* y, const float* w, int64_t n_rows, int64_t n, float eps,
                                      float* out, void* q8, const float* pairs, const float* wts, int per,
                                      float* y_out) {
  // The configuration of rms_norm's vector path (the same sums).
  const int64_t n4 = n / 4;
  const int threads = static_cast<int>(std::min<int64_t>(1024, (n4 + 31) / 32 * 32));
  const int64_t per_thread = (n4 + threads - 1) / threads;
  const auto grid = static_cast<unsigned>(n_rows);
  auto* x4 = reinterpret_cast<float4*>(x);
  const auto* y4 = reinterpret_cast<const float4*>(y);
  const auto* w4 = reinterpret_cast<const float4*>(w);
  auto* o4 = reinterpret_cast<float4*>(out);
  auto* xq = static_cast<char4*>(q8);
  auto* xd = q8 != nullptr ? reinterpret_cast<float2*>(static_cast<uint8_t*>(q8) + q8_scratch_scales_offset(n_rows, n))
                           : nullptr;
  const MoePairs mp{reinterpret_cast<const float4*>(pairs), wts, per, reinterpret_cast<float4*>(y_out)};
  auto go = [&](auto kernel) {
    ::hearth::cuda::launch_pdl(kernel, grid, threads, 0, stream_, x4, y4, w4, n4, eps, o4, xq, xd, mp);
  };
  // <rows a thread, quantize for the next product, y from MoE pairs>
  auto pick = [&](auto q8_tag, auto pairs_tag) {
    constexpr bool kQ8 = decltype(q8_tag)::value, kPairs = decltype(pairs_tag)::value;
    if (per_thread <= 1) {
      go(add_rms_norm_vec_kernel<1, kQ8, kPairs>);
    } else if (per_thread <= 2) {
      go(add_rms_norm_vec_kernel<2, kQ8, kPairs>);
    } else {
      go(add_rms_norm_vec_kernel<4, kQ8, kPairs>);
    }
  };
  using T = std::true_type;
  using F = std::false_type;
  if (q8 != nullptr) {
    pairs != nullptr ? pick(T{}, T{}) : pick(T{}, F{});
  } else {
    pairs != nullptr ? pick(F{}, T{}) : pick(F{}, F{});
  }
}

void CudaBackend::rope_store_kv(float* q, float* k, const float* v, int64_t n_tokens, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, const int32_t* positions, const ops::RopeParams& p,
                                const int32_t* slots, const ops::KvLayer& cache) {
  // (q8_0: RoPE, then store_kv's quantizing kernel.)
  if (!fuse_ || p.n_rot <= 0 || head_dim % 2 != 0 || cache.n_kv_dim != n_head_kv * head_dim ||
      cache.type == ops::KvType::Q8_0) {
    Backend::rope_store_kv(q, k, v, n_tokens, n_head, n_head_kv, head_dim, positions, p, slots, cache);
    return;
  }
  OpTimer timer(rt_, "rope_store_kv");
  if (n_tokens <= 0) return;
  if (p.n_rot > head_dim || p.n_rot % 2 != 0) {
    fail(ErrorKind::kInvalidInput, "cuda", "rope: n_rot " + std::to_string(p.n_rot) + " for head size " +
                                               std::to_string(head_dim));
  }
  check_rope_multi(p);
  const bool has_multi = p.multi != ops::RopeMulti::kNone;
  // Multi-axis positions are staged like plain ones: a replayed step uploads this step's.
  const RopeMultiArgs multi = rope_multi_args(p, has_multi ? rt_.stage_array(p.pos3, 3 * n_tokens, "rope") : nullptr);
  const int32_t* pos = has_multi ? nullptr : rt_.stage_array(positions, n_tokens, "rope");
  const int32_t* d_slots = rt_.stage_array(slots, n_tokens, "store_kv");
  const float step = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  if (rt_.skip_launch()) {
    return;
  }
  const unsigned grid = grid_for(n_tokens * (n_head + 2 * n_head_kv) * (head_dim / 2));
  if (cache.type == ops::KvType::F16) {
    ::hearth::cuda::launch_pdl(rope_store_kv_kernel<__half>, grid, kThreads, 0, stream_, q, k, v, n_tokens, n_head,
                               n_head_kv, head_dim, pos, p.n_rot, step, p.freq_scale, p.neox, multi, d_slots,
                               static_cast<__half*>(cache.k), static_cast<__half*>(cache.v));
  } else {
    ::hearth::cuda::launch_pdl(rope_store_kv_kernel<float>, grid, kThreads, 0, stream_, q, k, v, n_tokens, n_head,
                               n_head_kv, head_dim, pos, p.n_rot, step, p.freq_scale, p.neox, multi, d_slots,
                               static_cast<float*>(cache.k), static_cast<float*>(cache.v));
  }
  HEARTH_CUDA_LAUNCHED("rope_store_kv");
}

void CudaBackend::sigmoid_mul(float* x, const float* gate, int64_t n) {
  OpTimer timer(rt_, "sigmoid_mul");
  if (n <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(sigmoid_mul_kernel, grid_for(n), kThreads, 0, stream_, x, gate, n);
  HEARTH_CUDA_LAUNCHED("sigmoid_mul");
}

void CudaBackend::sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) {
  OpTimer timer(rt_, "sigmoid_scale_rows");
  if (n_rows <= 0 || n_cols <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(sigmoid_scale_rows_kernel, grid_for(n_rows * n_cols), kThreads, 0, stream_, x, gate, n_cols, n_rows * n_cols);
  HEARTH_CUDA_LAUNCHED("sigmoid_scale_rows");
}

void CudaBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  OpTimer timer(rt_, "swiglu");
  if (n <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(swiglu_kernel, grid_for(n), kThreads, 0, stream_, gate, up, n, out);
  HEARTH_CUDA_LAUNCHED("swiglu");
}

void CudaBackend::swiglu_rows(const float* gate, const float* up, int64_t n_rows, int64_t n_cols, float* out) {
  OpTimer timer(rt_, "swiglu");
  if (n_rows <= 0 || n_cols <= 0) return;
  // With the product after it quantizing out: done here.
  void* q8 = n_cols % 32 == 0 ? q8_ready_scratch(out, n_rows, n_cols) : nullptr;
  if (rt_.skip_launch()) {
    return;
  }
  const int64_t n = n_rows * n_cols;
  if (q8 == nullptr) {
    ::hearth::cuda::launch_pdl(swiglu_kernel, grid_for(n), kThreads, 0, stream_, gate, up, n, out);
  } else {
    auto* xq = static_cast<int8_t*>(q8);
    auto* xd = reinterpret_cast<float2*>(static_cast<uint8_t*>(q8) + q8_scratch_scales_offset(n_rows, n_cols));
    const int64_t n_chunks = n / 32;
    ::hearth::cuda::launch_pdl(swiglu_q8_kernel, static_cast<unsigned>((n_chunks + 7) / 8), 256, 0, stream_, gate, up,
                               n_chunks, out, xq, xd);
  }
  HEARTH_CUDA_LAUNCHED("swiglu");
}

void CudaBackend::add(float* x, const float* y, int64_t n) {
  OpTimer timer(rt_, "add");
  if (n <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(add_kernel, grid_for(n), kThreads, 0, stream_, x, y, n);
  HEARTH_CUDA_LAUNCHED("add");
}

void CudaBackend::copy(const float* src, int64_t n, float* dst) {
  OpTimer timer(rt_, "copy");
  if (n <= 0 || src == dst) return;
  if (rt_.skip_launch()) return;
  HEARTH_CUDA_CHECK("copy", cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill(float* dst, float value, int64_t n) {
  OpTimer timer(rt_, "fill");
  if (n <= 0) return;
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(fill_kernel, grid_for(n), kThreads, 0, stream_, dst, value, n);
  HEARTH_CUDA_LAUNCHED("fill");
}

void CudaBackend::gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) {
  OpTimer timer(rt_, "gather_rows");
  if (n_ids <= 0 || n <= 0) return;
  const int32_t* d_ids = rt_.stage_array(ids, n_ids, "gather_rows");
  if (rt_.skip_launch()) return;
  ::hearth::cuda::launch_pdl(gather_rows_kernel, grid_for(n_ids * n), kThreads, 0, stream_, src, n, d_ids, n_ids, dst);
  HEARTH_CUDA_LAUNCHED("gather_rows");
}

void CudaBackend::scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights,
                                   int64_t n_ids, float* dst) {
  OpTimer timer(rt_, "scatter_add_rows");
  if (n_ids <= 0 || n <= 0) return;
  const int32_t* d_ids = rt_.stage_array(ids, n_ids, "scatter_add_rows");
  const float* d_w = rt_.stage_array(weights, n_ids, "scatter_add_rows");
  if (rt_.skip_launch()) {
    return;
  }
  ::hearth::cuda::launch_pdl(scatter_add_rows_kernel, grid_for(n_ids * n), kThreads, 0, stream_, src, n, d_ids, d_w, n_ids, dst);
  HEARTH_CUDA_LAUNCHED("scatter_add_rows");
}

}  // namespace hearth::cuda

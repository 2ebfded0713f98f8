// The q8_0 KV cache on the GPU (ops::KvType::Q8_0, the layout of ops/backend.h: each run
// of 32 values of a row is one 34-byte block, an f16 scale d then 32 int8 q, value =
// f32(d) * q). The attention kernels take the cache through an element type T (float,
// __half, or KvQ8Block) and index it in units of kv_unit<T> values, so a q8_0 row's
// kv_stride and a head's offset are counted in blocks (head_dim and n_kv_dim are
// multiples of 32 for q8_0: KvPool checks it at load). kv_at(p, d) reads value d of a
// head's row; for q8_0 it is the CPU back-end's dequantization (one f32 multiply), so
// the scalar kernels see exactly the values the CPU kernels see.
// Writing follows the CPU's quantizer (quant_q8_0, llama.cpp's quantize_row_q8_0_ref):
// d = max|x| / 127, q = roundf(x * (1 / d)) (0 for an all-zero block), d stored as the
// nearest f16 — IEEE division and roundf, so the GPU writes the CPU's bits.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace hearth::cuda {

struct __align__(2) KvQ8Block {
  __half d;
  int8_t qs[32];
};
static_assert(sizeof(KvQ8Block) == 34, "q8_0 block layout");

template <class T>
inline constexpr int kv_unit = 1;  // values per element of T
template <>
inline constexpr int kv_unit<KvQ8Block> = 32;

__device__ __forceinline__ float kv_at(const float* p, int d) { return p[d]; }
__device__ __forceinline__ float kv_at(const __half* p, int d) { return __half2float(p[d]); }
__device__ __forceinline__ float kv_at(const KvQ8Block* p, int d) {
  const KvQ8Block* b = p + (d >> 5);
  return __half2float(b->d) * static_cast<float>(b->qs[d & 31]);
}

// 32 values -> one block, by one thread (the CPU's arithmetic).
__device__ __forceinline__ void kv_quantize_q8(const float* x, KvQ8Block* out) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  out->d = __float2half_rn(d);
#pragma unroll
  for (int j = 0; j < 32; ++j) out->qs[j] = static_cast<int8_t>(roundf(x[j] * id));
}

}  // namespace hearth::cuda

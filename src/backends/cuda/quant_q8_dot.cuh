// Integer dot products of GGUF weight blocks with 8-bit activations, for the decode
// matrix-vector product of quant_q8.cu. The activations come quantized in chunks of
// 32 values: int8 quants q and, per chunk, (d, d * sum q) with value = d * q. A weight
// block is split into kUnits units of 32 elements each; a thread decodes one unit's
// quants into packed int8 words (decode) and multiplies them with each token's chunk by
// dp4a (dot), applying the block's scales and mins in f32.
//
// Per type: kElems / kBytes (the block), kUnits, struct Dec, decode(blk, s) and
// dot(dec, s, x, xd) with x (GlobalX or SharedX) / xd at the block's first chunk of one token. The K-quants
// (units of 64 elements) are in quant_q8_wide.cuh.
// Internal to quant_q8.cu.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "format/ggml_types.h"

namespace hearth::cuda::q8 {

// 32 bits at a 2-byte aligned address (two 16-bit loads).
__device__ __forceinline__ int ld2(const uint8_t* p) {
  const auto* q = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16));
}
// 32 bits at a 4-byte aligned address.
__device__ __forceinline__ int ld4(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }
// 16 activation quants at a 16-byte aligned address.
__device__ __forceinline__ int4 ldx(const int8_t* p) { return __ldg(reinterpret_cast<const int4*>(p)); }

// Where dot() reads one token's activation quants for one weight block: ld(off) returns
// the 16 quants at element off (a multiple of 16) of the block.
// GlobalX: from global memory, p at the block's first element.
struct GlobalX {
  const int8_t* p;
  __device__ __forceinline__ int4 ld(int off) const { return ldx(p + off); }
};
// SharedX: from a token's row staged in shared memory in 16-byte chunks, chunk c stored
// at swizzle16(c): the chunks 4 l + k that lanes l = 0..7 read together (one unit of 64
// elements a lane) land in eight different groups of four banks (no conflicts).
__device__ __forceinline__ int swizzle16(int c) { return c ^ ((c >> 3) & 7); }
struct SharedX {
  const int4* row;  // the token's staged row
  int c0;           // the block's first chunk
  __device__ __forceinline__ int4 ld(int off) const { return row[swizzle16(c0 + (off >> 4))]; }
};
__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// sum over 16 bytes: w (4 words, each 4 quants) times x (16 int8).
__device__ __forceinline__ int dot16(const int* w, const int4 x) {
  int s = __dp4a(w[0], x.x, 0);
  s = __dp4a(w[1], x.y, s);
  s = __dp4a(w[2], x.z, s);
  return __dp4a(w[3], x.w, s);
}
constexpr int kLo4 = 0x0f0f0f0f;

// Bits 0..3 of v moved to bit 4 of bytes 0..3.
__device__ __forceinline__ int spread_bit4(uint32_t v) {
  return static_cast<int>(((v & 1u) << 4) | ((v & 2u) << 11) | ((v & 4u) << 18) | ((v & 8u) << 25));
}

template <GgmlType T>
struct Q8Dot;

// Q8_0: half d, int8 q[32].
template <>
struct Q8Dot<GgmlType::Q8_0> {
  static constexpr int kElems = 32, kBytes = 34, kUnits = 1;
  struct Dec {
    float d;
    int q[8];
  };
  __device__ static Dec decode(const uint8_t* blk, int) {
    Dec r;
    r.d = half_at(blk);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = ld2(blk + 2 + 4 * i);
    return r;
  }
  template <class X>
  __device__ static float dot(const Dec& w, int, const X& x, const float2* xd) {
    const int s = dot16(w.q, x.ld(0)) + dot16(w.q + 4, x.ld(16));
    return w.d * xd[0].x * static_cast<float>(s);
  }
};

// Q4_0 (value q - 8) and Q4_1 (d q + m): byte i holds element i (low) and i + 16 (high).
template <GgmlType T, int kQsAt, bool kMin>
struct Q4Legacy {
  static constexpr int kElems = 32, kBytes = kQsAt + 16, kUnits = 1;
  struct Dec {
    float d, m;
    int lo[4], hi[4];
  };
  __device__ static Dec decode(const uint8_t* blk, int) {
    Dec r;
    r.d = half_at(blk);
    r.m = kMin ? half_at(blk + 2) : 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = kMin ? ld4(blk + kQsAt + 4 * i) : ld2(blk + kQsAt + 4 * i);
      r.lo[i] = v & kLo4;
      r.hi[i] = (v >> 4) & kLo4;
    }
    return r;
  }
  template <class X>
  __device__ static float dot(const Dec& w, int, const X& x, const float2* xd) {
    const int s = dot16(w.lo, x.ld(0)) + dot16(w.hi, x.ld(16));
    if constexpr (kMin) return w.d * xd[0].x * static_cast<float>(s) + w.m * xd[0].y;
    return w.d * (xd[0].x * static_cast<float>(s) - 8.f * xd[0].y);
  }
};
template <>
struct Q8Dot<GgmlType::Q4_0> : Q4Legacy<GgmlType::Q4_0, 2, false> {};
template <>
struct Q8Dot<GgmlType::Q4_1> : Q4Legacy<GgmlType::Q4_1, 4, true> {};

// Q5_0 (value q - 16) and Q5_1 (d q + m): 32 high bits qh, element i's at bit i.
template <GgmlType T, int kQhAt, bool kMin>
struct Q5Legacy {
  static constexpr int kElems = 32, kBytes = kQhAt + 20, kUnits = 1;
  struct Dec {
    float d, m;
    int lo[4], hi[4];
  };
  __device__ static Dec decode(const uint8_t* blk, int) {
    Dec r;
    r.d = half_at(blk);
    r.m = kMin ? half_at(blk + 2) : 0.f;
    const uint32_t qh = static_cast<uint32_t>(kMin ? ld4(blk + kQhAt) : ld2(blk + kQhAt));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int v = kMin ? ld4(blk + kQhAt + 4 + 4 * i) : ld2(blk + kQhAt + 4 + 4 * i);
      r.lo[i] = (v & kLo4) | spread_bit4(qh >> (4 * i));
      r.hi[i] = ((v >> 4) & kLo4) | spread_bit4(qh >> (16 + 4 * i));
    }
    return r;
  }
  template <class X>
  __device__ static float dot(const Dec& w, int, const X& x, const float2* xd) {
    const int s = dot16(w.lo, x.ld(0)) + dot16(w.hi, x.ld(16));
    if constexpr (kMin) return w.d * xd[0].x * static_cast<float>(s) + w.m * xd[0].y;
    return w.d * (xd[0].x * static_cast<float>(s) - 16.f * xd[0].y);
  }
};
template <>
struct Q8Dot<GgmlType::Q5_0> : Q5Legacy<GgmlType::Q5_0, 2, false> {};
template <>
struct Q8Dot<GgmlType::Q5_1> : Q5Legacy<GgmlType::Q5_1, 4, true> {};

// Byte k (0..11) of the three words s.
__device__ __forceinline__ int byte_of3(const int* s, int k) {
  const int w = k < 4 ? s[0] : (k < 8 ? s[1] : s[2]);
  return (w >> (8 * (k & 3))) & 0xff;
}
// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K block, 6 bits each.
__device__ __forceinline__ void scale_min_k4(const int* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = byte_of3(s, j) & 63;
    *m = byte_of3(s, j + 4) & 63;
  } else {
    *sc = (byte_of3(s, j + 4) & 0xf) | ((byte_of3(s, j - 4) >> 6) << 4);
    *m = (byte_of3(s, j + 4) >> 4) | ((byte_of3(s, j) >> 6) << 4);
  }
}

// (d sc, dmin m) of sub-block j (0..7) of a Q4_K / Q5_K block: dm = (d, dmin), sc3 the
// 12 bytes of scales and mins as words.
__device__ __forceinline__ float2 k4_sub_scales(const int* sc3, const float2 dm, int j) {
  int sc, m;
  scale_min_k4(sc3, j, &sc, &m);
  return make_float2(dm.x * static_cast<float>(sc), dm.y * static_cast<float>(m));
}

}  // namespace hearth::cuda::q8

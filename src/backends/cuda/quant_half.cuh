// Fast decoders to f16 for the tensor-core tiles of quant_gemm.cu: the same units as
// QType<T> of quant_blocks.cuh (unit s of a block, its values in the same run order),
// written as half2 words: word w holds the unit's values 2w and 2w + 1.
//
// Integers become halves without a conversion instruction: a byte b placed under the
// exponent byte 0x64 is the half 1024 + b (exact, b < 1024), so one byte permute makes two
// halves and one half2 subtraction makes them the exact small integers q; the scale is
// then one rounded half2 multiply (or fused multiply-add with the block minimum). A value
// can therefore differ from dequantize_rows_f16's (the exact f32 value rounded once) by a
// rounding of the f16 scale and of the product: about 1e-3 relative, the order of the f16
// activations' own rounding. Types without a specialisation here use the exact decoder.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/quant_blocks.cuh"

namespace hearth::cuda::qk {

template <GgmlType T>
struct HalfDecode {
  static constexpr bool kHas = false;
};

// half2 {1024 + byte 0 of w, 1024 + byte 1} and {.. byte 2, .. byte 3}.
__device__ __forceinline__ __half2 bytes01_h2(uint32_t w) {
  const uint32_t h = __byte_perm(w, 0x64646464u, 0x4140);
  return *reinterpret_cast<const __half2*>(&h);
}
__device__ __forceinline__ __half2 bytes23_h2(uint32_t w) {
  const uint32_t h = __byte_perm(w, 0x64646464u, 0x4342);
  return *reinterpret_cast<const __half2*>(&h);
}
__device__ __forceinline__ uint32_t h2_bits(__half2 v) { return *reinterpret_cast<const uint32_t*>(&v); }

// Four values from a word of four unsigned bytes: (b - off) * d, as two half2 words.
__device__ __forceinline__ void four_scaled(uint32_t w, __half2 off, __half2 d, uint32_t* out) {
  out[0] = h2_bits(__hmul2(__hsub2(bytes01_h2(w), off), d));
  out[1] = h2_bits(__hmul2(__hsub2(bytes23_h2(w), off), d));
}
// Four values (b - 1024 offset) * d - m.
__device__ __forceinline__ void four_affine(uint32_t w, __half2 off, __half2 d, __half2 neg_m, uint32_t* out) {
  out[0] = h2_bits(__hfma2(__hsub2(bytes01_h2(w), off), d, neg_m));
  out[1] = h2_bits(__hfma2(__hsub2(bytes23_h2(w), off), d, neg_m));
}

// Q4_0: unit s: low nibbles of qs[8s, 8s + 8) (run 0), high nibbles (run 1); (q - 8) * d.
template <>
struct HalfDecode<GgmlType::Q4_0> {
  static constexpr bool kHas = true;
  struct Raw {
    uint32_t d;
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) { return Raw{ld_u16(blk), ld_8_al2(blk + 2 + 8 * s)}; }
  __device__ static void convert(const Raw& r, int, uint32_t* h) {
    const __half2 d = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.d)));
    const __half2 off = __float2half2_rn(1032.f);
    four_scaled(r.q.x & 0x0f0f0f0fu, off, d, h + 0);
    four_scaled(r.q.y & 0x0f0f0f0fu, off, d, h + 2);
    four_scaled((r.q.x >> 4) & 0x0f0f0f0fu, off, d, h + 4);
    four_scaled((r.q.y >> 4) & 0x0f0f0f0fu, off, d, h + 6);
  }
};

// Q8_0: unit s: qs[16s, 16s + 16) as signed bytes (flipped to unsigned by + 128); q * d.
template <>
struct HalfDecode<GgmlType::Q8_0> {
  static constexpr bool kHas = true;
  struct Raw {
    uint32_t d;
    uint2 q0, q1;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    return Raw{ld_u16(blk), ld_8_al2(blk + 2 + 16 * s), ld_8_al2(blk + 10 + 16 * s)};
  }
  __device__ static void convert(const Raw& r, int, uint32_t* h) {
    const __half2 d = __half2half2(__ushort_as_half(static_cast<unsigned short>(r.d)));
    const __half2 off = __float2half2_rn(1152.f);
    four_scaled(r.q0.x ^ 0x80808080u, off, d, h + 0);
    four_scaled(r.q0.y ^ 0x80808080u, off, d, h + 2);
    four_scaled(r.q1.x ^ 0x80808080u, off, d, h + 4);
    four_scaled(r.q1.y ^ 0x80808080u, off, d, h + 6);
  }
};

// Q4_K: unit s as K4Layout: qs[16s, 16s + 16): low nibbles run 0 (scale / min of sub-block
// 2p), high nibbles run 1 (sub-block 2p + 1), p = s / 2. Scales from the exact f32 products.
template <>
struct HalfDecode<GgmlType::Q4_K> {
  static constexpr bool kHas = true;
  struct Raw {
    uint4 head;  // d, dmin; the 12 scale bytes
    uint4 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) { return Raw{ld_u128(blk), ld_u128(blk + 16 + 16 * s)}; }
  __device__ static void convert(const Raw& r, int s, uint32_t* h) {
    const int p = s >> 1;
    const float d = f16_bits_to_f32(r.head.x & 0xffff), dmin = f16_bits_to_f32(r.head.x >> 16);
    const uint32_t scales[3] = {r.head.y, r.head.z, r.head.w};
    uint32_t sc, m;
    k4_scale_min(2 * p, scales, &sc, &m);
    const __half2 d1 = __float2half2_rn(d * static_cast<float>(sc));
    const __half2 m1 = __float2half2_rn(-(dmin * static_cast<float>(m)));
    k4_scale_min(2 * p + 1, scales, &sc, &m);
    const __half2 d2 = __float2half2_rn(d * static_cast<float>(sc));
    const __half2 m2 = __float2half2_rn(-(dmin * static_cast<float>(m)));
    const __half2 off = __float2half2_rn(1024.f);
    const uint32_t qw[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      four_affine(qw[k] & 0x0f0f0f0fu, off, d1, m1, h + 2 * k);
      four_affine((qw[k] >> 4) & 0x0f0f0f0fu, off, d2, m2, h + 8 + 2 * k);
    }
  }
};

// Q6_K: unit u as QType<Q6_K>: runs k = 0..3 of 8 values, q = 6 bits - 32, times d * scale.
template <>
struct HalfDecode<GgmlType::Q6_K> {
  static constexpr bool kHas = true;
  struct Raw {
    uint2 qa, qb, qh, sc;  // sc: scale bytes is .. is + 7 (the unit uses is, is + 2, is + 4, is + 6)
    uint32_t d;
  };
  __device__ static Raw load(const uint8_t* blk, int u) {
    const int hh = u >> 2, c = u & 3;
    const int is = 8 * hh + (c >> 1);
    return Raw{ld_8_al2(blk + 64 * hh + 8 * c), ld_8_al2(blk + 64 * hh + 32 + 8 * c),
               ld_8_al2(blk + 128 + 32 * hh + 8 * c), ld_8_al1(blk + 192 + is), ld_u16(blk + 208)};
  }
  __device__ static void convert(const Raw& r, int, uint32_t* h) {
    const float d = f16_bits_to_f32(r.d);
    const __half2 off = __float2half2_rn(1056.f);
    const uint32_t a[2] = {r.qa.x, r.qa.y}, b[2] = {r.qb.x, r.qb.y}, hb[2] = {r.qh.x, r.qh.y};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t scw = k < 2 ? r.sc.x : r.sc.y;  // bytes 2k of the eight
      const int sc = static_cast<int8_t>(byte_of(scw, (2 * k) & 3));
      const __half2 ds = __float2half2_rn(d * static_cast<float>(sc));
#pragma unroll
      for (int wd = 0; wd < 2; ++wd) {
        const uint32_t lo = (k & 1) ? b[wd] : a[wd];
        const uint32_t nib = (k < 2 ? lo : lo >> 4) & 0x0f0f0f0fu;
        const uint32_t q = nib | (((hb[wd] >> (2 * k)) & 0x03030303u) << 4);
        four_scaled(q, off, ds, h + 4 * k + 2 * wd);
      }
    }
  }
};

}  // namespace hearth::cuda::qk

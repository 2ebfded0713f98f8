// Fast decoding for the matrix-vector product. A unit's run (see quant_blocks.cuh) is
// given as its quants q packed four to a word, one per byte, with the run's scale and
// min: element = scale * q - minv, equal as a real number to the exact decode (not
// rounded the same way). Quants of up to 7 bits are stored aligned to bit 6 of their
// byte (byte = q << (7 - kBits)); the product reads each byte as the float
// 2 + byte / 64 (one byte permute: 0x40 above it, the byte as the top of the mantissa)
// and multiplies with x by one FMA per token; per run,
// sum(q x) = (sum((2 + byte / 64) x) - 2 sum(x)) * 2^(kBits - 1). Aligned quants keep
// the quant part of every float comparable to the constant 2, so the subtraction loses
// a bit or two at most. 8-bit quants (kBits 8) are read exactly (2^23 + byte - 2^23).
//
// For each quantized type QDot<T> has kBits, Raw (the unit's bytes and header, loaded
// by load(blk, s)) and run(raw, r, words, &scale, &minv) giving run r's kRunLen / 4
// words. The float types (FloatDot) instead give their values (kFloat).
#pragma once

#include "backends/cuda/quant_blocks.cuh"

namespace hearth::cuda::qk {

// Byte k (0..3) of w (below 128) as the float 2 + byte / 64.
__device__ __forceinline__ float byte_f(uint32_t w, int k) {
  return __uint_as_float(__byte_perm(w, 0x40000000u, 0x7044u | (static_cast<uint32_t>(k) << 8)));
}
// Byte k (0..3) of w as an exact float.
__device__ __forceinline__ float byte_exact(uint32_t w, int k) {
  return __uint_as_float(__byte_perm(w, 0x4b000000u, 0x7650u | static_cast<uint32_t>(k))) - 8388608.f;
}
// Bits 0..3 of x moved to bit 0 of bytes 0..3.
__device__ __forceinline__ uint32_t spread4(uint32_t x) { return (x * 0x00204081u) & 0x01010101u; }

constexpr uint32_t kLo4 = 0x0f0f0f0fu;
// Low (r = 0) or high (r = 1) nibbles of w, each at bits 3..6 of its byte.
__device__ __forceinline__ uint32_t nibbles(uint32_t w, int r) {
  return (r ? (w >> 1) : (w << 3)) & 0x78787878u;
}

template <GgmlType T>
struct QDot;

template <GgmlType T, int E>
struct FloatDot : FloatType<T, E> {
  static constexpr bool kFloat = true;
  struct Raw {
    float v[E];
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    Raw r;
    FloatType<T, E>::decode(blk, s, r.v);
    return r;
  }
  __device__ static void run(const Raw& raw, int, float* q, float*, float*) {
#pragma unroll
    for (int i = 0; i < E; ++i) q[i] = raw.v[i];
  }
};

// Q4_0 / IQ4_NL / MXFP4 / Q8_0 / Q4_1 / Q5_0 / Q5_1.
template <>
struct QDot<GgmlType::Q4_0> : QType<GgmlType::Q4_0> {
  static constexpr bool kFloat = false;
  static constexpr int kBits = 4;
  struct Raw {
    float d;
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) { return {ld_f16(blk), ld_8_al2(blk + 2 + 8 * s)}; }
  __device__ static void run(const Raw& raw, int r, uint32_t* q, float* scale, float* minv) {
    q[0] = nibbles(raw.q.x, r);
    q[1] = nibbles(raw.q.y, r);
    *scale = raw.d;
    *minv = 8.f * raw.d;
  }
};

template <>
struct QDot<GgmlType::Q4_1> : QType<GgmlType::Q4_1> {
  static constexpr bool kFloat = false;
  static constexpr int kBits = 4;
  struct Raw {
    float d, m;
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    const uint32_t dm = ld_u32(blk);
    return {f16_bits_to_f32(dm & 0xffff), f16_bits_to_f32(dm >> 16),
            make_uint2(ld_u32(blk + 4 + 8 * s), ld_u32(blk + 8 + 8 * s))};
  }
  __device__ static void run(const Raw& raw, int r, uint32_t* q, float* scale, float* minv) {
    q[0] = nibbles(raw.q.x, r);
    q[1] = nibbles(raw.q.y, r);
    *scale = raw.d;
    *minv = -raw.m;
  }
};

template <GgmlType T>
struct Q5Dot : QType<T> {
  static constexpr bool kOne = T == GgmlType::Q5_1;
  static constexpr bool kFloat = false;
  static constexpr int kBits = 5;
  struct Raw {
    float d, m;
    uint2 q;
    uint32_t qh;  // the unit's 16 high bits: elements 8s + i (bits 0..7), 16 + 8s + i (8..15)
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    Raw r;
    uint32_t qh;
    if constexpr (kOne) {
      const uint32_t dm = ld_u32(blk);
      r.d = f16_bits_to_f32(dm & 0xffff);
      r.m = f16_bits_to_f32(dm >> 16);
      qh = ld_u32(blk + 4);
      r.q = ld_u64(blk + 8 + 8 * s);
    } else {
      r.d = ld_f16(blk);
      r.m = 0.f;
      qh = ld_u16(blk + 2) | (ld_u16(blk + 4) << 16);
      r.q = ld_8_al2(blk + 6 + 8 * s);
    }
    r.qh = ((qh >> (8 * s)) & 0xffu) | (((qh >> (16 + 8 * s)) & 0xffu) << 8);
    return r;
  }
  __device__ static void run(const Raw& raw, int r, uint32_t* q, float* scale, float* minv) {
    const int sh = 4 * r;
    const uint32_t hb = raw.qh >> (8 * r);
    q[0] = (((raw.q.x >> sh) & kLo4) | (spread4(hb & 0xf) << 4)) << 2;
    q[1] = (((raw.q.y >> sh) & kLo4) | (spread4((hb >> 4) & 0xf) << 4)) << 2;
    *scale = raw.d;
    *minv = kOne ? -raw.m : 16.f * raw.d;
  }
};
template <>
struct QDot<GgmlType::Q5_0> : Q5Dot<GgmlType::Q5_0> {};
template <>
struct QDot<GgmlType::Q5_1> : Q5Dot<GgmlType::Q5_1> {};

// The 16-entry codebooks biased by 128 into unsigned bytes (entry + 128), so that a byte
// permute gives the code's byte and the exponent trick its value.
template <GgmlType T>
struct LutDot : QType<T> {
  static constexpr bool kMx = T == GgmlType::MXFP4;
  static constexpr bool kFloat = false;
  static constexpr int kBits = 8;
  struct Raw {
    float d;
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    if constexpr (kMx) return {e8m0_half(ld_u8(blk)), ld_8_al1(blk + 1 + 8 * s)};
    else return {ld_f16(blk), ld_8_al2(blk + 2 + 8 * s)};
  }
  // Entry + 128 of nibble n.
  __device__ static uint32_t entry(uint32_t n) {
    constexpr uint32_t t0 = kMx ? 0x83828180u : 0x3f2d1801u, t1 = kMx ? 0x8c888684u : 0x766a5d4fu;
    constexpr uint32_t t2 = kMx ? 0x7d7e7f80u : 0xa6998d81u, t3 = kMx ? 0x74787a7cu : 0xf1d9c5b5u;
    const uint32_t lo = __byte_perm(t0, t1, n & 7), hi = __byte_perm(t2, t3, n & 7);
    return ((n & 8) ? hi : lo) & 0xffu;
  }
  __device__ static void run(const Raw& raw, int r, uint32_t* q, float* scale, float* minv) {
    const int sh = 4 * r;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t w = k ? raw.q.y : raw.q.x;
      uint32_t out = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) out |= entry((w >> (8 * i + sh)) & 0xf) << (8 * i);
      q[k] = out;
    }
    *scale = raw.d;
    *minv = 128.f * raw.d;
  }
};
template <>
struct QDot<GgmlType::IQ4_NL> : LutDot<GgmlType::IQ4_NL> {};
template <>
struct QDot<GgmlType::MXFP4> : LutDot<GgmlType::MXFP4> {};

template <>
struct QDot<GgmlType::Q8_0> : QType<GgmlType::Q8_0> {
  static constexpr bool kFloat = false;
  static constexpr int kBits = 8;
  struct Raw {
    float d;
    uint2 q0, q1;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    return {ld_f16(blk), ld_8_al2(blk + 2 + 16 * s), ld_8_al2(blk + 10 + 16 * s)};
  }
  __device__ static void run(const Raw& raw, int, uint32_t* q, float* scale, float* minv) {
    constexpr uint32_t kFlip = 0x80808080u;  // int8 -> int8 + 128 as unsigned
    q[0] = raw.q0.x ^ kFlip;
    q[1] = raw.q0.y ^ kFlip;
    q[2] = raw.q1.x ^ kFlip;
    q[3] = raw.q1.y ^ kFlip;
    *scale = raw.d;
    *minv = 128.f * raw.d;
  }
};

// K-quants.
template <>
struct QDot<GgmlType::Q2_K> : QType<GgmlType::Q2_K> {
  static constexpr bool kFloat = false;
  static constexpr int kBits = 2;
  struct Raw {
    float d, dmin;
    uint32_t sc;  // scale bytes of planes 0..3
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int u) {
    const int half = u >> 2, part = (u >> 1) & 1, c = u & 1;
    const uint32_t dd = ld_u32(blk + 80);
    // scales[8 half + 2 plane + part]: bytes part, part + 2, part + 4, part + 6 of 8 bytes.
    const uint2 s8 = make_uint2(ld_u32(blk + 8 * half), ld_u32(blk + 8 * half + 4));
    const uint32_t sc = __byte_perm(s8.x, s8.y, part ? 0x7531u : 0x6420u);
    const int off = 16 + 32 * half + 16 * part + 8 * c;
    return {f16_bits_to_f32(dd & 0xffff), f16_bits_to_f32(dd >> 16), sc,
            make_uint2(ld_u32(blk + off), ld_u32(blk + off + 4))};
  }
  __device__ static void run(const Raw& raw, int p, uint32_t* q, float* scale, float* minv) {
    q[0] = (p < 3 ? raw.q.x << (5 - 2 * p) : raw.q.x >> 1) & 0x60606060u;
    q[1] = (p < 3 ? raw.q.y << (5 - 2 * p) : raw.q.y >> 1) & 0x60606060u;
    const uint32_t sc = byte_of(raw.sc, p);
    *scale = raw.d * static_cast<float>(sc & 0xf);
    *minv = raw.dmin * static_cast<float>(sc >> 4);
  }
};

template <>
struct QDot<GgmlType::Q3_K> : QType<GgmlType::Q3_K> {
  static constexpr bool kFloat = false;
  static constexpr int kBits = 3;
  struct Raw {
    float ds[4];
    uint2 q, hm;
    int hshift;
  };
  __device__ static Raw load(const uint8_t* blk, int u) {
    const int half = u >> 2, part = (u >> 1) & 1, c = u & 1;
    Raw r;
    const float d = ld_f16(blk + 108);
    const uint2 lo8 = ld_8_al2(blk + 96);
    const uint32_t hi4 = ld_u16(blk + 104) | (ld_u16(blk + 106) << 16);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int sb = 8 * half + 2 * p + part;
      const uint32_t low = sb < 8 ? (byte_of(lo8, sb) & 0xf) : (byte_of(lo8, sb - 8) >> 4);
      const uint32_t high = (byte_of(hi4, sb % 4) >> (2 * (sb / 4))) & 3;
      r.ds[p] = d * static_cast<float>(static_cast<int>(low | (high << 4)) - 32);
    }
    r.q = ld_8_al2(blk + 32 + 32 * half + 16 * part + 8 * c);
    r.hm = ld_8_al2(blk + 16 * part + 8 * c);
    r.hshift = 4 * half;
    return r;
  }
  __device__ static void run(const Raw& raw, int p, uint32_t* q, float* scale, float* minv) {
    const int hs = raw.hshift + p;
    // low 2 bits | high bit << 2: value + 4.
    q[0] = (((raw.q.x >> (2 * p)) & 0x03030303u) | (((raw.hm.x >> hs) & 0x01010101u) << 2)) << 4;
    q[1] = (((raw.q.y >> (2 * p)) & 0x03030303u) | (((raw.hm.y >> hs) & 0x01010101u) << 2)) << 4;
    *scale = raw.ds[p];
    *minv = 4.f * raw.ds[p];
  }
};

template <GgmlType T>
struct K45Dot : QType<T> {
  static constexpr bool kFive = T == GgmlType::Q5_K;
  static constexpr bool kFloat = false;
  static constexpr int kBits = kFive ? 5 : 4;
  struct Raw {
    float d[2], m[2];
    uint4 q, qh;
    int p;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    Raw r;
    const int p = s >> 1, h = s & 1;
    const uint4 head = ld_u128(blk);  // d, dmin, scales[12]
    const float d = f16_bits_to_f32(head.x & 0xffff), dmin = f16_bits_to_f32(head.x >> 16);
    const uint32_t scales[3] = {head.y, head.z, head.w};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      uint32_t sc, m;
      k4_scale_min(2 * p + k, scales, &sc, &m);
      r.d[k] = d * static_cast<float>(sc);
      r.m[k] = dmin * static_cast<float>(m);
    }
    r.q = ld_u128(blk + (kFive ? 48 : 16) + 16 * s);
    if constexpr (kFive) r.qh = ld_u128(blk + 16 + 16 * h);
    r.p = p;
    return r;
  }
  __device__ static void run(const Raw& raw, int k, uint32_t* q, float* scale, float* minv) {
    const uint32_t w[4] = {raw.q.x, raw.q.y, raw.q.z, raw.q.w};
    const uint32_t hw[4] = {raw.qh.x, raw.qh.y, raw.qh.z, raw.qh.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (kFive) {
        q[j] = (((w[j] >> (4 * k)) & kLo4) | (((hw[j] >> (2 * raw.p + k)) & 0x01010101u) << 4)) << 2;
      } else {
        q[j] = nibbles(w[j], k);
      }
    }
    *scale = raw.d[k];
    *minv = raw.m[k];
  }
};
template <>
struct QDot<GgmlType::Q4_K> : K45Dot<GgmlType::Q4_K> {};
template <>
struct QDot<GgmlType::Q5_K> : K45Dot<GgmlType::Q5_K> {};

template <>
struct QDot<GgmlType::Q6_K> : QType<GgmlType::Q6_K> {
  static constexpr bool kFloat = false;
  static constexpr int kBits = 6;
  struct Raw {
    float ds[4];
    uint2 qa, qb, qh;
  };
  __device__ static Raw load(const uint8_t* blk, int u) {
    const int h = u >> 2, c = u & 3;
    Raw r;
    const float d = ld_f16(blk + 208);
    const int is = 8 * h + (c >> 1);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      r.ds[k] = d * static_cast<float>(static_cast<int8_t>(ld_u8(blk + 192 + is + 2 * k)));
    }
    r.qa = ld_8_al2(blk + 64 * h + 8 * c);
    r.qb = ld_8_al2(blk + 64 * h + 32 + 8 * c);
    r.qh = ld_8_al2(blk + 128 + 32 * h + 8 * c);
    return r;
  }
  __device__ static void run(const Raw& raw, int k, uint32_t* q, float* scale, float* minv) {
    const uint2 lo = (k & 1) ? raw.qb : raw.qa;
    const int lsh = (k >> 1) * 4;  // runs 2, 3: high nibbles
    const int hsh = 2 * k;          // qh bits 2k, 2k + 1
    const uint32_t x0 = ((lo.x >> lsh) & kLo4) | (((raw.qh.x >> hsh) & 0x03030303u) << 4);
    const uint32_t x1 = ((lo.y >> lsh) & kLo4) | (((raw.qh.y >> hsh) & 0x03030303u) << 4);
    q[0] = x0 << 1;
    q[1] = x1 << 1;
    *scale = raw.ds[k];
    *minv = 32.f * raw.ds[k];
  }
};

}  // namespace hearth::cuda::qk

// Fast decoding for the matrix-vector product: each run of a unit (see
// quant_blocks.cuh) as small integers q held exactly in floats, with the run's
// scale and min, so that element = scale * q - min (equal as real numbers to the
// exact decode, not rounded the same way). The product then needs per element only
// a byte permute, a subtract and one FMA per token, and per run one or two FMAs.
// Integers become floats through the exponent trick (2^23 + byte, read as a float,
// minus 2^23), cheaper than the conversion unit.
//
// For each type, QDot<T> has:
//   kHasScale / kHasMin   whether the scale / min apply (float types: neither),
//   Raw                   the unit's bytes and header, loaded by load(blk, s),
//   run(raw, r, q, &scale, &minv)  run r's kRunLen values q and its scale and min.
// The unit layout (kSubs, kRuns, kRunLen, run_col) is that of QType<T>.
#pragma once

#include "backends/cuda/quant_blocks.cuh"

namespace hearth::cuda::qk {

// Byte k (0..3) of w, minus `off`, as an exact float.
__device__ __forceinline__ float byte_f(uint32_t w, int k, float off) {
  return __uint_as_float(__byte_perm(w, 0x4b000000u, 0x7650u | static_cast<uint32_t>(k))) - (8388608.f + off);
}
// The 4 bytes of w (k = 0..3) as floats minus off, into q[0..3].
__device__ __forceinline__ void bytes_f(uint32_t w, float off, float* q) {
#pragma unroll
  for (int k = 0; k < 4; ++k) q[k] = byte_f(w, k, off);
}
// Bits 0..3 of x moved to bit 0 of bytes 0..3.
__device__ __forceinline__ uint32_t spread4(uint32_t x) { return (x * 0x00204081u) & 0x01010101u; }

constexpr uint32_t kLo4 = 0x0f0f0f0fu;

template <GgmlType T>
struct QDot;

template <GgmlType T, int E>
struct FloatDot : FloatType<T, E> {
  static constexpr bool kHasScale = false, kHasMin = false;
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
  static constexpr bool kHasScale = true, kHasMin = false;
  struct Raw {
    float d;
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) { return {ld_f16(blk), ld_8_al2(blk + 2 + 8 * s)}; }
  __device__ static void run(const Raw& raw, int r, float* q, float* scale, float*) {
    const int sh = 4 * r;
    bytes_f((raw.q.x >> sh) & kLo4, 8.f, q);
    bytes_f((raw.q.y >> sh) & kLo4, 8.f, q + 4);
    *scale = raw.d;
  }
};

template <>
struct QDot<GgmlType::Q4_1> : QType<GgmlType::Q4_1> {
  static constexpr bool kHasScale = true, kHasMin = true;
  struct Raw {
    float d, m;
    uint2 q;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    const uint32_t dm = ld_u32(blk);
    return {f16_bits_to_f32(dm & 0xffff), f16_bits_to_f32(dm >> 16),
            make_uint2(ld_u32(blk + 4 + 8 * s), ld_u32(blk + 8 + 8 * s))};
  }
  __device__ static void run(const Raw& raw, int r, float* q, float* scale, float* minv) {
    const int sh = 4 * r;
    bytes_f((raw.q.x >> sh) & kLo4, 0.f, q);
    bytes_f((raw.q.y >> sh) & kLo4, 0.f, q + 4);
    *scale = raw.d;
    *minv = -raw.m;
  }
};

template <GgmlType T>
struct Q5Dot : QType<T> {
  static constexpr bool kOne = T == GgmlType::Q5_1;
  static constexpr bool kHasScale = true, kHasMin = kOne;
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
  __device__ static void run(const Raw& raw, int r, float* q, float* scale, float* minv) {
    const int sh = 4 * r;
    const uint32_t hb = raw.qh >> (8 * r);
    const float off = kOne ? 0.f : 16.f;
    bytes_f(((raw.q.x >> sh) & kLo4) | (spread4(hb & 0xf) << 4), off, q);
    bytes_f(((raw.q.y >> sh) & kLo4) | (spread4((hb >> 4) & 0xf) << 4), off, q + 4);
    *scale = raw.d;
    if constexpr (kOne) *minv = -raw.m;
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
  static constexpr bool kHasScale = true, kHasMin = false;
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
  __device__ static void run(const Raw& raw, int r, float* q, float* scale, float*) {
    const int sh = 4 * r;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t w = i < 4 ? raw.q.x : raw.q.y;
      const uint32_t n = (w >> (8 * (i & 3) + sh)) & 0xf;
      q[i] = __uint_as_float(0x4b000000u | entry(n)) - (8388608.f + 128.f);
    }
    *scale = raw.d;
  }
};
template <>
struct QDot<GgmlType::IQ4_NL> : LutDot<GgmlType::IQ4_NL> {};
template <>
struct QDot<GgmlType::MXFP4> : LutDot<GgmlType::MXFP4> {};

template <>
struct QDot<GgmlType::Q8_0> : QType<GgmlType::Q8_0> {
  static constexpr bool kHasScale = true, kHasMin = false;
  struct Raw {
    float d;
    uint2 q0, q1;
  };
  __device__ static Raw load(const uint8_t* blk, int s) {
    return {ld_f16(blk), ld_8_al2(blk + 2 + 16 * s), ld_8_al2(blk + 10 + 16 * s)};
  }
  __device__ static void run(const Raw& raw, int, float* q, float* scale, float*) {
    constexpr uint32_t kFlip = 0x80808080u;  // int8 -> int8 + 128 as unsigned
    bytes_f(raw.q0.x ^ kFlip, 128.f, q);
    bytes_f(raw.q0.y ^ kFlip, 128.f, q + 4);
    bytes_f(raw.q1.x ^ kFlip, 128.f, q + 8);
    bytes_f(raw.q1.y ^ kFlip, 128.f, q + 12);
    *scale = raw.d;
  }
};

// K-quants.
template <>
struct QDot<GgmlType::Q2_K> : QType<GgmlType::Q2_K> {
  static constexpr bool kHasScale = true, kHasMin = true;
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
  __device__ static void run(const Raw& raw, int p, float* q, float* scale, float* minv) {
    bytes_f((raw.q.x >> (2 * p)) & 0x03030303u, 0.f, q);
    bytes_f((raw.q.y >> (2 * p)) & 0x03030303u, 0.f, q + 4);
    const uint32_t sc = byte_of(raw.sc, p);
    *scale = raw.d * static_cast<float>(sc & 0xf);
    *minv = raw.dmin * static_cast<float>(sc >> 4);
  }
};

template <>
struct QDot<GgmlType::Q3_K> : QType<GgmlType::Q3_K> {
  static constexpr bool kHasScale = true, kHasMin = false;
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
  __device__ static void run(const Raw& raw, int p, float* q, float* scale, float*) {
    const int hs = raw.hshift + p;
    // low 2 bits | high bit << 2: value + 4.
    bytes_f(((raw.q.x >> (2 * p)) & 0x03030303u) | (((raw.hm.x >> hs) & 0x01010101u) << 2), 4.f, q);
    bytes_f(((raw.q.y >> (2 * p)) & 0x03030303u) | (((raw.hm.y >> hs) & 0x01010101u) << 2), 4.f, q + 4);
    *scale = raw.ds[p];
  }
};

template <GgmlType T>
struct K45Dot : QType<T> {
  static constexpr bool kFive = T == GgmlType::Q5_K;
  static constexpr bool kHasScale = true, kHasMin = true;
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
  __device__ static void run(const Raw& raw, int k, float* q, float* scale, float* minv) {
    const uint32_t w[4] = {raw.q.x, raw.q.y, raw.q.z, raw.q.w};
    const uint32_t hw[4] = {raw.qh.x, raw.qh.y, raw.qh.z, raw.qh.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t b = (w[j] >> (4 * k)) & kLo4;
      if constexpr (kFive) b |= ((hw[j] >> (2 * raw.p + k)) & 0x01010101u) << 4;
      bytes_f(b, 0.f, q + 4 * j);
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
  static constexpr bool kHasScale = true, kHasMin = false;
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
  __device__ static void run(const Raw& raw, int k, float* q, float* scale, float*) {
    const uint2 lo = (k & 1) ? raw.qb : raw.qa;
    const int lsh = (k >> 1) * 4;  // runs 2, 3: high nibbles
    const int hsh = 2 * k;          // qh bits 2k, 2k + 1
    const uint32_t x0 = ((lo.x >> lsh) & kLo4) | (((raw.qh.x >> hsh) & 0x03030303u) << 4);
    const uint32_t x1 = ((lo.y >> lsh) & kLo4) | (((raw.qh.y >> hsh) & 0x03030303u) << 4);
    bytes_f(x0, 32.f, q);
    bytes_f(x1, 32.f, q + 4);
    *scale = raw.ds[k];
  }
};

}  // namespace hearth::cuda::qk

// Device-side decoding of the GGUF block types, one "unit" (a lane's share of a
// block) at a time. Internal to the quant_*.cu kernels.
//
// Every type is described by a traits struct QType<T> (T a GgmlType):
//   kElems  elements per block, kBytes bytes per block,
//   kSubs   units per block (a unit is what one thread decodes in one go),
//   kRuns x kRunLen = kPer elements per unit, stored as kRuns runs of kRunLen
//           consecutive columns; run r of unit s starts at column run_col(s, r)
//           of the block,
//   decode(blk, s, v)  writes the unit's values, v[r * kRunLen + i] being the
//           element at column run_col(s, r) + i of the block.
// decode computes each value with the same float operations, in the same order and
// without contraction into FMAs, as the CPU reference (src/quant/dequant_*.cpp), so
// its results are bit-identical with it. Loads are as wide as the block's alignment
// in a row allows (rows start at multiples of kBytes from a 256-byte aligned base).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "format/ggml_types.h"

namespace hearth::cuda::qk {

// ---- loads -----------------------------------------------------------------------

__device__ __forceinline__ uint32_t ld_u8(const uint8_t* p) { return __ldg(p); }
__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}
__device__ __forceinline__ uint2 ld_u64(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint2*>(p));
}
__device__ __forceinline__ uint4 ld_u128(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
// 8 bytes at a 2-byte aligned address, as two little-endian words.
__device__ __forceinline__ uint2 ld_8_al2(const uint8_t* p) {
  const uint32_t a = ld_u16(p), b = ld_u16(p + 2), c = ld_u16(p + 4), d = ld_u16(p + 6);
  return make_uint2(a | (b << 16), c | (d << 16));
}
// 8 bytes at any address.
__device__ __forceinline__ uint2 ld_8_al1(const uint8_t* p) {
  uint32_t w[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    w[k] = ld_u8(p + 4 * k) | (ld_u8(p + 4 * k + 1) << 8) | (ld_u8(p + 4 * k + 2) << 16) |
           (ld_u8(p + 4 * k + 3) << 24);
  }
  return make_uint2(w[0], w[1]);
}

__device__ __forceinline__ float f16_bits_to_f32(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
__device__ __forceinline__ float ld_f16(const uint8_t* p) { return f16_bits_to_f32(ld_u16(p)); }

// Byte i (0..3) of a word.
__device__ __forceinline__ uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xffu; }
// Byte i (0..7) of two words.
__device__ __forceinline__ uint32_t byte_of(uint2 w, int i) { return byte_of(i < 4 ? w.x : w.y, i & 3); }
// Byte i (0..15) of four words.
__device__ __forceinline__ uint32_t byte_of(uint4 w, int i) {
  const uint32_t word = i < 4 ? w.x : i < 8 ? w.y : i < 12 ? w.z : w.w;
  return byte_of(word, i & 3);
}

// Signed 8-bit entry n (0..15) of a 16-entry table packed little-endian in t0..t3,
// by byte permutes (no memory access, so no divergence on the index).
__device__ __forceinline__ int lut16(uint32_t n, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
  const uint32_t lo = __byte_perm(t0, t1, n & 7);
  const uint32_t hi = __byte_perm(t2, t3, n & 7);
  return static_cast<int8_t>((n & 8) ? hi : lo);
}
// kValuesIQ4NL: -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113.
__device__ __forceinline__ int iq4nl_value(uint32_t n) {
  return lut16(n, 0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
}
// kValuesFP4 (E2M1 doubled): 0 1 2 3 4 6 8 12 0 -1 -2 -3 -4 -6 -8 -12.
__device__ __forceinline__ int fp4_value(uint32_t n) {
  return lut16(n, 0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
}

// 2^(e-128), ggml's ggml_e8m0_to_fp32_half.
__device__ __forceinline__ float e8m0_half(uint32_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : ((e - 1) << 23);
  return __uint_as_float(bits);
}

// The exact float of a small integer (|v| < 2^22): 1.5 * 2^23 + v read as a float,
// minus 1.5 * 2^23; an integer add and a float subtract instead of the slower
// conversion unit.
__device__ __forceinline__ float i2f(int v) { return __int_as_float(0x4b400000 + v) - 12582912.f; }
__device__ __forceinline__ float i2f(uint32_t v) { return i2f(static_cast<int>(v)); }

// Exact-order float helpers (no FMA contraction).
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

// 6-bit scale and min j (0..7) of a Q4_K / Q5_K block, from its 12 scale bytes
// given as three little-endian words.
__device__ __forceinline__ void k4_scale_min(int j, const uint32_t s[3], uint32_t* sc, uint32_t* m) {
  // Words chosen by selects, not by a run-time array index (which would go to local memory).
  auto b = [&](int i) {
    const int k = i >> 2;
    return byte_of(k == 0 ? s[0] : k == 1 ? s[1] : s[2], i & 3);
  };
  if (j < 4) {
    *sc = b(j) & 63;
    *m = b(j + 4) & 63;
  } else {
    *sc = (b(j + 4) & 0xf) | ((b(j - 4) >> 6) << 4);
    *m = (b(j + 4) >> 4) | ((b(j) >> 6) << 4);
  }
}

// ---- type traits -------------------------------------------------------------------

template <GgmlType T>
struct QType;

// Float types: a "block" of E elements (8: 16-byte loads, needs n_cols % 8 == 0; 1: any).
template <GgmlType T, int E>
struct FloatType {
  static constexpr int kElemBytes = T == GgmlType::F32 ? 4 : 2;
  static constexpr int kElems = E, kBytes = E * kElemBytes, kSubs = 1, kRuns = 1, kRunLen = E, kPer = E;
  __device__ static int run_col(int, int) { return 0; }
  __device__ static void decode(const uint8_t* blk, int, float* v) {
    if constexpr (T == GgmlType::F32) {
      if constexpr (E % 4 == 0) {
#pragma unroll
        for (int k = 0; k < E / 4; ++k) {
          const uint4 w = ld_u128(blk + 16 * k);
          v[4 * k] = __uint_as_float(w.x);
          v[4 * k + 1] = __uint_as_float(w.y);
          v[4 * k + 2] = __uint_as_float(w.z);
          v[4 * k + 3] = __uint_as_float(w.w);
        }
      } else {
#pragma unroll
        for (int k = 0; k < E; ++k) v[k] = __uint_as_float(ld_u32(blk + 4 * k));
      }
    } else {
      uint32_t h[E];
      if constexpr (E % 8 == 0) {
#pragma unroll
        for (int k = 0; k < E / 8; ++k) {
          const uint4 w = ld_u128(blk + 16 * k);
          const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            h[8 * k + 2 * i] = ws[i] & 0xffffu;
            h[8 * k + 2 * i + 1] = ws[i] >> 16;
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < E; ++k) h[k] = ld_u16(blk + 2 * k);
      }
#pragma unroll
      for (int k = 0; k < E; ++k) {
        v[k] = T == GgmlType::F16 ? f16_bits_to_f32(h[k]) : __uint_as_float(h[k] << 16);
      }
    }
  }
};

// Legacy 4/5-bit blocks of 32: unit s (0, 1) holds qs bytes [8s, 8s + 8): low nibbles are
// elements 8s + i (run 0), high nibbles 16 + 8s + i (run 1).
struct Legacy4Layout {
  static constexpr int kElems = 32, kSubs = 2, kRuns = 2, kRunLen = 8, kPer = 16;
  __device__ static int run_col(int s, int r) { return 16 * r + 8 * s; }
};

template <>
struct QType<GgmlType::Q4_0> : Legacy4Layout {
  static constexpr int kBytes = 18;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const float d = ld_f16(blk);
    const uint2 q = ld_8_al2(blk + 2 + 8 * s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t b = byte_of(q, i);
      v[i] = mul(i2f(static_cast<int>(b & 0xf) - 8), d);
      v[8 + i] = mul(i2f(static_cast<int>(b >> 4) - 8), d);
    }
  }
};

template <>
struct QType<GgmlType::Q4_1> : Legacy4Layout {
  static constexpr int kBytes = 20;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const uint32_t dm = ld_u32(blk);
    const float d = f16_bits_to_f32(dm & 0xffff), m = f16_bits_to_f32(dm >> 16);
    const uint32_t q0 = ld_u32(blk + 4 + 8 * s), q1 = ld_u32(blk + 8 + 8 * s);
    const uint2 qq = make_uint2(q0, q1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t b = byte_of(qq, i);
      v[i] = add(mul(i2f(b & 0xf), d), m);
      v[8 + i] = add(mul(i2f(b >> 4), d), m);
    }
  }
};

template <>
struct QType<GgmlType::Q5_0> : Legacy4Layout {
  static constexpr int kBytes = 22;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const float d = ld_f16(blk);
    const uint32_t qh = ld_u16(blk + 2) | (ld_u16(blk + 4) << 16);
    const uint2 q = ld_8_al2(blk + 6 + 8 * s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int j = 8 * s + i;
      const uint32_t b = byte_of(q, i);
      const int lo = static_cast<int>((b & 0xf) | (((qh >> j) & 1u) << 4)) - 16;
      const int hi = static_cast<int>((b >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
      v[i] = mul(i2f(lo), d);
      v[8 + i] = mul(i2f(hi), d);
    }
  }
};

template <>
struct QType<GgmlType::Q5_1> : Legacy4Layout {
  static constexpr int kBytes = 24;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const uint32_t dm = ld_u32(blk);
    const float d = f16_bits_to_f32(dm & 0xffff), m = f16_bits_to_f32(dm >> 16);
    const uint32_t qh = ld_u32(blk + 4);
    const uint2 q = ld_u64(blk + 8 + 8 * s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int j = 8 * s + i;
      const uint32_t b = byte_of(q, i);
      const uint32_t lo = (b & 0xf) | (((qh >> j) & 1u) << 4);
      const uint32_t hi = (b >> 4) | (((qh >> (j + 16)) & 1u) << 4);
      v[i] = add(mul(i2f(lo), d), m);
      v[8 + i] = add(mul(i2f(hi), d), m);
    }
  }
};

template <>
struct QType<GgmlType::IQ4_NL> : Legacy4Layout {
  static constexpr int kBytes = 18;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const float d = ld_f16(blk);
    const uint2 q = ld_8_al2(blk + 2 + 8 * s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t b = byte_of(q, i);
      v[i] = mul(d, i2f(iq4nl_value(b & 0xf)));
      v[8 + i] = mul(d, i2f(iq4nl_value(b >> 4)));
    }
  }
};

template <>
struct QType<GgmlType::MXFP4> : Legacy4Layout {
  static constexpr int kBytes = 17;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const float d = e8m0_half(ld_u8(blk));
    const uint2 q = ld_8_al1(blk + 1 + 8 * s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t b = byte_of(q, i);
      v[i] = mul(i2f(fp4_value(b & 0xf)), d);
      v[8 + i] = mul(i2f(fp4_value(b >> 4)), d);
    }
  }
};

// Q8_0: unit s (0, 1) is elements [16s, 16s + 16).
template <>
struct QType<GgmlType::Q8_0> {
  static constexpr int kElems = 32, kBytes = 34, kSubs = 2, kRuns = 1, kRunLen = 16, kPer = 16;
  __device__ static int run_col(int s, int) { return 16 * s; }
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const float d = ld_f16(blk);
    const uint2 q0 = ld_8_al2(blk + 2 + 16 * s), q1 = ld_8_al2(blk + 10 + 16 * s);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = mul(i2f(static_cast<int>(static_cast<int8_t>(byte_of(q0, i)))), d);
      v[8 + i] = mul(i2f(static_cast<int>(static_cast<int8_t>(byte_of(q1, i)))), d);
    }
  }
};

// Q2_K / Q3_K: element 128 * half + 32 * plane + 16 * part + l comes from bits 2 * plane of
// qs byte 32 * half + 16 * part + l. Unit u (0..7): half = u / 4, part = (u / 2) % 2,
// l in [8c, 8c + 8) with c = u % 2; run r is plane r.
struct K2Layout {
  static constexpr int kElems = 256, kSubs = 8, kRuns = 4, kRunLen = 8, kPer = 32;
  __device__ static int run_col(int u, int r) {
    return 128 * (u >> 2) + 32 * r + 16 * ((u >> 1) & 1) + 8 * (u & 1);
  }
};

template <>
struct QType<GgmlType::Q2_K> : K2Layout {
  static constexpr int kBytes = 84;
  __device__ static void decode(const uint8_t* blk, int u, float* v) {
    const int half = u >> 2, part = (u >> 1) & 1, c = u & 1;
    const uint32_t dd = ld_u32(blk + 80);
    const float d = f16_bits_to_f32(dd & 0xffff), dmin = f16_bits_to_f32(dd >> 16);
    const uint32_t q0 = ld_u32(blk + 16 + 32 * half + 16 * part + 8 * c);
    const uint32_t q1 = ld_u32(blk + 20 + 32 * half + 16 * part + 8 * c);
    const uint2 qq = make_uint2(q0, q1);
#pragma unroll
    for (int plane = 0; plane < 4; ++plane) {
      const uint32_t sc = ld_u8(blk + 8 * half + 2 * plane + part);
      const float dl = mul(d, static_cast<float>(sc & 0xf));
      const float ml = mul(dmin, static_cast<float>(sc >> 4));
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t qv = (byte_of(qq, i) >> (2 * plane)) & 3;
        v[8 * plane + i] = sub(mul(dl, i2f(qv)), ml);
      }
    }
  }
};

template <>
struct QType<GgmlType::Q3_K> : K2Layout {
  static constexpr int kBytes = 110;
  __device__ static void decode(const uint8_t* blk, int u, float* v) {
    const int half = u >> 2, part = (u >> 1) & 1, c = u & 1;
    const float d = ld_f16(blk + 108);
    const uint2 q = ld_8_al2(blk + 32 + 32 * half + 16 * part + 8 * c);
    const uint2 hm = ld_8_al2(blk + 16 * part + 8 * c);
#pragma unroll
    for (int plane = 0; plane < 4; ++plane) {
      const int sub_block = 8 * half + 2 * plane + part;
      const uint32_t low = sub_block < 8 ? (ld_u8(blk + 96 + sub_block) & 0xf)
                                         : (ld_u8(blk + 96 + sub_block - 8) >> 4);
      const uint32_t high = (ld_u8(blk + 104 + sub_block % 4) >> (2 * (sub_block / 4))) & 3;
      const int scale = static_cast<int>(low | (high << 4)) - 32;
      const float dl = mul(d, static_cast<float>(scale));
      const int hbit = 4 * half + plane;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int low2 = static_cast<int>((byte_of(q, i) >> (2 * plane)) & 3);
        const int qv = low2 - (((byte_of(hm, i) >> hbit) & 1) ? 0 : 4);
        v[8 * plane + i] = mul(dl, i2f(qv));
      }
    }
  }
};

// Q4_K / Q5_K: unit s (0..7) holds qs bytes [16s, 16s + 16): pair p = s / 2, h = s % 2; low
// nibbles are elements 64p + 16h + i (run 0, sub-block 2p), high nibbles 64p + 32 + 16h + i
// (run 1, sub-block 2p + 1).
struct K4Layout {
  static constexpr int kElems = 256, kSubs = 8, kRuns = 2, kRunLen = 16, kPer = 32;
  __device__ static int run_col(int s, int r) { return 64 * (s >> 1) + 32 * r + 16 * (s & 1); }
};

template <GgmlType T>
struct K45Type : K4Layout {
  static constexpr bool kFive = T == GgmlType::Q5_K;
  static constexpr int kBytes = kFive ? 176 : 144;
  __device__ static void decode(const uint8_t* blk, int s, float* v) {
    const int p = s >> 1, h = s & 1;
    const uint32_t dd = ld_u32(blk);
    const float d = f16_bits_to_f32(dd & 0xffff), dmin = f16_bits_to_f32(dd >> 16);
    const uint32_t scales[3] = {ld_u32(blk + 4), ld_u32(blk + 8), ld_u32(blk + 12)};
    uint32_t sc, m;
    k4_scale_min(2 * p, scales, &sc, &m);
    const float d1 = mul(d, static_cast<float>(sc)), m1 = mul(dmin, static_cast<float>(m));
    k4_scale_min(2 * p + 1, scales, &sc, &m);
    const float d2 = mul(d, static_cast<float>(sc)), m2 = mul(dmin, static_cast<float>(m));
    const uint4 q = ld_u128(blk + (kFive ? 48 : 16) + 16 * s);
    uint4 qh = make_uint4(0, 0, 0, 0);
    if constexpr (kFive) qh = ld_u128(blk + 16 + 16 * h);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t b = byte_of(q, i);
      uint32_t lo = b & 0xf, hi = b >> 4;
      if constexpr (kFive) {
        const uint32_t hb = byte_of(qh, i);
        lo += ((hb >> (2 * p)) & 1) ? 16 : 0;
        hi += ((hb >> (2 * p + 1)) & 1) ? 16 : 0;
      }
      v[i] = sub(mul(d1, i2f(lo)), m1);
      v[16 + i] = sub(mul(d2, i2f(hi)), m2);
    }
  }
};
template <>
struct QType<GgmlType::Q4_K> : K45Type<GgmlType::Q4_K> {};
template <>
struct QType<GgmlType::Q5_K> : K45Type<GgmlType::Q5_K> {};

// Q6_K: unit u (0..7): half h = u / 4, l in [8c, 8c + 8) with c = u % 4; run k (0..3) is
// elements 128h + 32k + l.
template <>
struct QType<GgmlType::Q6_K> {
  static constexpr int kElems = 256, kBytes = 210, kSubs = 8, kRuns = 4, kRunLen = 8, kPer = 32;
  __device__ static int run_col(int u, int r) { return 128 * (u >> 2) + 32 * r + 8 * (u & 3); }
  __device__ static void decode(const uint8_t* blk, int u, float* v) {
    const int h = u >> 2, c = u & 3;
    const float d = ld_f16(blk + 208);
    const uint2 qa = ld_8_al2(blk + 64 * h + 8 * c);
    const uint2 qb = ld_8_al2(blk + 64 * h + 32 + 8 * c);
    const uint2 qh = ld_8_al2(blk + 128 + 32 * h + 8 * c);
    const int is = 8 * h + (c >> 1);
    float ds[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      ds[k] = mul(d, static_cast<float>(static_cast<int8_t>(ld_u8(blk + 192 + is + 2 * k))));
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t a = byte_of(qa, i), b = byte_of(qb, i), hb = byte_of(qh, i);
      const int q1 = static_cast<int>((a & 0xf) | (((hb >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((b & 0xf) | (((hb >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((a >> 4) | (((hb >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((b >> 4) | (((hb >> 6) & 3) << 4)) - 32;
      v[i] = mul(ds[0], i2f(q1));
      v[8 + i] = mul(ds[1], i2f(q2));
      v[16 + i] = mul(ds[2], i2f(q3));
      v[24 + i] = mul(ds[3], i2f(q4));
    }
  }
};

}  // namespace hearth::cuda::qk

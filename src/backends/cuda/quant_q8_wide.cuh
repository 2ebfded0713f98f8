// Decode units for the K-quant types of the decode matrix-vector product (quant_q8.cu):
// a thread decodes 64 elements of a block per unit (two whole 32-element sub-blocks), so
// that the block header (scales, mins, d) is loaded and unpacked once per 64 weights, the
// mins of Q4_K / Q5_K meet the chunk sums the quantizer stores (d * sum q) instead of a
// dp4a sum of the activations, and the quants come in 32-byte runs. Measured on the H200
// against units of 32 elements (two halves of sub-blocks; docs/BENCHMARKS.md): decode steps
// 3.3 % (8B) to 4.2 % (9B) shorter. Same interface as quant_q8_dot.cuh. Internal to
// quant_q8.cu.
#pragma once

#include "backends/cuda/quant_q8_dot.cuh"

namespace hearth::cuda::q8 {

// Sum over 32 bytes: w (8 words, 4 quants each) times the 32 activations at element off.
template <class X>
__device__ __forceinline__ int dot32(const int* w, const X& x, int off) {
  return dot16(w, x.ld(off)) + dot16(w + 4, x.ld(off + 16));
}

// 32 bytes at a 2-byte aligned address: nine aligned words, funnel-shifted by 0 or 16
// bits (the ninth word lies inside the block for every run this is used on).
__device__ __forceinline__ void ld32_a2(const uint8_t* p, int* out) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint32_t*>(a & ~static_cast<uintptr_t>(3));
  const uint32_t sh = static_cast<uint32_t>(a & 2) * 8;
  uint32_t v[9];
#pragma unroll
  for (int i = 0; i < 9; ++i) v[i] = w[i];
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = static_cast<int>(__funnelshift_r(v[i], v[i + 1], sh));
}

template <GgmlType T>
struct Q8Wide;

// Q4_K (kHigh false) and Q5_K: half d, dmin; 12 bytes of 6-bit scales and mins for 8
// sub-blocks of 32; [Q5_K: 32 bytes qh, element 64 g + 32 k + i's high bit at bit 2 g + k
// of qh[i]]; 128 bytes qs, byte 32 g + i holding elements 64 g + i (low) and 64 g + 32 + i
// (high); element = d sc q - dmin m. Unit g (0..3): qs[32 g ..
// 32 g + 32], low nibbles elements 64 g + i (sub-block 2 g), high nibbles 64 g + 32 + i
// (sub-block 2 g + 1); Q5_K's high bits from bits 2 g / 2 g + 1 of qh[i].
template <bool kHigh>
struct QK45Wide {
  static constexpr int kElems = 256, kBytes = kHigh ? 176 : 144, kUnits = 4;
  static constexpr int kQsAt = kHigh ? 48 : 16;
  struct Dec {
    float dl_lo, ml_lo, dl_hi, ml_hi;
    int lo[8], hi[8];
  };
  __device__ static Dec decode(const uint8_t* blk, int g) {
    const int4 head = *reinterpret_cast<const int4*>(blk);  // d, dmin, 12 bytes of scales and mins
    const int4 qa = *reinterpret_cast<const int4*>(blk + kQsAt + 32 * g);
    const int4 qb = *reinterpret_cast<const int4*>(blk + kQsAt + 32 * g + 16);
    const int q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    const int sc3[3] = {head.y, head.z, head.w};
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&head.x));
    const float2 lo = k4_sub_scales(sc3, dm, 2 * g), hi = k4_sub_scales(sc3, dm, 2 * g + 1);
    Dec r;
    r.dl_lo = lo.x;
    r.ml_lo = lo.y;
    r.dl_hi = hi.x;
    r.ml_hi = hi.y;
    if constexpr (kHigh) {
      const int4 ha = *reinterpret_cast<const int4*>(blk + 16);
      const int4 hb = *reinterpret_cast<const int4*>(blk + 32);
      const int qh[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        r.lo[i] = (q[i] & kLo4) | (((qh[i] >> (2 * g)) & 0x01010101) << 4);
        r.hi[i] = ((q[i] >> 4) & kLo4) | (((qh[i] >> (2 * g + 1)) & 0x01010101) << 4);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        r.lo[i] = q[i] & kLo4;
        r.hi[i] = (q[i] >> 4) & kLo4;
      }
    }
    return r;
  }
  // element = d sc q - dmin m, x = xd.x xq: the sum is dl xd.x (q . xq) - ml xd.y.
  template <class X>
  __device__ static float dot(const Dec& w, int g, const X& x, const float2* xd) {
    const float2 a = xd[2 * g], b = xd[2 * g + 1];
    const float lo = w.dl_lo * a.x * static_cast<float>(dot32(w.lo, x, 64 * g)) - w.ml_lo * a.y;
    const float hi = w.dl_hi * b.x * static_cast<float>(dot32(w.hi, x, 64 * g + 32)) - w.ml_hi * b.y;
    return lo + hi;
  }
};
template <>
struct Q8Wide<GgmlType::Q4_K> : QK45Wide<false> {};
template <>
struct Q8Wide<GgmlType::Q5_K> : QK45Wide<true> {};

// Q6_K: ql[128], qh[64], int8 scales[16], half d. Half n (128 elements) uses ql[64 n ..],
// qh[32 n ..], scales[8 n ..]; for l < 32: ql[l] low / high nibble -> elements l / l + 64
// (qh[l] bits 0-1 / 4-5), ql[l + 32] -> l + 32 / l + 96 (bits 2-3 / 6-7); scale index
// l / 16 + 0, 4, 2, 6 in that order; element = d sc (q - 32). Unit u = 2 n + j (0..3): ql[64 n + 32 j ..] (32
// bytes) with qh[32 n ..] (32 bytes): low nibbles elements e + i, high nibbles e + 64 + i,
// e = 128 n + 32 j; scales sc[8 n + 2 j + {0, 1}] (low, i < 16 / i >= 16) and
// sc[8 n + 2 j + {4, 5}] (high). Blocks are 2-byte aligned: ld32_a2.
template <>
struct Q8Wide<GgmlType::Q6_K> {
  static constexpr int kElems = 256, kBytes = 210, kUnits = 4;
  struct Dec {
    float d[4];
    int lo[8], hi[8];
  };
  __device__ static Dec decode(const uint8_t* blk, int u) {
    const int n = u >> 1, j = u & 1;
    int ql[8], qh[8];
    ld32_a2(blk + 64 * n + 32 * j, ql);
    ld32_a2(blk + 128 + 32 * n, qh);
    const auto* s16 = reinterpret_cast<const uint16_t*>(blk + 192 + 8 * n + 2 * j);
    const uint32_t s_lo = s16[0], s_hi = s16[2];
    const float d = half_at(blk + 208);
    Dec r;
    r.d[0] = d * static_cast<float>(static_cast<int8_t>(s_lo & 0xff));
    r.d[1] = d * static_cast<float>(static_cast<int8_t>(s_lo >> 8));
    r.d[2] = d * static_cast<float>(static_cast<int8_t>(s_hi & 0xff));
    r.d[3] = d * static_cast<float>(static_cast<int8_t>(s_hi >> 8));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      r.lo[i] = __vsub4((ql[i] & kLo4) | (((qh[i] >> (2 * j)) & 0x03030303) << 4), 0x20202020);
      r.hi[i] = __vsub4(((ql[i] >> 4) & kLo4) | (((qh[i] >> (4 + 2 * j)) & 0x03030303) << 4), 0x20202020);
    }
    return r;
  }
  template <class X>
  __device__ static float dot(const Dec& w, int u, const X& x, const float2* xd) {
    const int n = u >> 1, j = u & 1;
    const int o = 128 * n + 32 * j;
    const float lo = w.d[0] * static_cast<float>(dot16(w.lo, x.ld(o))) +
                     w.d[1] * static_cast<float>(dot16(w.lo + 4, x.ld(o + 16)));
    const float hi = w.d[2] * static_cast<float>(dot16(w.hi, x.ld(o + 64))) +
                     w.d[3] * static_cast<float>(dot16(w.hi + 4, x.ld(o + 80)));
    return xd[4 * n + j].x * lo + xd[4 * n + j + 2].x * hi;
  }
};

// Q2_K / Q3_K: the 2-bit planes of 32 bytes per 128 elements (the reference's order: half
// n, plane j, part p holds elements 128 n + 32 j + 16 p + l of byte 32 n + 16 p + l, bits
// 2 j); 16 sub-blocks of 16 elements, sub 8 n + 2 j + p. Unit u (0..3): half n = u / 2,
// planes j0 = 2 (u % 2) and j0 + 1, i.e. the 32-element chunks 4 n + j0 and 4 n + j0 + 1
// (lo: plane j0, hi: plane j0 + 1), 8 words of quants each.
__device__ __forceinline__ int sum16(const int4 x) {
  constexpr int k1 = 0x01010101;
  return __dp4a(k1, x.w, __dp4a(k1, x.z, __dp4a(k1, x.y, __dp4a(k1, x.x, 0))));
}

// Q2_K: uint8 scales[16] (low nibble scale, high nibble min), qs[64], half d, dmin
// (84 bytes, 4-byte aligned); element = d sc q - dmin m with q in 0..3. The mins meet the
// sums of 16 activations (two halves of a chunk have their own), summed by dp4a with ones.
template <>
struct Q8Wide<GgmlType::Q2_K> {
  static constexpr int kElems = 256, kBytes = 84, kUnits = 4;
  struct Dec {
    float dl[4], ml[4];
    int lo[8], hi[8];
  };
  __device__ static Dec decode(const uint8_t* blk, int u) {
    const int n = u >> 1, j0 = 2 * (u & 1);
    int q[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) q[i] = ld4(blk + 16 + 32 * n + 4 * i);
    const auto sc = static_cast<uint32_t>(ld4(blk + 8 * n + 2 * j0));  // subs 8 n + 2 j0 .. + 3
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(blk + 80));
    Dec r;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t b = (sc >> (8 * k)) & 0xffu;
      r.dl[k] = dm.x * static_cast<float>(b & 0xfu);
      r.ml[k] = dm.y * static_cast<float>(b >> 4);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      r.lo[i] = (q[i] >> (2 * j0)) & 0x03030303;
      r.hi[i] = (q[i] >> (2 * j0 + 2)) & 0x03030303;
    }
    return r;
  }
  // x = xd.x xq: a sub's sum is xd.x (dl (q . xq) - ml sum xq).
  template <class X>
  __device__ static float dot(const Dec& w, int u, const X& x, const float2* xd) {
    const int n = u >> 1, j0 = 2 * (u & 1);
    const int o = 128 * n + 32 * j0;
    const int4 x0 = x.ld(o), x1 = x.ld(o + 16), x2 = x.ld(o + 32), x3 = x.ld(o + 48);
    const float lo = w.dl[0] * static_cast<float>(dot16(w.lo, x0)) - w.ml[0] * static_cast<float>(sum16(x0)) +
                     w.dl[1] * static_cast<float>(dot16(w.lo + 4, x1)) - w.ml[1] * static_cast<float>(sum16(x1));
    const float hi = w.dl[2] * static_cast<float>(dot16(w.hi, x2)) - w.ml[2] * static_cast<float>(sum16(x2)) +
                     w.dl[3] * static_cast<float>(dot16(w.hi + 4, x3)) - w.ml[3] * static_cast<float>(sum16(x3));
    return xd[4 * n + j0].x * lo + xd[4 * n + j0 + 1].x * hi;
  }
};

// Q3_K: hmask[32] (the high bit of element 128 n + 32 j + l at bit 4 n + j of hmask[l]),
// qs[64], 12 bytes of 6-bit scales (offset by 32), half d (110 bytes, 2-byte aligned);
// element = d sc (q - 4 + 4 h) with q in 0..3: the quant with its high bit as a signed
// byte (-4..3).
template <>
struct Q8Wide<GgmlType::Q3_K> {
  static constexpr int kElems = 256, kBytes = 110, kUnits = 4;
  struct Dec {
    float dl[4];
    int lo[8], hi[8];
  };
  __device__ static Dec decode(const uint8_t* blk, int u) {
    const int n = u >> 1, j0 = 2 * (u & 1);
    int q[8], h[8];
    ld32_a2(blk + 32 + 32 * n, q);
    ld32_a2(blk, h);
    const float d = half_at(blk + 108);
    const uint8_t* sc = blk + 96;
    Dec r;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // Sub 8 n + 2 j0 + k: low 4 bits from byte 2 j0 + k (nibble n), high 2 bits from
      // byte 8 + k (bits 2 (2 n + u % 2)).
      const int low = (sc[2 * j0 + k] >> (4 * n)) & 0xf;
      const int high = (sc[8 + k] >> (2 * (2 * n + (u & 1)))) & 3;
      r.dl[k] = d * static_cast<float>((low | (high << 4)) - 32);
    }
    const int hb = 4 * n + j0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      r.lo[i] = __vsub4(((q[i] >> (2 * j0)) & 0x03030303) | (((h[i] >> hb) & 0x01010101) << 2), 0x04040404);
      r.hi[i] = __vsub4(((q[i] >> (2 * j0 + 2)) & 0x03030303) | (((h[i] >> (hb + 1)) & 0x01010101) << 2), 0x04040404);
    }
    return r;
  }
  template <class X>
  __device__ static float dot(const Dec& w, int u, const X& x, const float2* xd) {
    const int n = u >> 1, j0 = 2 * (u & 1);
    const int o = 128 * n + 32 * j0;
    const float lo = w.dl[0] * static_cast<float>(dot16(w.lo, x.ld(o))) +
                     w.dl[1] * static_cast<float>(dot16(w.lo + 4, x.ld(o + 16)));
    const float hi = w.dl[2] * static_cast<float>(dot16(w.hi, x.ld(o + 32))) +
                     w.dl[3] * static_cast<float>(dot16(w.hi + 4, x.ld(o + 48)));
    return xd[4 * n + j0].x * lo + xd[4 * n + j0 + 1].x * hi;
  }
};

}  // namespace hearth::cuda::q8

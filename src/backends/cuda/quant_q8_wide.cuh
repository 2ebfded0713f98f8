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

}  // namespace hearth::cuda::q8

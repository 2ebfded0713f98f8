// Packing of Q4_K / Q5_K / Q6_K weights into 16-row groups (packed_kquant.h), their
// activation scales, and the plain reference of the packed kernels' arithmetic.
//
// One packed super-block (256 weights of each of 16 rows). Element e of a row, with
// p = e / 64 and k = (e % 32) / 4, m = e % 4, lives in 64-byte register 8p + k at byte
// 4r + m of row r: low nibble = bits 0..3 of element 64p + 4k + m, high nibble = bits
// 0..3 of element 64p + 32 + 4k + m. For Q4_K these bytes are the block's own qs bytes,
// so one register unpacks (and, shift) into the weights of two sub-blocks of 32, and
// vpdpbusd against 4 activation bytes broadcast leaves row r's sum in lane r.
//   Q4_K: nibbles | d[16] f16 | dmin[16] f16 | scales | mins                  2368 bytes
//   Q5_K: nibbles | fifth bits (8 x 64) | d | dmin | scales | mins             2880 bytes
//   Q6_K: nibbles | top 2 bits (16 x 64) | d[16] f16 | scales (16 x 16) | pad  3392 bytes
// against 16 rows of the original type: Q4_K 2304 (1.028x), Q5_K 2816 (1.023x), Q6_K
// 3360 (1.010x) bytes. The 6-bit scales and mins are decoded at pack time into bytes,
// chunk i (32 bytes) holding for row r the pair (value 2i, value 2i + 1) at 2r: widened
// to int16 that is one 32-bit lane per row, ready for vpdpwssd against a broadcast
// pair of activation sums, and split into even / odd lanes for the scale multiply.
// Fifth bits (Q5_K), register k: byte 4r + m, bit 2p = bit 4 of element 64p + 4k + m,
// bit 2p + 1 = bit 4 of element 64p + 32 + 4k + m. Top bits (Q6_K), register 8h + k
// for p = 2h, 2h + 1: bits 4(p - 2h) .. +1 = bits 4..5 of element 64p + 4k + m, bits
// 4(p - 2h) + 2 .. +3 = those of element 64p + 32 + 4k + m.
#include "backends/cpu/packed_kquant.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "quant/blocks.h"

namespace hearth::cpu::kquant {

using namespace hearth::quant;

namespace {

// One row's super-block decoded: unsigned values (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63,
// the -32 of Q6_K left to the kernels' correction), scales, mins and raw f16 scales.
struct Decoded {
  std::array<uint8_t, kQKK> q{};
  std::array<int8_t, 16> sc{};  // Q4_K / Q5_K: 8 (0..63); Q6_K: 16 (int8)
  std::array<uint8_t, 8> m{};
  Half d{}, dmin{};
};

void decode(GgmlType type, const uint8_t* row, int64_t b, Decoded& o) {
  if (type == GgmlType::Q6_K) {
    const auto& blk = reinterpret_cast<const BlockQ6_K*>(row)[b];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      uint8_t* out = o.q.data() + 128 * h;
      for (int i = 0; i < 32; ++i) {
        out[i] = static_cast<uint8_t>((ql[i] & 0xf) | (((qh[i] >> 0) & 3) << 4));
        out[i + 32] = static_cast<uint8_t>((ql[i + 32] & 0xf) | (((qh[i] >> 2) & 3) << 4));
        out[i + 64] = static_cast<uint8_t>((ql[i] >> 4) | (((qh[i] >> 4) & 3) << 4));
        out[i + 96] = static_cast<uint8_t>((ql[i + 32] >> 4) | (((qh[i] >> 6) & 3) << 4));
      }
    }
    for (int j = 0; j < 16; ++j) o.sc[j] = blk.scales[j];
    std::memcpy(o.d, blk.d, 2);
    return;
  }
  // Q4_K and Q5_K share the nibbles and the scales; Q5_K's fifth bit of element 32j + i
  // is bit j of qh[i].
  const bool q5 = type == GgmlType::Q5_K;
  const uint8_t* qs = q5 ? reinterpret_cast<const BlockQ5_K*>(row)[b].qs : reinterpret_cast<const BlockQ4_K*>(row)[b].qs;
  const uint8_t* scales =
      q5 ? reinterpret_cast<const BlockQ5_K*>(row)[b].scales : reinterpret_cast<const BlockQ4_K*>(row)[b].scales;
  for (int e = 0; e < kQKK; ++e) {
    const int j = e / 32, i = e % 32;
    int v = (qs[32 * (j / 2) + i] >> (4 * (j % 2))) & 0xf;
    if (q5) v |= ((reinterpret_cast<const BlockQ5_K*>(row)[b].qh[i] >> j) & 1) << 4;
    o.q[e] = static_cast<uint8_t>(v);
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0, m = 0;
    k4_scale_min(j, scales, &sc, &m);
    o.sc[j] = static_cast<int8_t>(sc);
    o.m[j] = m;
  }
  if (q5) {
    std::memcpy(o.d, reinterpret_cast<const BlockQ5_K*>(row)[b].d, 2);
    std::memcpy(o.dmin, reinterpret_cast<const BlockQ5_K*>(row)[b].dmin, 2);
  } else {
    std::memcpy(o.d, reinterpret_cast<const BlockQ4_K*>(row)[b].d, 2);
    std::memcpy(o.dmin, reinterpret_cast<const BlockQ4_K*>(row)[b].dmin, 2);
  }
}

// Writes row r's decoded Q4_K / Q5_K super-block into the packed one (layout above); the
// packing uses it for Q5_K (store_q4_k / store_q6_k below copy words instead).
void store(GgmlType type, const Decoded& o, int r, uint8_t* dst) {
  const auto& q = o.q;
  for (int p = 0; p < 4; ++p) {
    for (int k = 0; k < 8; ++k) {
      for (int m = 0; m < 4; ++m) {
        const int lo = 64 * p + 4 * k + m, hi = lo + 32;
        dst[layout::kNib + (8 * p + k) * 64 + 4 * r + m] = static_cast<uint8_t>((q[lo] & 0xf) | ((q[hi] & 0xf) << 4));
        if (type == GgmlType::Q5_K) {
          dst[layout::kHigh + k * 64 + 4 * r + m] |=
              static_cast<uint8_t>((((q[lo] >> 4) & 1) << (2 * p)) | (((q[hi] >> 4) & 1) << (2 * p + 1)));
        }
      }
    }
  }
  const int d0 = type == GgmlType::Q5_K ? layout::kQ5D : layout::kQ4D;
  std::memcpy(dst + d0 + 2 * r, o.d, 2);
  std::memcpy(dst + d0 + layout::kDmin + 2 * r, o.dmin, 2);
  for (int j = 0; j < 8; ++j) {
    dst[d0 + layout::kScales + 32 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(o.sc[j]);
    dst[d0 + layout::kMins + 32 * (j / 2) + 2 * r + j % 2] = o.m[j];
  }
}

// Q4_K without decoding: the packed nibble bytes are the block's own qs bytes (element
// 64p + 4k + m and 64p + 32 + 4k + m share qs byte 32p + 4k + m), so 4-byte copies; the
// scales and mins as store() writes them. Several times faster than decode + store.
void store_q4_k(const BlockQ4_K& blk, int r, uint8_t* dst) {
  for (int p = 0; p < 4; ++p) {
    for (int k = 0; k < 8; ++k) std::memcpy(dst + layout::kNib + (8 * p + k) * 64 + 4 * r, blk.qs + 32 * p + 4 * k, 4);
  }
  std::memcpy(dst + layout::kQ4D + 2 * r, blk.d, 2);
  std::memcpy(dst + layout::kQ4D + layout::kDmin + 2 * r, blk.dmin, 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0, m = 0;
    k4_scale_min(j, blk.scales, &sc, &m);
    dst[layout::kQ4D + layout::kScales + 32 * (j / 2) + 2 * r + j % 2] = sc;
    dst[layout::kQ4D + layout::kMins + 32 * (j / 2) + 2 * r + j % 2] = m;
  }
}

// Q6_K without decoding. Element 64p + 4k + m lives in half h = p / 2 at ql[64h + 4k + m]
// (low nibble for even p, high for odd), element 64p + 32 + 4k + m at ql[64h + 32 + 4k + m]
// the same way, and the top bits of both are the low (even p) or high (odd p) half of
// qh[32h + 4k + m], which is exactly the packed top-bits byte: 4-byte word operations.
void store_q6_k(const BlockQ6_K& blk, int r, uint8_t* dst) {
  for (int p = 0; p < 4; ++p) {
    const int h = p / 2;
    for (int k = 0; k < 8; ++k) {
      const uint32_t a = load_u32(blk.ql + 64 * h + 4 * k), b = load_u32(blk.ql + 64 * h + 32 + 4 * k);
      const uint32_t v = p % 2 == 0 ? (a & 0x0f0f0f0fu) | ((b & 0x0f0f0f0fu) << 4)
                                    : ((a >> 4) & 0x0f0f0f0fu) | (b & 0xf0f0f0f0u);
      store_u32(dst + layout::kNib + (8 * p + k) * 64 + 4 * r, v);
    }
  }
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 8; ++k) std::memcpy(dst + layout::kHigh + (8 * h + k) * 64 + 4 * r, blk.qh + 32 * h + 4 * k, 4);
  }
  std::memcpy(dst + layout::kQ6D + 2 * r, blk.d, 2);
  for (int j = 0; j < 16; ++j) {
    dst[layout::kQ6Scales + 32 * (j / 2) + 2 * r + j % 2] = static_cast<uint8_t>(blk.scales[j]);
  }
}

int16_t bsum(const BlockQ8_K& x, int j) { return static_cast<int16_t>(x.bsums[2 * j] | (x.bsums[2 * j + 1] << 8)); }

}  // namespace

bool is_k_type(GgmlType type) {
  return type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
}

int64_t packed_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K: return layout::kQ4Bytes;
    case GgmlType::Q5_K: return layout::kQ5Bytes;
    case GgmlType::Q6_K: return layout::kQ6Bytes;
    default: return 0;
  }
}

std::unique_ptr<PackedWeight> pack_weight(const ops::WeightView& w, ThreadPool* pool, HugeArena* arena) {
  if (!is_k_type(w.type) || w.n_cols <= 0 || w.n_cols % kQKK != 0) {
    fail(ErrorKind::kInternal, "cpu", "tensor '" + w.name + "' cannot be packed");
  }
  // Block sizes are multiples of 64, so every 64-byte register load stays within one cache
  // line (in a single-thread microbenchmark on a busy 2-core machine the aligned start was
  // worth up to ~20% at one token). Rows past n_rows stay zero: their sums are 0.
  auto p = PackedWeight::make(w, kQKK, packed_block_bytes(w.type), arena);
  uint8_t* out = p->group(0);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for_groups(w, p->n_groups, pool, [&](int64_t g0, int64_t g1) {
    Decoded o;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t b = 0; b < p->nb; ++b) {
        uint8_t* dst = out + (g * p->nb + b) * p->block_bytes;
        for (int r = 0; r < kPackRows && g * kPackRows + r < w.n_rows; ++r) {
          const uint8_t* row = src + static_cast<uint64_t>(g * kPackRows + r) * w.row_bytes;
          if (w.type == GgmlType::Q4_K) {
            store_q4_k(reinterpret_cast<const BlockQ4_K*>(row)[b], r, dst);
            continue;
          }
          if (w.type == GgmlType::Q6_K) {
            store_q6_k(reinterpret_cast<const BlockQ6_K*>(row)[b], r, dst);
            continue;
          }
          decode(w.type, row, b, o);
          store(w.type, o, r, dst);
        }
      }
    }
  });
  return p;
}

void act_scales(GgmlType type, const uint8_t* xq_row, int64_t nb, float* d, float* s, int32_t* corr) {
  const auto* x = reinterpret_cast<const BlockQ8_K*>(xq_row);
  for (int64_t b = 0; b < nb; ++b) {
    d[b] = load_f32(x[b].d);
    s[b] = 0.0f;
    for (int k = 0; k < 8; ++k) corr[8 * b + k] = 0;
    if (type == GgmlType::Q6_K) continue;  // its kernel reads the bsums themselves
    for (int k = 0; k < 4; ++k) {
      // |P| <= 32 * 128: an int16 half each.
      const int p0 = bsum(x[b], 4 * k) + bsum(x[b], 4 * k + 1), p1 = bsum(x[b], 4 * k + 2) + bsum(x[b], 4 * k + 3);
      corr[8 * b + k] = static_cast<int32_t>((static_cast<uint32_t>(p0) & 0xffffu) | (static_cast<uint32_t>(p1) << 16));
    }
  }
}

// Per (row, token, super-block): the exact integer sums, then vec_dot's float
// expression, left to right with every product rounded to float.
void ref_matmul(const ops::WeightView& w, int64_t r0, int64_t r1, const PackedAct& a, int64_t n_tokens, float* y,
                int64_t y_stride) {
  const int64_t nb = w.n_cols / kQKK;
  const auto* src = static_cast<const uint8_t*>(w.data);
  Decoded o;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* rowp = src + static_cast<uint64_t>(r) * w.row_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_K*>(a.xq + t * a.row_bytes);
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        decode(w.type, rowp, b, o);
        const float dx = a.d[t * nb + b];
        const float dw = load_f16(o.d);
        if (w.type == GgmlType::Q6_K) {
          int32_t sumi = 0, corr = 0;
          for (int j = 0; j < 16; ++j) {
            int32_t s = 0;
            for (int i = 0; i < 16; ++i) s += o.q[16 * j + i] * x[b].qs[16 * j + i];
            sumi += o.sc[j] * s;
            corr += o.sc[j] * bsum(x[b], j);
          }
          const float v = dw * dx;
          sum = sum + v * static_cast<float>(sumi - 32 * corr);
          continue;
        }
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t s = 0;
          for (int i = 0; i < 32; ++i) s += o.q[32 * j + i] * x[b].qs[32 * j + i];
          sumi += o.sc[j] * s;
        }
        // The mins term from the packed pair sums, as the kernel reads them.
        const int32_t* c = a.corr + 8 * (t * nb + b);
        for (int k = 0; k < 4; ++k) {
          summ += o.m[2 * k] * static_cast<int16_t>(c[k] & 0xffff) + o.m[2 * k + 1] * (c[k] >> 16);
        }
        const float dm = load_f16(o.dmin);
        const float tw = (dw * dx) * static_cast<float>(sumi);
        const float tm = (dm * dx) * static_cast<float>(summ);
        sum = sum + (tw - tm);
      }
      y[t * y_stride + r] = sum;
    }
  }
}

}  // namespace hearth::cpu::kquant

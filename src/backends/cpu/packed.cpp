// Packing of Q4_0 / Q4_1 / Q8_0 weights into 16-row groups (packed.h), the activation
// scales the packed kernels read, and the plain reference of their arithmetic.
#include "backends/cpu/packed.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/packed_kquant.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "quant/blocks.h"

namespace hearth::cpu {

namespace vnni {
PackedMatmulFn find_packed(GgmlType type);  // packed_vnni.cpp; nullptr off x86
}
namespace packed_avx2 {
PackedMatmulFn find_packed(GgmlType type);  // packed_avx2.cpp; nullptr off x86
}

using namespace hearth::quant;

namespace {

// One block of 16 rows, by type:
//   Q4_1: d[16] f16 | m[16] f16 | 4 x 64 bytes
//   Q4_0: d[16] f16 |             4 x 64 bytes
//   Q8_0: d[16] f16 |             8 x 64 bytes
// 64-byte register j holds 4 bytes per row r at 4r: for Q4_x the row's qs[4j .. 4j+3]
// (low nibbles = weights 4j.., high nibbles = weights 16 + 4j..), for Q8_0 the weights
// 4j .. 4j+3 plus 128 (unsigned, for vpdpbusd).
int64_t packed_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_1:
      return 64 + 256;
    case GgmlType::Q4_0:
      return 32 + 256;
    case GgmlType::Q8_0:
      return 32 + 512;
    default:
      return 0;
  }
}

}  // namespace

std::unique_ptr<PackedWeight> PackedWeight::make(const ops::WeightView& w, int64_t block_elems, int64_t block_bytes,
                                                 HugeArena* arena) {
  auto p = std::make_unique<PackedWeight>();
  p->type = w.type;
  p->n_rows = w.n_rows;
  p->n_cols = w.n_cols;
  p->n_groups = (w.n_rows + kPackRows - 1) / kPackRows;
  p->nb = w.n_cols / block_elems;
  p->block_bytes = block_bytes;
  const auto total = static_cast<size_t>(p->n_groups * p->nb * p->block_bytes);
  if (arena != nullptr) p->base = arena->alloc(total);  // fresh pages: already zero
  if (p->base == nullptr) {
    p->own.reset(new uint8_t[total + 63]);
    p->base = p->own.get() + (64 - reinterpret_cast<uintptr_t>(p->own.get()) % 64) % 64;
    std::memset(p->base, 0, total);
  }
  return p;
}

bool packable(GgmlType type, int64_t n_cols) {
  if (kquant::is_k_type(type)) return n_cols > 0 && n_cols % kQKK == 0;
  return packed_block_bytes(type) > 0 && n_cols > 0 && n_cols % kQK == 0;
}

GgmlType packed_act_type(GgmlType type) {
  if (kquant::is_k_type(type)) return GgmlType::Q8_K;
  return type == GgmlType::Q4_1 ? GgmlType::Q8_1 : GgmlType::Q8_0;
}

void for_groups(const ops::WeightView& w, int64_t n_groups, ThreadPool* pool,
                const std::function<void(int64_t, int64_t)>& fn) {
  const auto pieces = [&](int64_t g0, int64_t g1) {
    for (int64_t a = g0; a < g1; a += 64) {
      const int64_t b = std::min(g1, a + 64);
      fn(a, b);
      const int64_t r0 = a * kPackRows, r1 = std::min(w.n_rows, b * kPackRows);
      if (r1 > r0) {
        release_mapped_pages(static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r0) * w.row_bytes,
                             static_cast<size_t>(r1 - r0) * w.row_bytes);
      }
    }
  };
  if (pool == nullptr || n_groups < 2) {
    pieces(0, n_groups);
    return;
  }
  pool->parallel_for(n_groups, 1, [&](int64_t g0, int64_t g1, int) { pieces(g0, g1); });
}

std::unique_ptr<PackedWeight> pack_weight(const ops::WeightView& w, ThreadPool* pool, HugeArena* arena) {
  if (kquant::is_k_type(w.type)) return kquant::pack_weight(w, pool, arena);
  if (!packable(w.type, w.n_cols)) {
    fail(ErrorKind::kInternal, "cpu", "tensor '" + w.name + "' cannot be packed");
  }
  auto p = PackedWeight::make(w, kQK, packed_block_bytes(w.type), arena);
  uint8_t* out = p->group(0);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for_groups(w, p->n_groups, pool, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t b = 0; b < p->nb; ++b) {
        uint8_t* dst = out + (g * p->nb + b) * p->block_bytes;
        for (int r = 0; r < kPackRows; ++r) {
          const int64_t row = g * kPackRows + r;
          if (row >= w.n_rows) {
            if (w.type == GgmlType::Q8_0) {  // a zero weight is 128 here
              for (int j = 0; j < 8; ++j) std::memset(dst + 32 + j * 64 + 4 * r, 0x80, 4);
            }
            continue;
          }
          const uint8_t* rowp = src + static_cast<uint64_t>(row) * w.row_bytes;
          if (w.type == GgmlType::Q4_1) {
            const auto& blk = reinterpret_cast<const BlockQ4_1*>(rowp)[b];
            std::memcpy(dst + 2 * r, blk.d, 2);
            std::memcpy(dst + 32 + 2 * r, blk.m, 2);
            for (int j = 0; j < 4; ++j) std::memcpy(dst + 64 + j * 64 + 4 * r, blk.qs + 4 * j, 4);
          } else if (w.type == GgmlType::Q4_0) {
            const auto& blk = reinterpret_cast<const BlockQ4_0*>(rowp)[b];
            std::memcpy(dst + 2 * r, blk.d, 2);
            for (int j = 0; j < 4; ++j) std::memcpy(dst + 32 + j * 64 + 4 * r, blk.qs + 4 * j, 4);
          } else {
            const auto& blk = reinterpret_cast<const BlockQ8_0*>(rowp)[b];
            std::memcpy(dst + 2 * r, blk.d, 2);
            for (int j = 0; j < 8; ++j) {
              for (int k = 0; k < 4; ++k) {
                dst[32 + j * 64 + 4 * r + k] =
                    static_cast<uint8_t>(static_cast<uint8_t>(blk.qs[4 * j + k]) ^ 0x80);
              }
            }
          }
        }
      }
    }
  });
  return p;
}

void packed_act_scales(GgmlType type, const uint8_t* xq_row, int64_t nb, float* d, float* s,
                       int32_t* corr) {
  if (kquant::is_k_type(type)) {
    kquant::act_scales(type, xq_row, nb, d, s, corr);
    return;
  }
  const bool q8_1 = packed_act_type(type) == GgmlType::Q8_1;
  const int32_t offset = type == GgmlType::Q8_0 ? 128 : type == GgmlType::Q4_0 ? 8 : 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qs = nullptr;
    if (q8_1) {
      const auto& x = reinterpret_cast<const BlockQ8_1*>(xq_row)[b];
      d[b] = load_f16(x.d);
      s[b] = load_f16(x.s);
      qs = x.qs;
    } else {
      const auto& x = reinterpret_cast<const BlockQ8_0*>(xq_row)[b];
      d[b] = load_f16(x.d);
      s[b] = 0.0f;
      qs = x.qs;
    }
    for (int j = 0; j < 8; ++j) {
      corr[8 * b + j] =
          kFloatMagic - offset * (qs[4 * j] + qs[4 * j + 1] + qs[4 * j + 2] + qs[4 * j + 3]);
    }
  }
}

int64_t tuned_token_block(tune::Id key) {
  const int64_t v = tune::get(key);
  return v <= 0 ? int64_t{0} : std::max<int64_t>(8, v / 8 * 8);
}

PackedMatmulFn find_packed_kernel(GgmlType type) {
#if defined(__x86_64__)  // AVX-512 VNNI (packed_*vnni.cpp), else AVX2 (packed_*avx2.cpp)
  const CpuFeatures& f = cpu_features();
  if (!(f.avx2 && f.fma && f.f16c)) return nullptr;
  if (f.avx512f && f.avx512vl && f.avx512bw && f.avx512vnni) {
    return kquant::is_k_type(type) ? kquant::find_vnni(type) : vnni::find_packed(type);
  }
  return kquant::is_k_type(type) ? kquant::find_avx2(type) : packed_avx2::find_packed(type);
#else
  (void)type;
  return nullptr;
#endif
}

namespace ref {

void packed_order_matmul(const ops::WeightView& w, int64_t r0, int64_t r1, const PackedAct& a,
                         int64_t n_tokens, float* y, int64_t y_stride) {
  if (kquant::is_k_type(w.type)) {
    kquant::ref_matmul(w, r0, r1, a, n_tokens, y, y_stride);
    return;
  }
  const int64_t nb = w.n_cols / kQK;
  const auto* src = static_cast<const uint8_t*>(w.data);
  const bool q8_1 = packed_act_type(w.type) == GgmlType::Q8_1;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* rowp = src + static_cast<uint64_t>(r) * w.row_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xrow = a.xq + t * a.row_bytes;
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      float mins = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* xq = q8_1 ? reinterpret_cast<const BlockQ8_1*>(xrow)[b].qs
                                : reinterpret_cast<const BlockQ8_0*>(xrow)[b].qs;
        int q[kQK];  // the block's weights, unsigned as the kernels multiply them
        float dw = 0.0f;
        if (w.type == GgmlType::Q8_0) {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(rowp)[b];
          for (int k = 0; k < kQK; ++k) q[k] = blk.qs[k] + 128;
          dw = load_f16(blk.d);
        } else {
          const bool q4_1 = w.type == GgmlType::Q4_1;
          const uint8_t* qs = q4_1 ? reinterpret_cast<const BlockQ4_1*>(rowp)[b].qs
                                   : reinterpret_cast<const BlockQ4_0*>(rowp)[b].qs;
          for (int k = 0; k < kQK / 2; ++k) {
            q[k] = qs[k] & 0x0f;
            q[k + 16] = qs[k] >> 4;
          }
          if (q4_1) {
            const auto& blk = reinterpret_cast<const BlockQ4_1*>(rowp)[b];
            dw = load_f16(blk.d);
            const float m = load_f16(blk.m) * a.s[t * nb + b];
            mins += m;
          } else {
            dw = load_f16(reinterpret_cast<const BlockQ4_0*>(rowp)[b].d);
          }
        }
        const float scale = dw * a.d[t * nb + b];
        for (int j = 0; j < 8; ++j) {
          int32_t p = a.corr[8 * (t * nb + b) + j];
          for (int k = 4 * j; k < 4 * j + 4; ++k) p += q[k] * xq[k];
          lane[j] = std::fma(scale, static_cast<float>(p - kFloatMagic), lane[j]);
        }
      }
      const float sum =
          ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
      y[t * y_stride + r] = w.type == GgmlType::Q4_1 ? sum + mins : sum;
    }
  }
}

}  // namespace ref
}  // namespace hearth::cpu

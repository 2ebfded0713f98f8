// Packed (16-row interleaved) Q4_K / Q5_K / Q6_K weights: what packed.cpp needs to hand
// the K-quant types to packed_kquant.cpp (packing, activation scales, plain reference)
// and packed_kquant_vnni.cpp (the AVX-512 VNNI kernels). Internal to the CPU back-end.
//
// Unlike the legacy types, a K-quant dot product is exact integer arithmetic within a
// super-block of 256 weights followed by a few float operations per super-block
// (dot_avx2.cpp). Lane r of a packed kernel keeps row r's integer sums and then runs
// that same float expression, so every output equals vec_dot bit for bit whatever the
// order of the integer additions. Activations are Q8_K; PackedAct.nb counts
// super-blocks, d[i] is the Q8_K block's scale, and for Q4_K / Q5_K corr[8 i + k],
// k < 4, holds the bsum pair sums P(2k) | P(2k + 1) << 16 as int16 halves, where
// P(j) = bsums[2j] + bsums[2j + 1] is sub-block j's sum of values (the mins term).
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/packed.h"

namespace hearth::cpu::kquant {

// Q4_K, Q5_K or Q6_K.
bool is_k_type(GgmlType type);
// Bytes of one packed super-block of 16 rows (0 for other types).
int64_t packed_block_bytes(GgmlType type);
// The packed copy of w (a K type, columns a multiple of 256); nb counts super-blocks.
std::unique_ptr<PackedWeight> pack_weight(const ops::WeightView& w, ThreadPool* pool, HugeArena* arena);
// d (the Q8_K scales), s (zeros) and corr (see above) for one token's Q8_K row.
void act_scales(GgmlType type, const uint8_t* xq_row, int64_t nb, float* d, float* s, int32_t* corr);
// ref::packed_order_matmul for the K types.
void ref_matmul(const ops::WeightView& w, int64_t r0, int64_t r1, const PackedAct& a, int64_t n_tokens, float* y,
                int64_t y_stride);
// The AVX-512 VNNI kernel (packed_kquant_vnni.cpp), nullptr off x86 or for other types.
// The caller checks the CPU's features.
PackedMatmulFn find_vnni(GgmlType type);
// The AVX2 kernel (packed_kquant_avx2.cpp), nullptr off x86 or for other types. The
// caller checks the CPU's features.
PackedMatmulFn find_avx2(GgmlType type);

// Byte offsets within one packed super-block of 16 rows (see packed_kquant.cpp).
namespace layout {
inline constexpr int kNib = 0;      // 32 x 64 bytes of low 4 bits, register 8p + k
inline constexpr int kHigh = 2048;  // Q5_K: 8 x 64 bytes of fifth bits; Q6_K: 16 x 64 of top 2 bits
// Q4_K: d | dmin | scales | mins after the nibbles; Q5_K the same after the fifth bits.
inline constexpr int kQ4D = 2048, kQ5D = 2048 + 512;
inline constexpr int kDmin = 32, kScales = 64, kMins = 64 + 128;  // relative to the d offset
inline constexpr int kQ4Bytes = kQ4D + kMins + 128;               // 2368 = 37 x 64
inline constexpr int kQ5Bytes = kQ5D + kMins + 128;               // 2880 = 45 x 64
// Q6_K: d | scales (16 x 16 bytes) after the top bits, padded to a multiple of 64.
inline constexpr int kQ6D = 2048 + 1024, kQ6Scales = kQ6D + 32;
inline constexpr int kQ6Bytes = 3392;  // 3360 used = 53 x 64 - 32
}  // namespace layout

}  // namespace hearth::cpu::kquant

// Weights repacked at load time for the multi-row kernels: 16 rows of a matrix are
// interleaved block by block so that one 512-bit register holds 4 weights of each of
// the 16 rows, and vpdpbusd against 4 activation bytes broadcast leaves in lane r the
// integer sum that ggml's 8-lane AVX2 dot product keeps in one lane for row r. The
// float work per block (convert, scale, fma) then runs on 16 rows at once, a batch of
// tokens shares the unpacked weights, and the partial sums keep ggml's order exactly:
// per (row, token) 8 float lanes, lane j = sum over blocks of fma(dw * dx, float(sum of
// the products of weights 4j .. 4j + 3), lane j), reduced as ((l0 + l4) + (l2 + l6)) +
// ((l1 + l5) + (l3 + l7)), plus for Q4_1 the mins sum += mw * sx. So every output equals
// vec_dot (dot_avx2.cpp) bit for bit, and a token gets the same bits in any batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "core/tune.h"
#include "format/ggml_types.h"
#include "ops/backend.h"

namespace hearth::cpu {

inline constexpr int kPackRows = 16;

struct PackedWeight {
  GgmlType type = GgmlType::F32;
  int64_t n_rows = 0, n_cols = 0;
  int64_t n_groups = 0;      // ceil(n_rows / 16); the last group's extra rows are zero
  int64_t nb = 0;            // blocks of 32 per row (K types: super-blocks of 256)
  int64_t block_bytes = 0;   // one block (super-block) of 16 rows
  uint8_t* base = nullptr;  // groups one after another, blocks in order within a group (64-byte aligned)
  std::unique_ptr<uint8_t[]> own;  // base's storage when it is not in an arena
  const uint8_t* group(int64_t g) const { return base + g * nb * block_bytes; }
  uint8_t* group(int64_t g) { return base + g * nb * block_bytes; }
  // An empty packed copy of w's shape: blocks of block_elems weights, block_bytes per
  // 16-row block; n_groups * nb * block_bytes zeroed bytes starting on a 64-byte boundary
  // (a large new[] returns a page address plus 16, which would split every 64-byte
  // register load across two cache lines), at group(0). From `arena` (huge pages, see
  // core/huge_pages.h) when given and it can map memory, else from the heap.
  static std::unique_ptr<PackedWeight> make(const ops::WeightView& w, int64_t block_elems, int64_t block_bytes,
                                            HugeArena* arena = nullptr);
};

// Whether weights of this type can be packed (Q4_0, Q4_1, Q8_0: columns a multiple of 32;
// Q4_K, Q5_K, Q6_K: of 256, see packed_kquant.h).
bool packable(GgmlType type, int64_t n_cols);
// The packed copy of w (packable(w.type, w.n_cols) must hold); with a pool, the groups
// are packed in parallel (a large model's load is otherwise held up for seconds).
// The copy's memory comes from `arena` when one is given (PackedWeight::make).
std::unique_ptr<PackedWeight> pack_weight(const ops::WeightView& w, ThreadPool* pool = nullptr,
                                          HugeArena* arena = nullptr);
// Runs fn(g0, g1) over the groups of w's packed copy, on the pool when there is one, in
// pieces of at most 64 groups; after each piece the source rows' pages go back when w
// lies in a mapped file (release_mapped_pages), so packing a large tensor never holds
// both copies of it in memory.
void for_groups(const ops::WeightView& w, int64_t n_groups, ThreadPool* pool,
                const std::function<void(int64_t, int64_t)>& fn);

// Quantized activations as the packed kernels read them: token t's blocks in the
// ggml activation format of the weight type (Q8_1 for Q4_1, Q8_0 otherwise) at
// xq + t * row_bytes, and per (token, block) i = t * nb + b the scale d[i], for Q8_1
// its s[i] = d * sum(q) (as stored, f16), and the 8 lane starts corr[8 i + j] =
// kFloatMagic - offset * (sum of values 4j .. 4j + 3): offset 8 / 128 for Q4_0 / Q8_0
// (the kernels multiply unsigned weights, q + offset), 0 for Q4_1; kFloatMagic makes the
// lane's integer sum S come out as the bits of the float 1.5 * 2^23 + S (exact for
// |S| < 2^22), so one subtraction gives float(S) without a conversion instruction.
inline constexpr int32_t kFloatMagic = 0x4B400000;  // bits of 12582912.0f = 1.5 * 2^23
struct PackedAct {
  const uint8_t* xq = nullptr;
  int64_t row_bytes = 0;
  int64_t nb = 0;
  const float* d = nullptr;
  const float* s = nullptr;
  const int32_t* corr = nullptr;
};
// Activation block type used with packed weights of `type` (Q8_K for the K types).
GgmlType packed_act_type(GgmlType type);
// Fills d, s (nb entries each) and corr (8 nb) for one token's quantized row.
void packed_act_scales(GgmlType type, const uint8_t* xq_row, int64_t nb, float* d, float* s, int32_t* corr);

// y[t * y_stride + r] for the rows of groups [g0, g1) (rows past n_rows are not written)
// and tokens [0, n_tokens).
using PackedMatmulFn = void (*)(const PackedWeight& w, int64_t g0, int64_t g1, const PackedAct& a, int64_t n_tokens,
                                float* y, int64_t y_stride);
// The SIMD kernel for this type on this CPU (AVX-512 VNNI, else AVX2: the 64-byte
// registers as two halves of 8 rows, packed_*avx2.cpp), or nullptr.
PackedMatmulFn find_packed_kernel(GgmlType type);

// The token count of tuning key `key` (cpu.token_block, cpu.prefill_blocks), rounded down
// to a multiple of 8 (at least 8) so that token tiles start where they would without
// blocks; 0 when it is 0 (off).
int64_t tuned_token_block(tune::Id key);

namespace ref {
// The same arithmetic, lane by lane in plain code, on the original (unpacked) weights,
// rows [r0, r1).
void packed_order_matmul(const ops::WeightView& w, int64_t r0, int64_t r1, const PackedAct& a, int64_t n_tokens,
                         float* y, int64_t y_stride);
}  // namespace ref

}  // namespace hearth::cpu

// The x86-64 builds of the vision tower's kernels (vision_kernels.h; kernel_table.h's
// gelu and full_items): the vector policy with AVX2's fused multiply-adds, and the same
// code with AVX-512's 32 registers. They agree with the plain build within the tests'
// tolerance (fused multiply-adds round once where it rounds twice), not bit for bit.
#include <immintrin.h>

#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"
#include "backends/cpu/vision_kernels.h"

namespace hearth::cpu {
namespace {

using namespace vision;

// The same with fused multiply-adds (the build keeps a * b + c unfused: -ffp-contract=off).
struct VecAvx2 : VecPlain {
  static constexpr bool kFma = true;
  HEARTH_SIMD static vf8 set1(float x) { return reinterpret_cast<vf8>(_mm256_set1_ps(x)); }
  HEARTH_SIMD static vf8 fma(vf8 a, vf8 b, vf8 c) {
    return reinterpret_cast<vf8>(_mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b),
                                                 reinterpret_cast<__m256>(c)));
  }
};
// The same code with AVX-512's 32 registers (256-bit operations encoded with EVEX): four
// query rows' scores at once (16 sums + 4 keys + 4 queries in registers), two rows' outputs.
struct VecAvx512 : VecAvx2 {
  static constexpr int kScoreRows = 4;
  static constexpr int kPvRows = 2;
};

}  // namespace

HEARTH_SIMD __attribute__((flatten)) void full_items_avx2(const FullArgs& a, const FullAttnItem* items, int64_t begin,
                                                           int64_t end) {
  full_items_any<VecAvx2>(a, items, begin, end);
}
// The same code with AVX-512's 32 vector registers (the 256-bit operations encoded with
// EVEX): a head of 72 keeps its 9 output vectors and the 8 score sums without spilling.
HEARTH_AVX512 __attribute__((flatten)) void full_items_avx512(const FullArgs& a, const FullAttnItem* items,
                                                               int64_t begin, int64_t end) {
  full_items_any<VecAvx512>(a, items, begin, end);
}

HEARTH_SIMD __attribute__((flatten)) void gelu_avx2(float* x, int64_t n, bool tanh_approx) {
  gelu_rows<VecAvx2>(x, n, tanh_approx);
}

}  // namespace hearth::cpu

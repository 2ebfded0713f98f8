// The x86-64 builds of the Gated DeltaNet recurrence (kernel_table.h's gdn_recurrent and
// gdn_chunked): the recurrent step compiled for AVX2 (GCC vectorises its column loops),
// and the chunked form's register tiles (gdn_tiles.inc) on 8-lane AVX2 and 16-lane
// AVX-512 vectors. No fused multiply-adds (the build keeps a * b + c unfused), so the
// plain build's bits.
#include <immintrin.h>

#include <vector>

#include "backends/cpu/gdn_kernels.h"
#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/targets_x86.h"

namespace hearth::cpu {
namespace {

using namespace gdn;

typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

#define HEARTH_TGT HEARTH_SIMD
#define HEARTH_NS gdn_avx2
#define HEARTH_GDN_V v8f
#define HEARTH_GDN_SET1(x) reinterpret_cast<v8f>(_mm256_set1_ps(x))
#define HEARTH_GDN_TILE_ROWS 4
#define HEARTH_GDN_TILE_COLS 2
#define HEARTH_GDN_SOLVE_ROWS 4
#define HEARTH_GDN_OUT_ROWS 2
#define HEARTH_GDN_STATE_ROWS 4
#include "backends/cpu/gdn_tiles.inc"

#define HEARTH_TGT HEARTH_AVX512
#define HEARTH_NS gdn_avx512
#define HEARTH_GDN_V v16f
#define HEARTH_GDN_SET1(x) reinterpret_cast<v16f>(_mm512_set1_ps(x))
#define HEARTH_GDN_TILE_ROWS 4
#define HEARTH_GDN_TILE_COLS 4
#define HEARTH_GDN_SOLVE_ROWS 8
#define HEARTH_GDN_OUT_ROWS 4
#define HEARTH_GDN_STATE_ROWS 8
#include "backends/cpu/gdn_tiles.inc"

}  // namespace

HEARTH_SIMD __attribute__((flatten)) void chunked_head_avx2(const gdn::HeadTask& t, int64_t y0, int64_t y1,
                                                             std::vector<float>& buf) {
  gdn_avx2::chunked_head_tiled(t, y0, y1, buf);
}
HEARTH_AVX512 __attribute__((flatten)) void chunked_head_avx512(const gdn::HeadTask& t, int64_t y0, int64_t y1,
                                                                std::vector<float>& buf) {
  gdn_avx512::chunked_head_tiled(t, y0, y1, buf);
}

HEARTH_SIMD __attribute__((flatten)) void gdn_recurrent_avx2(const gdn::HeadTask& t, std::vector<float>& tmp) {
  gdn::recurrent_head<true>(t, tmp);
}

}  // namespace hearth::cpu

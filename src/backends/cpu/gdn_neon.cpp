// The NEON build of the Gated DeltaNet prompt kernel (kernel_table.h's gdn_chunked),
// aarch64 only: the chunked form's register tiles (gdn_tiles.inc) on 4-lane vectors,
// shaped for the 32 vector registers (the AVX-512 tiles' shapes: 4 x 4 vectors for the
// dot products and W, 8-row solve and state tiles, 4-row output tiles). No fused
// multiply-adds (the build keeps a * b + c unfused), so the plain build's bits. (The
// recurrent step for single tokens is the plain build, which GCC already vectorises
// for NEON.)
#include <arm_neon.h>

#include <vector>

#include "backends/cpu/gdn_kernels.h"
#include "backends/cpu/kernels_neon.h"

namespace hearth::cpu {
namespace {

using namespace gdn;

typedef float v4f __attribute__((vector_size(16)));

#define HEARTH_TGT
#define HEARTH_NS gdn_neon
#define HEARTH_GDN_V v4f
#define HEARTH_GDN_SET1(x) reinterpret_cast<v4f>(vdupq_n_f32(x))
#define HEARTH_GDN_TILE_ROWS 4
#define HEARTH_GDN_TILE_COLS 4
#define HEARTH_GDN_SOLVE_ROWS 8
#define HEARTH_GDN_OUT_ROWS 4
#define HEARTH_GDN_STATE_ROWS 8
#include "backends/cpu/gdn_tiles.inc"

}  // namespace

__attribute__((flatten)) void chunked_head_neon(const gdn::HeadTask& t, int64_t y0, int64_t y1,
                                                std::vector<float>& buf) {
  gdn_neon::chunked_head_tiled(t, y0, y1, buf);
}

}  // namespace hearth::cpu

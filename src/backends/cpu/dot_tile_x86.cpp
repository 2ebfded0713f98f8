// Tiled quantized matrix products for x86: several weight rows times several
// activation rows per call (dot_tile.inc), compiled twice through per-function
// target attributes: AVX2+FMA+F16C (maddubs + madd for the u8 x i8 sums) and
// AVX-512 VNNI (vpdpbusd, and 32 vector registers). Chosen at run time
// (find_matmul_kernel); every output equals the one-pair vec_dot bit for bit.
#include "backends/cpu/quant_dot.h"

#include <algorithm>
#include <type_traits>

#include "backends/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/blocks.h"

namespace hearth::cpu {
namespace {
constexpr int kTileRows = 4, kTileCols = 4;
using TileFn = void (*)(int64_t n, const void* w, uint64_t ws, const void* x, uint64_t xs, float* y, int64_t ys);
}  // namespace

#define HEARTH_TGT __attribute__((target("avx2,fma,f16c")))
#define HEARTH_NS tile_avx2
#define HEARTH_DOT_U8_I8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "backends/cpu/dot_tile.inc"
#undef HEARTH_TGT
#undef HEARTH_NS
#undef HEARTH_DOT_U8_I8

#define HEARTH_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define HEARTH_NS tile_vnni
#define HEARTH_DOT_U8_I8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#define HEARTH_TILE_512 1
#include "backends/cpu/dot_tile.inc"
#undef HEARTH_TGT
#undef HEARTH_NS
#undef HEARTH_DOT_U8_I8
#undef HEARTH_TILE_512

MatmulFn find_matmul_kernel(GgmlType type, MatmulIsa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool vnni = avx2 && f.avx512f && f.avx512vl && f.avx512bw && f.avx512vnni;
  if ((isa == MatmulIsa::kBest || isa == MatmulIsa::kVnni) && vnni) return tile_vnni::find_matmul(type);
  if ((isa == MatmulIsa::kBest || isa == MatmulIsa::kAvx2) && avx2) return tile_avx2::find_matmul(type);
  return nullptr;
}

}  // namespace hearth::cpu

#else

namespace hearth::cpu {
MatmulFn find_matmul_kernel(GgmlType, MatmulIsa) { return nullptr; }
}  // namespace hearth::cpu

#endif

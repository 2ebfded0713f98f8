// The x86-64 kernel tables (kernel_table.h): AVX2 + FMA + F16C, and the same with
// AVX-512 F / VL / BW where the CPU has it, from cpu_features(); and MXCSR's flushing of
// subnormals for the Gated DeltaNet prompt kernels.
#include <immintrin.h>

#include "backends/cpu/attention_avx2.h"
#include "backends/cpu/attention_avx512.h"
#include "backends/cpu/kernels_x86.h"
#include "backends/cpu/matmul_f32.h"

namespace hearth::cpu {
namespace {

// Head dims that are multiples of 64 read f16 and q8_0 cache rows in the kernels' loads
// (no conversion pass over the cache first), and run blocked (attention_avx2.cpp).
const KernelTable kAvx2{
    "avx2",         f16_to_f32_row_f16c, f32_to_f16_row_f16c, attend_rows_avx2, 64,        attend_blocks_avx2,
    swiglu_avx2,    silu_row_avx2,       gdn_recurrent_avx2,  chunked_head_avx2, gelu_avx2, full_items_avx2,
    dot_rows_f32_avx2, rope_heads_avx2, rms_norm_rows_plain};

// The AVX-512 builds where there are any; GELU and the recurrent step keep AVX2's
// (memory-bound). Head dims that are multiples of 64 read f16 and q8_0 cache rows in the
// kernels' loads, and run blocked (attention_avx512.cpp).
const KernelTable kAvx512{
    "avx512",        f16_to_f32_row_f16c, f32_to_f16_row_f16c, attend_rows_avx512,  64,        attend_blocks_avx512,
    swiglu_avx512,   silu_row_avx512,     gdn_recurrent_avx2,  chunked_head_avx512, gelu_avx2, full_items_avx512,
    dot_rows_f32_avx512, rope_heads_avx2, rms_norm_rows_avx512};

}  // namespace

const KernelTable* arch_kernels(const CpuFeatures& f) {
  if (!(f.avx2 && f.fma && f.f16c)) return nullptr;
  return f.avx512f && f.avx512vl && f.avx512bw ? &kAvx512 : &kAvx2;
}

// Subnormal floats flushed to zero (inputs and results) while a GDN prompt task runs,
// the caller's mode restored after. The chunk's decays exp(G_i - G_j) and the products
// with them fall below 2^-126 whenever a head decays fast; on Intel cores every
// operation on such a value takes a microcode assist, many times the operation's cost.
// The plain and the SIMD kernels both run under it (the same bits); values that small
// are far below the tests' tolerances against the double-precision reference.
uint64_t FlushSubnormals::flush_subnormals_begin() {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);  // FTZ | DAZ
  return saved;
}
void FlushSubnormals::flush_subnormals_end(uint64_t saved) { _mm_setcsr(static_cast<unsigned>(saved)); }

}  // namespace hearth::cpu

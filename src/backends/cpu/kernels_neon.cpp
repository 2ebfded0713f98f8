// The aarch64 kernel table (kernel_table.h): NEON (Advanced SIMD, every ARMv8-A CPU has
// it). Where an entry has no NEON build of its own it is the plain one, which GCC
// compiles with NEON vectors already (f16 rows, the recurrent GDN step, the vision
// tower). Subnormals are left as the CPU treats them (most ARM cores take no penalty on
// them, unlike the Intel cores kernels_x86.cpp flushes them for).
#include "backends/cpu/kernels_neon.h"

#include "backends/cpu/matmul_f32.h"

namespace hearth::cpu {
namespace {

// Head dims that are multiples of 64 read f16 and q8_0 cache rows in the kernel's loads.
const KernelTable kNeon{
    "neon",       f16_to_f32_row_neon, f32_to_f16_row_neon, attend_rows_neon, 64,     nullptr,
    swiglu_neon,  silu_row_neon,  gdn_recurrent_plain, chunked_head_neon, gelu_plain, full_items_plain,
    dot_rows_f32_neon, rope_heads_plain, rms_norm_rows_plain};

}  // namespace

const KernelTable* arch_kernels(const CpuFeatures& f) { return f.neon ? &kNeon : nullptr; }

uint64_t FlushSubnormals::flush_subnormals_begin() { return 0; }
void FlushSubnormals::flush_subnormals_end(uint64_t) {}

}  // namespace hearth::cpu

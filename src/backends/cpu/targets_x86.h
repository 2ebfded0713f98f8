// The instruction sets x86-64 kernels are compiled for, per function (the rest of the
// binary stays baseline x86-64; cpu_features() decides at run time what may run).
// x86-64 files only.
#pragma once

// AVX2 + FMA + F16C.
#define HEARTH_SIMD __attribute__((target("avx2,fma,f16c")))
// The same plus AVX-512 F / VL / BW.
#define HEARTH_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw")))

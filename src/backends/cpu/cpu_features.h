// Instruction sets this CPU and OS can run, from CPUID plus the OS state
// (XGETBV for AVX/AVX-512 register state; arch_prctl permission for AMX).
// Detected once; thread-safe. On non-x86 builds every x86 flag is false.
#pragma once

// Functions compiled for AVX2+FMA (used only when the CPU has them); elsewhere plain.
#if defined(__x86_64__)
#define HEARTH_SIMD __attribute__((target("avx2,fma,f16c")))
#define HEARTH_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw")))
#else
#define HEARTH_SIMD
#define HEARTH_AVX512
#endif

#include <string>

namespace hearth::cpu {

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;
  bool amx_tile = false;   // only when the OS granted the tile-data permission
  bool amx_int8 = false;
  bool neon = false;
};

// The features of this machine (cached after the first call).
const CpuFeatures& cpu_features();
// "avx2 fma f16c avx512f ..." for logs and `hearth info`.
std::string cpu_features_string(const CpuFeatures& f);

}  // namespace hearth::cpu

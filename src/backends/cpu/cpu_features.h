// Instruction sets this CPU and OS can run, from CPUID plus the OS state
// (XGETBV for AVX/AVX-512 register state; arch_prctl permission for AMX).
// Detected once; thread-safe. On non-x86 builds every x86 flag is false; on aarch64
// the ARM flags come from the kernel's hardware capabilities (getauxval).
#pragma once

// The x86-64 kernels' target attributes (HEARTH_SIMD, HEARTH_AVX512) are targets_x86.h's;
// the product kernels' x86 files still take them through this header.
#if defined(__x86_64__)
#include "backends/cpu/targets_x86.h"
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
  bool neon = false;     // aarch64: Advanced SIMD (always there on ARMv8-A)
  bool dotprod = false;  // aarch64: SDOT / UDOT (ARMv8.2-A dotprod, HWCAP_ASIMDDP)
  bool i8mm = false;     // aarch64: SMMLA / USDOT (ARMv8.6-A i8mm, HWCAP2_I8MM)
};

// The features the kernels may use: this machine's (detected once), capped by the tuning
// key cpu.isa (auto: all of them; avx2: AVX2 / FMA / F16C and below, as on an AVX2-only
// CPU; plain: none, every kernel its plain reference). Programs set the key at start
// (--tune) before a back-end is made; the kernels look their variant up through this
// call, so a test's tune::Override changes which one runs.
const CpuFeatures& cpu_features();
// What the CPU and the OS offer, whatever cpu.isa says (cached after the first call).
const CpuFeatures& detected_cpu_features();
// f without the instruction sets above `isa` (the index of a cpu.isa choice).
CpuFeatures capped_cpu_features(const CpuFeatures& f, int isa);
// Asks the CPU and the OS, uncached: cpu_features_x86.cpp (CPUID, XGETBV),
// cpu_features_arm.cpp (getauxval), or none on other architectures (cpu_features.cpp).
CpuFeatures detect_cpu_features();
// "avx2 fma f16c avx512f ..." for logs and `hearth info`.
std::string cpu_features_string(const CpuFeatures& f);

}  // namespace hearth::cpu

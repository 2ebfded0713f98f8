// Instruction sets this CPU and OS can run, from CPUID plus the OS state
// (XGETBV for AVX/AVX-512 register state; arch_prctl permission for AMX).
// Detected once; thread-safe. On non-x86 builds every x86 flag is false.
#pragma once

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

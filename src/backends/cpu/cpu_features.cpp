#include "backends/cpu/cpu_features.h"

namespace hearth::cpu {

#if !defined(__x86_64__) && !defined(__aarch64__)
// No instruction-set kernels for this architecture (cpu_features_x86.cpp,
// cpu_features_arm.cpp detect the others): every kernel runs its plain reference.
CpuFeatures detect_cpu_features() { return {}; }
#endif

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

std::string cpu_features_string(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.sse42, "sse4.2");
  add(f.avx, "avx");
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx_vnni, "avx-vnni");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512bf16, "avx512bf16");
  add(f.amx_tile, "amx-tile");
  add(f.amx_int8, "amx-int8");
  add(f.neon, "neon");
  add(f.dotprod, "dotprod");
  add(f.i8mm, "i8mm");
  return s.empty() ? "none" : s;
}

}  // namespace hearth::cpu

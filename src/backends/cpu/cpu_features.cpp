#include "backends/cpu/cpu_features.h"

#include "core/tune.h"

namespace hearth::cpu {

#if !defined(__x86_64__) && !defined(__aarch64__)
// No instruction-set kernels for this architecture (cpu_features_x86.cpp,
// cpu_features_arm.cpp detect the others): every kernel runs its plain reference.
CpuFeatures detect_cpu_features() { return {}; }
#endif

const CpuFeatures& detected_cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

CpuFeatures capped_cpu_features(const CpuFeatures& f, int isa) {
  if (isa == 0) return f;
  if (isa >= 2) return {};
  // avx2: what an AVX2 laptop or an AMD Zen 2 / 3 server has. AVX-VNNI (the VEX form of
  // vpdpbusd) goes too: no kernel uses it, and those CPUs lack it.
  CpuFeatures c = f;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512vnni = c.avx512bf16 = false;
  c.avx_vnni = c.amx_tile = c.amx_int8 = false;
  return c;
}

const CpuFeatures& cpu_features() {
  // One copy per cpu.isa choice, so that the reference stays valid across changes.
  static const CpuFeatures avx2 = capped_cpu_features(detected_cpu_features(), 1);
  static const CpuFeatures plain = capped_cpu_features(detected_cpu_features(), 2);
  switch (tune::get(tune::kCpuIsa)) {
    case 1: return avx2;
    case 2: return plain;
    default: return detected_cpu_features();
  }
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

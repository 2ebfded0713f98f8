// The CPU's ARM features for cpu_features() on aarch64 Linux, from the hardware
// capabilities the kernel reports (getauxval: AT_HWCAP, AT_HWCAP2), which reflect
// both the CPU and what the kernel enabled.
#include <sys/auxv.h>

#include "backends/cpu/cpu_features.h"

namespace hearth::cpu {
namespace {
// Bits of AT_HWCAP / AT_HWCAP2 (Linux, arch/arm64/include/uapi/asm/hwcap.h); spelled out
// because older C libraries' <asm/hwcap.h> lack the newer ones.
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;
constexpr unsigned long kHwcap2I8mm = 1ul << 13;
}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  f.neon = (hw & kHwcapAsimd) != 0;
  f.dotprod = f.neon && (hw & kHwcapAsimdDp) != 0;
  f.i8mm = f.neon && (hw2 & kHwcap2I8mm) != 0;
  return f;
}

}  // namespace hearth::cpu

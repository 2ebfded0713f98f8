// CPUID + XGETBV (and the AMX permission) for cpu_features() on x86-64.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "backends/cpu/cpu_features.h"

namespace hearth::cpu {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  // xgetbv with ecx = 0; encoded by hand so no -mxsave is needed.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool request_amx_permission() {
  // Linux: ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18). Without it AMX faults.
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse42 = (c >> 20) & 1;
  const bool osxsave = (c >> 27) & 1;
  const bool cpu_avx = (c >> 28) & 1;
  const bool cpu_fma = (c >> 12) & 1;
  const bool cpu_f16c = (c >> 29) & 1;
  uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM + YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;       // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA
  f.avx = cpu_avx && os_avx;
  f.fma = f.avx && cpu_fma;
  f.f16c = f.avx && cpu_f16c;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = f.avx && ((b >> 5) & 1);
    f.avx512f = os_avx512 && ((b >> 16) & 1);
    f.avx512bw = f.avx512f && ((b >> 30) & 1);
    f.avx512vl = f.avx512f && ((b >> 31) & 1);
    f.avx512vnni = f.avx512f && ((c >> 11) & 1);
    const bool cpu_amx_tile = (d >> 24) & 1;
    const bool cpu_amx_int8 = (d >> 25) & 1;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx_vnni = f.avx2 && ((a1 >> 4) & 1);
    f.avx512bf16 = f.avx512f && ((a1 >> 5) & 1);
    if (cpu_amx_tile && os_amx && request_amx_permission()) {
      f.amx_tile = true;
      f.amx_int8 = cpu_amx_int8;
    }
  }
  return f;
}

}  // namespace hearth::cpu

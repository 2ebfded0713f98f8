#include "cli/common.h"

#include <sys/resource.h>

#include <fstream>

#include "core/error.h"

namespace hearth::cli {

double peak_rss_gb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB on Linux
}

uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

ops::KvType parse_kv_type(const std::string& name) {
  if (name == "f16") return ops::KvType::F16;
  if (name == "f32") return ops::KvType::F32;
  fail(ErrorKind::kInvalidInput, "cli", "--kv-type must be f16 or f32, got '" + name + "'");
}

}  // namespace hearth::cli

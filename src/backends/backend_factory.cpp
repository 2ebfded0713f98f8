#include "backends/backend_factory.h"

#include <cstdlib>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda_info.h"
#include "core/error.h"

namespace hearth::backends {

Device parse_device(const std::string& spec) {
  if (spec == "cpu") return Device{false, 0};
  if (spec == "cuda") return Device{true, 0};
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string n = spec.substr(5);
    char* end = nullptr;
    const long v = n.empty() ? -1 : std::strtol(n.c_str(), &end, 10);
    if (!n.empty() && end != nullptr && *end == '\0' && v >= 0 && v < 1024) return Device{true, static_cast<int>(v)};
  }
  fail(ErrorKind::kInvalidInput, "device", "unknown device '" + spec + "' (expected cpu, cuda, cuda:N or auto)");
}

uint64_t device_free_memory(const Device& d) {
  if (!d.cuda) return 0;
  size_t free_b = 0, total_b = 0;
  std::string err;
  return cuda_memory_info(d.index, &free_b, &total_b, &err) ? free_b : 0;
}

Device resolve_device(const std::string& spec, uint64_t need_bytes, std::string* note) {
  if (spec != "auto") return parse_device(spec);
  if (!cuda_compiled()) return Device{};
  std::string err;
  const auto devices = cuda_devices(&err);
  if (devices.empty()) {
    if (note != nullptr) *note = "no CUDA device visible (" + (err.empty() ? std::string("none found") : err) + ")";
    return Device{};
  }
  const Device gpu{true, devices.front().index};
  const uint64_t free_b = device_free_memory(gpu);
  if (need_bytes > 0 && free_b > 0 && need_bytes > free_b) {
    if (note != nullptr) {
      *note = "the model and its cache need about " + std::to_string(need_bytes >> 20) + " MiB but " + gpu.str() +
              " (" + devices.front().name + ") has " + std::to_string(free_b >> 20) + " MiB free";
    }
    return Device{};
  }
  return gpu;
}

std::unique_ptr<ops::Backend> make_backend(const Device& d, int threads) {
  if (d.cuda) return make_cuda_backend(d.index);
  return std::make_unique<cpu::CpuBackend>(threads);
}

std::unique_ptr<ops::Backend> make_backend(const std::string& spec, int threads) {
  return make_backend(resolve_device(spec, 0, nullptr), threads);
}

}  // namespace hearth::backends

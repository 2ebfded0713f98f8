// What the CUDA back-end sees. Implemented by backends/cuda (when built with
// HEARTH_CUDA and nvcc) or by the backends/no_cuda stubs.
#pragma once

#include <string>
#include <vector>

namespace hearth::backends {

struct CudaDevice {
  int index = 0;
  std::string name;
  size_t total_memory = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// True when this binary was built with the CUDA back-end.
bool cuda_compiled();
// Devices visible to the CUDA runtime; empty when none or when not compiled.
// `error` receives the runtime's reason when the query fails.
std::vector<CudaDevice> cuda_devices(std::string* error);

}  // namespace hearth::backends

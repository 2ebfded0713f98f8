// What the CUDA back-end offers to the rest of Hearth. Implemented by backends/cuda
// (when built with HEARTH_CUDA and nvcc) or by the backends/no_cuda stubs, so no
// other code needs #ifdefs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace hearth::ops {
class Backend;
}

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
// Free and total device memory of `device` in bytes; false (and `error`) when unknown.
bool cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes, std::string* error);
// The CUDA back-end on `device`. Throws Error when not compiled in or the device is unusable.
std::unique_ptr<ops::Backend> make_cuda_backend(int device);

}  // namespace hearth::backends

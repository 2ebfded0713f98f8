// Stubs for a build without the CUDA back-end: callers see "not compiled".
#include "backends/cuda_info.h"

namespace hearth::backends {

bool cuda_compiled() { return false; }

std::vector<CudaDevice> cuda_devices(std::string* error) {
  if (error != nullptr) *error = "hearth was built without CUDA (configure with -DHEARTH_CUDA=ON)";
  return {};
}

}  // namespace hearth::backends

// CUDA device query through the runtime API.
#include <cuda_runtime.h>

#include "backends/cuda_info.h"

namespace hearth::backends {

bool cuda_compiled() { return true; }

std::vector<CudaDevice> cuda_devices(std::string* error) {
  std::vector<CudaDevice> out;
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (error != nullptr) *error = cudaGetErrorString(rc);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back(CudaDevice{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return out;
}

}  // namespace hearth::backends

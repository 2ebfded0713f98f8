// CUDA device queries through the runtime API, and the back-end's constructor hook.
#include <cuda_runtime.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda_info.h"

namespace hearth::backends {

bool cuda_compiled() { return true; }

std::vector<CudaDevice> cuda_devices(std::string* error) {
  std::vector<CudaDevice> out;
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (error != nullptr) *error = cudaGetErrorString(rc);
    cudaGetLastError();
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back(CudaDevice{i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return out;
}

bool cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes, std::string* error) {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaError_t rc = cudaSetDevice(device);
  if (rc == cudaSuccess) rc = cudaMemGetInfo(free_bytes, total_bytes);
  cudaSetDevice(prev);
  if (rc != cudaSuccess) {
    if (error != nullptr) *error = cudaGetErrorString(rc);
    cudaGetLastError();
    return false;
  }
  return true;
}

std::unique_ptr<ops::Backend> make_cuda_backend(int device) { return std::make_unique<cuda::CudaBackend>(device); }

}  // namespace hearth::backends

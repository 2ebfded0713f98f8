// Stubs for a build without the CUDA back-end: callers see "not compiled".
#include "backends/cuda_info.h"

#include "core/error.h"
#include "ops/backend.h"

namespace hearth::backends {

namespace {
const char* kNotCompiled = "hearth was built without CUDA (configure with cmake --preset cuda)";
}

bool cuda_compiled() { return false; }

std::vector<CudaDevice> cuda_devices(std::string* error) {
  if (error != nullptr) *error = kNotCompiled;
  return {};
}

bool cuda_memory_info(int, size_t*, size_t*, std::string* error) {
  if (error != nullptr) *error = kNotCompiled;
  return false;
}

std::unique_ptr<ops::Backend> make_cuda_backend(int) { fail(ErrorKind::kUnsupported, "cuda", kNotCompiled); }

}  // namespace hearth::backends

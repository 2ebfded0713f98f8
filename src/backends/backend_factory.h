// Picking and making the back-end a command runs on: `--device cpu | cuda | cuda:N |
// auto`. auto takes the first CUDA device when one is visible and the model fits in
// its free memory, otherwise the CPU (with a note saying why).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ops/backend.h"

namespace hearth::backends {

// A concrete device: the CPU, or CUDA device `index`.
struct Device {
  bool cuda = false;
  int index = 0;
  std::string str() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

// Parses "cpu", "cuda", "cuda:N" (auto is not a Device). Throws Error(kInvalidInput).
Device parse_device(const std::string& spec);

// Resolves `spec` ("auto" or a device). For auto: CUDA device 0 when visible and
// `need_bytes` (model + cache) fits in its free memory, else the CPU with `note` set to
// the reason (left empty in a build without CUDA, where the CPU is the only choice).
Device resolve_device(const std::string& spec, uint64_t need_bytes, std::string* note);

// Free device memory of a CUDA device in bytes (0 when unknown).
uint64_t device_free_memory(const Device& d);

// The back-end for a concrete device (threads: CPU worker threads, <= 0 for one per
// core). Throws Error when the device cannot be used (or CUDA is not compiled in).
std::unique_ptr<ops::Backend> make_backend(const Device& d, int threads);
// Same from a spec string (auto included, with need_bytes = 0: no fit check).
std::unique_ptr<ops::Backend> make_backend(const std::string& spec, int threads);

}  // namespace hearth::backends

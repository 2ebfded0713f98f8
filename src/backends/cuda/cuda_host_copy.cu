// CudaBackend::copy_ranges_to_host / copy_ranges_from_host: the KV disk tier's and the
// swap's block I/O, a block being one small range per layer (16 rows of one layer's K or
// V: 2-64 KiB). One cudaMemcpy per range with a wait after each costs a stream round trip
// per range (a 16k-token prefix of a 9B hybrid: 16,000 of them); here the ranges of a
// round go through one pinned bounce buffer, queued back to back on the stream, and the
// host waits once per round.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

constexpr size_t kRoundBytes = size_t{64} << 20;  // bounce buffer, at most

size_t padded(int64_t n_floats) { return (sizeof(float) * static_cast<size_t>(n_floats) + 255) & ~size_t{255}; }

void check_range(const ops::HostRange& r, const char* op) {
  if (r.buf == nullptr || r.offset < 0 || r.n < 0 || r.offset + r.n > r.buf->size() || (r.n > 0 && r.host == nullptr)) {
    fail(ErrorKind::kInternal, "cuda", std::string(op) + ": range out of the buffer");
  }
}

// The end of the round starting at i: ranges while they fit kRoundBytes (one at least).
int64_t round_end(const ops::HostRange* r, int64_t i, int64_t n, size_t& bytes) {
  bytes = 0;
  int64_t j = i;
  while (j < n && (j == i || bytes + padded(r[j].n) <= kRoundBytes)) bytes += padded(r[j++].n);
  return j;
}

}  // namespace

CudaBackend::PinnedBounce::~PinnedBounce() {
  if (p != nullptr) cudaFreeHost(p);
}

uint8_t* CudaBackend::bounce(size_t bytes, const char* op) {
  if (bounce_.n < bytes) {
    // Every round waits for its copies before returning: nothing queued reads the old one.
    if (bounce_.p != nullptr) cudaFreeHost(bounce_.p);
    bounce_.p = nullptr;
    bounce_.n = 0;
    const size_t cap = std::max(bytes, std::min(kRoundBytes, size_t{4} << 20));
    HEARTH_CUDA_CHECK(op, cudaMallocHost(&bounce_.p, cap));
    bounce_.n = cap;
  }
  return static_cast<uint8_t*>(bounce_.p);
}

void CudaBackend::copy_ranges_to_host(const ops::HostRange* r, int64_t n) {
  if (mode_ != StepMode::kEager) {  // inside a graph step: the step's end is copy_to_host's business
    ops::Backend::copy_ranges_to_host(r, n);
    return;
  }
  bind();
  flush_capture();
  for (int64_t i = 0; i < n; ++i) check_range(r[i], "copy_ranges_to_host");
  for (int64_t i = 0; i < n;) {
    size_t bytes = 0;
    const int64_t j = round_end(r, i, n, bytes);
    uint8_t* b = bounce(bytes, "copy_ranges_to_host");
    size_t off = 0;
    for (int64_t k = i; k < j; ++k) {
      HEARTH_CUDA_CHECK("copy_ranges_to_host",
                        cudaMemcpyAsync(b + off, r[k].buf->data() + r[k].offset, sizeof(float) * r[k].n,
                                        cudaMemcpyDeviceToHost, stream_));
      off += padded(r[k].n);
    }
    wait("copy_ranges_to_host");
    off = 0;
    for (int64_t k = i; k < j; ++k) {
      std::memcpy(r[k].host, b + off, sizeof(float) * r[k].n);
      off += padded(r[k].n);
    }
    i = j;
  }
}

void CudaBackend::copy_ranges_from_host(const ops::HostRange* r, int64_t n) {
  q8_ready_ = {};  // a range may be the x an op quantized
  bind();
  flush_capture();
  for (int64_t i = 0; i < n; ++i) check_range(r[i], "copy_ranges_from_host");
  for (int64_t i = 0; i < n;) {
    size_t bytes = 0;
    const int64_t j = round_end(r, i, n, bytes);
    uint8_t* b = bounce(bytes, "copy_ranges_from_host");
    size_t off = 0;
    for (int64_t k = i; k < j; ++k) {
      std::memcpy(b + off, r[k].host, sizeof(float) * r[k].n);
      HEARTH_CUDA_CHECK("copy_ranges_from_host",
                        cudaMemcpyAsync(r[k].buf->data() + r[k].offset, b + off, sizeof(float) * r[k].n,
                                        cudaMemcpyHostToDevice, stream_));
      off += padded(r[k].n);
    }
    wait("copy_ranges_from_host");  // the bounce buffer is reused by the next round
    i = j;
  }
}

}  // namespace hearth::cuda

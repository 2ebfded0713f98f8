// CudaBackend's block copies (copy_ranges_*_async, done at once here): the KV disk tier's and the
// swap's block I/O, a block being one small range per layer (16 rows of one layer's K or
// V: 2-64 KiB). One cudaMemcpy per range with a wait after each costs a stream round trip
// per range (a 16k-token prefix of a 9B hybrid: 16,000 of them).
// To the host: the ranges of a round go through one pinned bounce buffer, queued back to
// back on the stream, and the host waits once per round.
// From the host (a disk hit's path to its first token): the host gathers a round's ranges
// into a pinned lane (on several threads when it is large), one copy takes the lane to
// the device and one kernel scatters it into place, while the host gathers the next
// round into the other lane.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <thread>

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

constexpr size_t kLaneBytes = size_t{16} << 20;  // one upload round, table included
constexpr int64_t kPieceFloats = int64_t{1} << 20;  // longer ranges go in 4 MiB pieces

// One range of an upload round: its floats start at `src` (in floats) in the lane.
struct RangeCopy {
  float* dst;
  uint64_t src;
  uint64_t n;
};

// One block per range: 16-byte copies where both ends allow them, else floats.
__global__ void scatter_ranges(const RangeCopy* table, const float* lane) {
  const RangeCopy c = table[blockIdx.x];
  const float* src = lane + c.src;
  const bool vec = ((reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
  uint64_t done = 0;
  if (vec) {
    const uint64_t n4 = c.n / 4;
    for (uint64_t i = threadIdx.x; i < n4; i += blockDim.x) {
      reinterpret_cast<float4*>(c.dst)[i] = reinterpret_cast<const float4*>(src)[i];
    }
    done = n4 * 4;
  }
  for (uint64_t i = done + threadIdx.x; i < c.n; i += blockDim.x) c.dst[i] = src[i];
}

// Whether two of the round's destinations overlap: then the order of the writes matters
// and the round is copied range by range on the stream instead of by one kernel.
bool overlapping(const std::vector<RangeCopy>& t) {
  std::vector<std::pair<uintptr_t, uintptr_t>> iv;
  iv.reserve(t.size());
  for (const RangeCopy& c : t) {
    const auto a = reinterpret_cast<uintptr_t>(c.dst);
    iv.emplace_back(a, a + sizeof(float) * c.n);
  }
  std::sort(iv.begin(), iv.end());
  for (size_t i = 1; i < iv.size(); ++i) {
    if (iv[i].first < iv[i - 1].second) return true;
  }
  return false;
}

// Copies `n` jobs (dst, src, bytes) on up to 4 threads when they add up to several MiB
// (one thread copies host memory at a few GB/s: a 0.5 GB prefix would take 0.1 s).
struct HostCopy {
  void* dst;
  const void* src;
  size_t bytes;
};
void copy_all(const std::vector<HostCopy>& jobs, size_t total) {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({4, hw, total / (size_t{2} << 20) + 1});
  auto part = [&](size_t k) {
    for (size_t i = k; i < jobs.size(); i += n_threads) std::memcpy(jobs[i].dst, jobs[i].src, jobs[i].bytes);
  };
  std::vector<std::thread> threads;
  for (size_t k = 1; k < n_threads; ++k) threads.emplace_back(part, k);
  part(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace

CudaBackend::UploadLanes::~UploadLanes() {
  for (int i = 0; i < 2; ++i) {
    if (done[i] != nullptr) cudaEventDestroy(done[i]);
    if (host[i] != nullptr) cudaFreeHost(host[i]);
    if (dev[i] != nullptr) cudaFree(dev[i]);
  }
}

void CudaBackend::make_upload_lanes() {
  if (lanes_.host[0] != nullptr) return;
  for (int i = 0; i < 2; ++i) {
    HEARTH_CUDA_CHECK("copy_ranges_from_host", cudaMallocHost(reinterpret_cast<void**>(&lanes_.host[i]), kLaneBytes));
    HEARTH_CUDA_CHECK("copy_ranges_from_host", cudaMalloc(reinterpret_cast<void**>(&lanes_.dev[i]), kLaneBytes));
    HEARTH_CUDA_CHECK("copy_ranges_from_host", cudaEventCreateWithFlags(&lanes_.done[i], cudaEventDisableTiming));
  }
}

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

void CudaBackend::sync_ranges_to_host(const ops::HostRange* r, int64_t n) {
  if (rt_.in_graph_step()) {  // inside a graph step: the step's end is copy_to_host's business
    ops::Backend::copy_ranges_to_host(r, n);
    return;
  }
  rt_.bind();
  rt_.flush_capture();
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
    rt_.wait("copy_ranges_to_host");
    off = 0;
    for (int64_t k = i; k < j; ++k) {
      std::memcpy(r[k].host, b + off, sizeof(float) * r[k].n);
      off += padded(r[k].n);
    }
    i = j;
  }
}

void CudaBackend::sync_ranges_from_host(const ops::HostRange* r, int64_t n) {
  q8_ready_ = {};  // a range may be the x an op quantized
  rt_.bind();
  rt_.flush_capture();
  for (int64_t i = 0; i < n; ++i) check_range(r[i], "copy_ranges_from_host");
  make_upload_lanes();
  // The ranges in order, the long ones cut into pieces (each fits a lane with its entry).
  struct Piece {
    float* dst;
    const float* src;
    int64_t n;
  };
  std::vector<Piece> pieces;
  pieces.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t at = 0; at < r[i].n; at += kPieceFloats) {
      pieces.push_back({r[i].buf->data() + r[i].offset + at, r[i].host + at, std::min(kPieceFloats, r[i].n - at)});
    }
  }
  std::vector<RangeCopy> table;
  std::vector<HostCopy> gather;
  int lane = 0;
  for (size_t i = 0; i < pieces.size();) {
    // A round: pieces while their floats (256-byte aligned) and the table fit the lane.
    table.clear();
    size_t data = 0;
    size_t j = i;
    while (j < pieces.size()) {
      const size_t need = padded(pieces[j].n);
      const size_t table_bytes = (sizeof(RangeCopy) * (table.size() + 1) + 255) & ~size_t{255};
      if (!table.empty() && table_bytes + data + need > kLaneBytes) break;
      table.push_back({pieces[j].dst, data / sizeof(float), static_cast<uint64_t>(pieces[j].n)});
      data += need;
      ++j;
    }
    const size_t table_bytes = (sizeof(RangeCopy) * table.size() + 255) & ~size_t{255};
    for (RangeCopy& c : table) c.src += table_bytes / sizeof(float);  // the data follows the table
    // The lane's previous round must have left it before the host writes into it.
    if (lanes_.busy[lane]) HEARTH_CUDA_CHECK("copy_ranges_from_host", cudaEventSynchronize(lanes_.done[lane]));
    uint8_t* h = lanes_.host[lane];
    std::memcpy(h, table.data(), sizeof(RangeCopy) * table.size());
    gather.clear();
    for (size_t k = i; k < j; ++k) {
      gather.push_back({h + sizeof(float) * table[k - i].src, pieces[k].src, sizeof(float) * static_cast<size_t>(pieces[k].n)});
    }
    copy_all(gather, data);
    uint8_t* d = lanes_.dev[lane];
    HEARTH_CUDA_CHECK("copy_ranges_from_host",
                      cudaMemcpyAsync(d, h, table_bytes + data, cudaMemcpyHostToDevice, stream_));
    if (!overlapping(table)) {
      scatter_ranges<<<static_cast<unsigned>(table.size()), 256, 0, stream_>>>(reinterpret_cast<const RangeCopy*>(d),
                                                                               reinterpret_cast<const float*>(d));
      HEARTH_CUDA_LAUNCHED("copy_ranges_from_host");
    } else {
      for (const RangeCopy& c : table) {  // in order: later ranges win where they overlap
        HEARTH_CUDA_CHECK("copy_ranges_from_host",
                          cudaMemcpyAsync(c.dst, d + sizeof(float) * c.src, sizeof(float) * c.n,
                                          cudaMemcpyDeviceToDevice, stream_));
      }
    }
    HEARTH_CUDA_CHECK("copy_ranges_from_host", cudaEventRecord(lanes_.done[lane], stream_));
    lanes_.busy[lane] = true;
    lane ^= 1;
    i = j;
  }
  rt_.wait("copy_ranges_from_host");  // the ranges are in place when the call returns
}

// The Backend's copies beside the steps (ops/backend.h), done at once: each call is the
// synchronous round trip above and finishes before it returns, so a copy is done when
// started, and no step needs a fence.
ops::Backend::CopyId CudaBackend::copy_ranges_to_host_async(const ops::HostRange* r, int64_t n) {
  sync_ranges_to_host(r, n);
  return ++copies_done_;
}

ops::Backend::CopyId CudaBackend::copy_ranges_from_host_async(const ops::HostRange* r, int64_t n) {
  sync_ranges_from_host(r, n);
  return ++copies_done_;
}

bool CudaBackend::copy_done(CopyId) { return true; }
void CudaBackend::copy_wait(CopyId) {}
void CudaBackend::copy_fence(CopyId) {}

}  // namespace hearth::cuda

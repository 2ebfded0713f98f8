// CudaBackend's block copies beside the steps (ops/backend.h: copy_ranges_*_async,
// copy_done, copy_wait, copy_fence): the KV disk tier's and the swap's block I/O, a block
// being one small range per layer (16 rows of one layer's K or V: 2-64 KiB). One
// cudaMemcpy per range costs a stream round trip per range (a 16k-token prefix of a 9B
// hybrid: 16,000 of them), and a host that waits for the copies stalls the decode steps
// of every other running sequence; so a copy is cut into rounds of one pinned lane or
// chunk ([table of ranges | their bytes], 16 MiB), and the engine's thread never waits:
//  - Upload: the call records an event on the compute stream (steps before it may still
//    read the blocks it overwrites) and hands the ranges to the upload worker thread,
//    which gathers each round into one of two pinned lanes (waiting, itself, for the
//    lane's previous copy) and queues on the upload stream, after that event, one copy of
//    the lane to the device lane and one kernel scattering it into place; then the copy's
//    event. Steps see the bytes after copy_fence (the compute stream waits for that event;
//    the host waits only until the worker has queued it) or once copy_done / copy_wait saw
//    the event (they also make the compute stream wait for it).
//  - Download: on the compute stream (so after the steps that wrote the blocks, and before
//    any later step that writes them again) the round's table goes to a device lane and
//    one kernel gathers the ranges behind it; an event there lets the download stream copy
//    the lane to a pinned chunk, and the chunk's bytes go to the caller's host memory in
//    copy_done / copy_wait. Two device lanes take turns; a download of more than two
//    rounds makes the compute stream wait (on the device) for the copy that read the lane
//    before it gathers into it again. Chunks are kept for reuse; past kMaxPinnedBytes the
//    host waits for the oldest copy before it takes another.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

constexpr size_t kChunkBytes = size_t{16} << 20;        // one round, table included
constexpr size_t kMaxPinnedBytes = size_t{256} << 20;   // pinned chunks, at most
constexpr int64_t kPieceFloats = int64_t{1} << 20;      // longer ranges go in 4 MiB pieces

size_t padded(int64_t n_floats) { return (sizeof(float) * static_cast<size_t>(n_floats) + 255) & ~size_t{255}; }

void check_range(const ops::HostRange& r, const char* op) {
  if (r.buf == nullptr || r.offset < 0 || r.n < 0 || r.offset + r.n > r.buf->size() || (r.n > 0 && r.host == nullptr)) {
    fail(ErrorKind::kInternal, "cuda", std::string(op) + ": range out of the buffer");
  }
}

// One range of a round: `n` floats at `dev` (in a back-end buffer), at float `lane` of
// the round's lane (where its bytes follow the table).
struct RangeCopy {
  float* dev;
  uint64_t lane;
  uint64_t n;
};

// One block per range: 16-byte copies where both ends allow them, else floats.
__device__ void copy_range(float* dst, const float* src, uint64_t n) {
  const bool vec = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
  uint64_t done = 0;
  if (vec) {
    const uint64_t n4 = n / 4;
    for (uint64_t i = threadIdx.x; i < n4; i += blockDim.x) {
      reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
    }
    done = n4 * 4;
  }
  for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

__global__ void scatter_ranges(const RangeCopy* table, const float* lane) {
  const RangeCopy c = table[blockIdx.x];
  copy_range(c.dev, lane + c.lane, c.n);
}

__global__ void gather_ranges(const RangeCopy* table, float* lane) {
  const RangeCopy c = table[blockIdx.x];
  copy_range(lane + c.lane, c.dev, c.n);
}

// Whether two of [a, a + bytes) overlap: then the order of the writes matters.
bool overlapping(std::vector<std::pair<uintptr_t, uintptr_t>> iv) {
  std::sort(iv.begin(), iv.end());
  for (size_t i = 1; i < iv.size(); ++i) {
    if (iv[i].first < iv[i - 1].second) return true;
  }
  return false;
}

bool overlapping(const std::vector<RangeCopy>& t) {
  std::vector<std::pair<uintptr_t, uintptr_t>> iv;
  iv.reserve(t.size());
  for (const RangeCopy& c : t) {
    const auto a = reinterpret_cast<uintptr_t>(c.dev);
    iv.emplace_back(a, a + sizeof(float) * c.n);
  }
  return overlapping(std::move(iv));
}

// Copies `jobs` (dst, src, bytes) on up to 4 threads when they add up to several MiB (one
// thread copies host memory at a few GB/s: a 0.5 GB prefix would take 0.1 s); in order on
// this thread when destinations overlap (later ones win).
template <class HostPart>  // CudaBackend::CopyStreams::HostPart
void copy_all(const std::vector<HostPart>& jobs) {
  size_t total = 0;
  for (const HostPart& j : jobs) total += j.bytes;
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  size_t n_threads = std::min<size_t>({4, hw, total / (size_t{2} << 20) + 1});
  if (n_threads > 1) {
    std::vector<std::pair<uintptr_t, uintptr_t>> iv;
    iv.reserve(jobs.size());
    for (const HostPart& j : jobs) iv.emplace_back(reinterpret_cast<uintptr_t>(j.dst), reinterpret_cast<uintptr_t>(j.dst) + j.bytes);
    if (overlapping(std::move(iv))) n_threads = 1;
  }
  auto part = [&](size_t k) {
    for (size_t i = k; i < jobs.size(); i += n_threads) std::memcpy(jobs[i].dst, jobs[i].src, jobs[i].bytes);
  };
  std::vector<std::thread> threads;
  for (size_t k = 1; k < n_threads; ++k) threads.emplace_back(part, k);
  part(0);
  for (std::thread& t : threads) t.join();
}

// A copy's pieces (the ranges in order, the long ones cut so each fits a chunk with its
// table entry) grouped into rounds: [begin, end) of the pieces, each round one chunk.
struct Piece {
  float* dev;
  float* host;
  int64_t n;
};
std::vector<Piece> pieces_of(const ops::HostRange* r, int64_t n) {
  std::vector<Piece> pieces;
  pieces.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t at = 0; at < r[i].n; at += kPieceFloats) {
      pieces.push_back({r[i].buf->data() + r[i].offset + at, r[i].host + at, std::min(kPieceFloats, r[i].n - at)});
    }
  }
  return pieces;
}

size_t table_bytes(size_t entries) { return (sizeof(RangeCopy) * entries + 255) & ~size_t{255}; }

// The round starting at piece i: pieces while their floats (256-byte aligned) and the
// table fit a chunk (one at least). Fills `table` (lane offsets after the table) and
// returns the end; data: the round's bytes after the table.
size_t round_of(const std::vector<Piece>& pieces, size_t i, std::vector<RangeCopy>& table, size_t& data) {
  table.clear();
  data = 0;
  size_t j = i;
  while (j < pieces.size()) {
    const size_t need = padded(pieces[j].n);
    if (!table.empty() && table_bytes(table.size() + 1) + data + need > kChunkBytes) break;
    table.push_back({pieces[j].dev, data / sizeof(float), static_cast<uint64_t>(pieces[j].n)});
    data += need;
    ++j;
  }
  const size_t tb = table_bytes(table.size());
  for (RangeCopy& c : table) c.lane += tb / sizeof(float);  // the data follows the table
  return j;
}

// cudaEventQuery without leaving "not ready" behind as the thread's last error.
bool event_done(cudaEvent_t e, const char* op) {
  const cudaError_t rc = cudaEventQuery(e);
  if (rc == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  HEARTH_CUDA_CHECK(op, rc);
  return true;
}

}  // namespace

CudaBackend::CopyStreams::~CopyStreams() {
  if (up == nullptr) return;
  if (worker.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv_job.notify_all();
    worker.join();
  }
  cudaStreamSynchronize(up);
  cudaStreamSynchronize(down);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  for (int i = 0; i < 2; ++i) {
    if (down_free[i] != nullptr) cudaEventDestroy(down_free[i]);
    if (down_dev[i] != nullptr) cudaFree(down_dev[i]);
  }
  if (up_dev != nullptr) cudaFree(up_dev);
  for (int i = 0; i < 2; ++i) {
    if (up_free[i] != nullptr) cudaEventDestroy(up_free[i]);
    if (up_host[i] != nullptr) cudaFreeHost(up_host[i]);
  }
  for (uint8_t* c : chunks) cudaFreeHost(c);
  cudaStreamDestroy(up);
  cudaStreamDestroy(down);
}

void CudaBackend::make_copy_streams() {
  CopyStreams& cs = copies_;
  if (cs.up != nullptr) return;
  const char* op = "copy streams";
  HEARTH_CUDA_CHECK(op, cudaStreamCreateWithFlags(&cs.up, cudaStreamNonBlocking));
  HEARTH_CUDA_CHECK(op, cudaStreamCreateWithFlags(&cs.down, cudaStreamNonBlocking));
  HEARTH_CUDA_CHECK(op, cudaMalloc(reinterpret_cast<void**>(&cs.up_dev), kChunkBytes));
  for (int i = 0; i < 2; ++i) {
    HEARTH_CUDA_CHECK(op, cudaMalloc(reinterpret_cast<void**>(&cs.down_dev[i]), kChunkBytes));
    HEARTH_CUDA_CHECK(op, cudaEventCreateWithFlags(&cs.down_free[i], cudaEventDisableTiming));
  }
  for (int i = 0; i < 2; ++i) {
    HEARTH_CUDA_CHECK(op, cudaMallocHost(reinterpret_cast<void**>(&cs.up_host[i]), kChunkBytes));
    HEARTH_CUDA_CHECK(op, cudaEventCreateWithFlags(&cs.up_free[i], cudaEventDisableTiming));
  }
  rt_.note_alloc(static_cast<int64_t>(3 * kChunkBytes));
  cs.worker = std::thread([this] { upload_worker(); });
}

cudaEvent_t CudaBackend::copy_event() {
  CopyStreams& cs = copies_;
  if (cs.free_events.empty()) {
    cudaEvent_t e = nullptr;
    HEARTH_CUDA_CHECK("copy streams", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cs.events.push_back(e);
    return e;
  }
  cudaEvent_t e = cs.free_events.back();
  cs.free_events.pop_back();
  return e;
}

uint8_t* CudaBackend::copy_chunk() {
  CopyStreams& cs = copies_;
  // At the cap: the oldest copies finish first (the host waits for their streams only).
  while (cs.free_chunks.empty() && cs.chunks.size() * kChunkBytes >= kMaxPinnedBytes && !cs.pending.empty()) {
    copy_wait(cs.pending.front().id);
  }
  if (cs.free_chunks.empty()) {
    void* p = nullptr;
    HEARTH_CUDA_CHECK("copy streams", cudaMallocHost(&p, kChunkBytes));
    cs.chunks.push_back(static_cast<uint8_t*>(p));
    return static_cast<uint8_t*>(p);
  }
  uint8_t* c = cs.free_chunks.back();
  cs.free_chunks.pop_back();
  return c;
}

ops::Backend::CopyId CudaBackend::copy_ranges_from_host_async(const ops::HostRange* r, int64_t n) {
  if (rt_.in_graph_step()) return ops::Backend::copy_ranges_from_host_async(r, n);  // at once, in the step
  q8_ready_ = {};  // a range may be the x an op quantized
  rt_.bind();
  rt_.flush_capture();
  const char* op = "copy_ranges_from_host";
  for (int64_t i = 0; i < n; ++i) check_range(r[i], op);
  make_copy_streams();
  CopyStreams& cs = copies_;
  CopyStreams::UpJob job;
  for (const Piece& p : pieces_of(r, n)) job.pieces.push_back({p.dev, p.host, p.n});
  // After the work queued so far on the compute stream (steps may still read the blocks
  // this overwrites): the worker's stream waits for this event.
  job.after = copy_event();
  HEARTH_CUDA_CHECK(op, cudaEventRecord(job.after, stream_));
  job.done = copy_event();
  job.id = ++copies_started_;
  CopyStreams::Copy copy;
  copy.id = job.id;
  copy.upload = true;
  copy.done = job.done;
  copy.after = job.after;
  cs.pending.push_back(std::move(copy));
  {
    std::lock_guard<std::mutex> lock(cs.mu);
    cs.jobs.push_back(std::move(job));
  }
  cs.cv_job.notify_one();
  return copies_started_;
}

void CudaBackend::upload_worker() {
  CopyStreams& cs = copies_;
  cudaSetDevice(rt_.device());
  const char* op = "copy_ranges_from_host";
  std::vector<Piece> pieces;
  std::vector<RangeCopy> table;
  std::vector<CopyStreams::HostPart> gather;
  int lane = 0;
  for (;;) {
    CopyStreams::UpJob job;
    {
      std::unique_lock<std::mutex> lock(cs.mu);
      cs.cv_job.wait(lock, [&] { return cs.stop || !cs.jobs.empty(); });
      if (cs.stop) return;
      job = std::move(cs.jobs.front());
      cs.jobs.pop_front();
    }
    std::string error;
    try {
      HEARTH_CUDA_CHECK(op, cudaStreamWaitEvent(cs.up, job.after, 0));
      pieces.clear();
      for (const CopyStreams::UpPiece& p : job.pieces) pieces.push_back({p.dev, const_cast<float*>(p.host), p.n});
      for (size_t i = 0; i < pieces.size();) {
        size_t data = 0;
        const size_t j = round_of(pieces, i, table, data);
        const size_t tb = table_bytes(table.size());
        // The lane's previous round must have left it before it is written again.
        if (cs.up_used[lane]) HEARTH_CUDA_CHECK(op, cudaEventSynchronize(cs.up_free[lane]));
        uint8_t* h = cs.up_host[lane];
        std::memcpy(h, table.data(), sizeof(RangeCopy) * table.size());
        gather.clear();
        for (size_t k = i; k < j; ++k) {
          gather.push_back({h + sizeof(float) * table[k - i].lane, reinterpret_cast<const uint8_t*>(pieces[k].host),
                            sizeof(float) * static_cast<size_t>(pieces[k].n)});
        }
        copy_all(gather);
        // The device lane's previous round was scattered before this copy runs (one stream).
        HEARTH_CUDA_CHECK(op, cudaMemcpyAsync(cs.up_dev, h, tb + data, cudaMemcpyHostToDevice, cs.up));
        HEARTH_CUDA_CHECK(op, cudaEventRecord(cs.up_free[lane], cs.up));
        cs.up_used[lane] = true;
        if (!overlapping(table)) {
          scatter_ranges<<<static_cast<unsigned>(table.size()), 256, 0, cs.up>>>(
              reinterpret_cast<const RangeCopy*>(cs.up_dev), reinterpret_cast<const float*>(cs.up_dev));
          HEARTH_CUDA_LAUNCHED(op);
        } else {
          for (const RangeCopy& c : table) {  // in order: later ranges win where they overlap
            HEARTH_CUDA_CHECK(op, cudaMemcpyAsync(c.dev, cs.up_dev + sizeof(float) * c.lane, sizeof(float) * c.n,
                                                  cudaMemcpyDeviceToDevice, cs.up));
          }
        }
        lane ^= 1;
        i = j;
      }
      HEARTH_CUDA_CHECK(op, cudaEventRecord(job.done, cs.up));
    } catch (const std::exception& e) {
      error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(cs.mu);
      cs.queued = job.id;
      if (!error.empty() && cs.error.empty()) cs.error = error;
    }
    cs.cv_queued.notify_all();
  }
}

void CudaBackend::wait_queued(CopyId id, const char* op) {
  CopyStreams& cs = copies_;
  std::unique_lock<std::mutex> lock(cs.mu);
  cs.cv_queued.wait(lock, [&] { return cs.queued >= id || !cs.error.empty(); });
  if (!cs.error.empty()) fail(ErrorKind::kInternal, "cuda", std::string(op) + ": the upload worker failed: " + cs.error);
}

ops::Backend::CopyId CudaBackend::copy_ranges_to_host_async(const ops::HostRange* r, int64_t n) {
  if (rt_.in_graph_step()) return ops::Backend::copy_ranges_to_host_async(r, n);  // at once, in the step
  rt_.bind();
  rt_.flush_capture();
  const char* op = "copy_ranges_to_host";
  for (int64_t i = 0; i < n; ++i) check_range(r[i], op);
  make_copy_streams();
  CopyStreams& cs = copies_;
  CopyStreams::Copy copy;
  const std::vector<Piece> pieces = pieces_of(r, n);
  std::vector<RangeCopy> table;
  for (size_t i = 0; i < pieces.size();) {
    size_t data = 0;
    const size_t j = round_of(pieces, i, table, data);
    const size_t tb = table_bytes(table.size());
    uint8_t* h = copy_chunk();
    copy.chunks.push_back(h);
    std::memcpy(h, table.data(), sizeof(RangeCopy) * table.size());
    for (size_t k = i; k < j; ++k) {
      copy.parts.push_back({pieces[k].host, h + sizeof(float) * table[k - i].lane,
                            sizeof(float) * static_cast<size_t>(pieces[k].n)});
    }
    const int l = cs.down_next;
    cs.down_next ^= 1;
    uint8_t* lane = cs.down_dev[l];
    // On the compute stream: the lane is free once the copy that read it last is done.
    if (cs.down_used[l]) HEARTH_CUDA_CHECK(op, cudaStreamWaitEvent(stream_, cs.down_free[l], 0));
    HEARTH_CUDA_CHECK(op, cudaMemcpyAsync(lane, h, tb, cudaMemcpyHostToDevice, stream_));
    gather_ranges<<<static_cast<unsigned>(table.size()), 256, 0, stream_>>>(reinterpret_cast<const RangeCopy*>(lane),
                                                                             reinterpret_cast<float*>(lane));
    HEARTH_CUDA_LAUNCHED(op);
    cudaEvent_t gathered = copy_event();
    HEARTH_CUDA_CHECK(op, cudaEventRecord(gathered, stream_));
    HEARTH_CUDA_CHECK(op, cudaStreamWaitEvent(cs.down, gathered, 0));
    cs.free_events.push_back(gathered);  // the wait holds its state
    HEARTH_CUDA_CHECK(op, cudaMemcpyAsync(h + tb, lane + tb, data, cudaMemcpyDeviceToHost, cs.down));
    HEARTH_CUDA_CHECK(op, cudaEventRecord(cs.down_free[l], cs.down));
    cs.down_used[l] = true;
    i = j;
  }
  copy.done = copy_event();
  HEARTH_CUDA_CHECK(op, cudaEventRecord(copy.done, cs.down));
  copy.id = ++copies_started_;
  cs.pending.push_back(std::move(copy));
  return copies_started_;
}

void CudaBackend::finish_copy(CopyStreams::Copy& c) {
  CopyStreams& cs = copies_;
  if (!c.upload) copy_all(c.parts);
  // Later steps read an upload's blocks after it on the device too (the host saw it done;
  // this keeps the order explicit). Not inside a step: its copy_fence then came before.
  if (c.upload && !rt_.in_graph_step()) HEARTH_CUDA_CHECK("copy_done", cudaStreamWaitEvent(stream_, c.done, 0));
  for (uint8_t* h : c.chunks) {
    if (cs.chunks.size() * kChunkBytes <= kMaxPinnedBytes) {
      cs.free_chunks.push_back(h);
      continue;
    }
    // Past the cap (one copy larger than it): freed, so a rare large swap does not keep
    // its pinned memory for the rest of the run.
    cs.chunks.erase(std::find(cs.chunks.begin(), cs.chunks.end(), h));
    HEARTH_CUDA_CHECK("copy_done", cudaFreeHost(h));
  }
  cs.free_events.push_back(c.done);
  if (c.after != nullptr) cs.free_events.push_back(c.after);
  c = {};
}

bool CudaBackend::copy_done(CopyId id) {
  CopyStreams& cs = copies_;
  if (!cs.pending.empty() && cs.pending.front().id <= id) rt_.bind();
  while (!cs.pending.empty() && cs.pending.front().id <= id) {
    CopyStreams::Copy& c = cs.pending.front();
    if (c.upload) {
      std::lock_guard<std::mutex> lock(cs.mu);
      if (!cs.error.empty()) fail(ErrorKind::kInternal, "cuda", "copy_done: the upload worker failed: " + cs.error);
      if (cs.queued < c.id) return false;  // the worker has not queued it yet
    }
    if (!event_done(c.done, "copy_done")) return false;
    finish_copy(c);
    cs.pending.pop_front();
  }
  return id <= copies_started_;
}

void CudaBackend::copy_wait(CopyId id) {
  CopyStreams& cs = copies_;
  if (cs.pending.empty() || cs.pending.front().id > id) return;
  rt_.bind();
  while (!cs.pending.empty() && cs.pending.front().id <= id) {
    if (cs.pending.front().upload) wait_queued(cs.pending.front().id, "copy_wait");
    HEARTH_CUDA_CHECK("copy_wait", cudaEventSynchronize(cs.pending.front().done));
    finish_copy(cs.pending.front());
    cs.pending.pop_front();
  }
}

void CudaBackend::copy_fence(CopyId id) {
  CopyStreams& cs = copies_;
  if (cs.pending.empty() || cs.pending.front().id > id) return;
  if (rt_.in_graph_step()) fail(ErrorKind::kInternal, "cuda", "copy_fence: called inside a step");
  rt_.bind();
  rt_.flush_capture();
  for (const CopyStreams::Copy& c : cs.pending) {
    if (c.id > id) break;
    if (!c.upload) continue;
    wait_queued(c.id, "copy_fence");  // its event recorded (the worker's gather done; not its copy)
    HEARTH_CUDA_CHECK("copy_fence", cudaStreamWaitEvent(stream_, c.done, 0));
  }
}

}  // namespace hearth::cuda

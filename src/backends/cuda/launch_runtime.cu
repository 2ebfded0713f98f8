// LaunchRuntime (launch_runtime.h): device binding, stream, cuBLAS, staging of host
// arrays, the step arena, decode steps recorded as graphs, scratch, waits and op timing.
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "backends/cuda/launch_runtime.h"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/launch.cuh"
#include "core/error.h"
#include "core/tune.h"

namespace hearth::cuda {
namespace {

constexpr size_t kStageBytes = size_t{8} << 20;

bool g_pdl = false;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ends the stream capture in progress and instantiates its graph. A capture the runtime
// invalidated (an operation it cannot record) has not run its work: that is a bug in the
// op that did it, reported rather than losing the work.
cudaGraphExec_t end_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  const cudaError_t rc = cudaStreamEndCapture(stream, &g);
  if (rc != cudaSuccess || g == nullptr) {
    cudaGetLastError();
    HEARTH_CUDA_CHECK("graph capture", rc == cudaSuccess ? cudaErrorStreamCaptureInvalidated : rc);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t irc = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  HEARTH_CUDA_CHECK("graph instantiate", irc);
  return exec;
}

}  // namespace

static const char* cublas_message(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS operation not supported";
    default: return "cuBLAS error";
  }
}

void check_cublas(int status, const char* op, const char* what) {
  const auto s = static_cast<cublasStatus_t>(status);
  if (s != CUBLAS_STATUS_SUCCESS) {
    fail(ErrorKind::kInternal, "cuda", std::string(op) + ": " + what + ": " + cublas_message(s) + " (" +
                                           std::to_string(static_cast<int>(s)) + ")");
  }
}

bool pdl_enabled() { return g_pdl; }
void set_pdl_enabled(bool on) { g_pdl = on; }
void check_launch(cudaError_t rc) { LaunchRuntime::check(static_cast<int>(rc), "launch", "cudaLaunchKernelEx"); }

void LaunchRuntime::check(int rc, const char* op, const char* what) {
  if (rc == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(rc);
  const ErrorKind kind = e == cudaErrorMemoryAllocation ? ErrorKind::kResource : ErrorKind::kInternal;
  if (e == cudaErrorMemoryAllocation) cudaGetLastError();  // not sticky: clear it
  fail(kind, "cuda", std::string(op) + ": " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void LaunchRuntime::bind() const {
  thread_local int current = -1;
  if (current != device_) {
    check(cudaSetDevice(device_), "bind", "cudaSetDevice");
    current = device_;
  }
}

LaunchRuntime::OpTimer::OpTimer(LaunchRuntime& rt, const char* op) : rt_(rt.timing_ ? &rt : nullptr), op_(op) {
  rt.bind();
  ++rt.op_seq_;
  if (rt_ != nullptr) t0_ns_ = now_ns();
}

LaunchRuntime::OpTimer::~OpTimer() {
  if (rt_ == nullptr) return;
  if (!rt_->host_timing_) cudaStreamSynchronize(rt_->stream_);
  const int64_t dt = now_ns() - t0_ns_;
  for (auto& e : rt_->op_times_) {
    if (e.first == op_) {
      e.second.first += 1;
      e.second.second += dt;
      return;
    }
  }
  rt_->op_times_.push_back({op_, {1, dt}});
}

LaunchRuntime::LaunchRuntime(int device) : device_(device) {
  // The tuning keys (core/tune_keys.h) of the runtime's switches, read once here.
  const int64_t timing = tune::get(tune::kCudaOpTiming);  // 0 off, 1 device, 2 host
  timing_ = timing != 0;
  host_timing_ = timing == 2;
  graphs_ = tune::on(tune::kCudaGraph) && !(timing_ && !host_timing_);
  wait_timing_ = tune::on(tune::kCudaWaitTiming);
  int n = 0;
  HEARTH_CUDA_CHECK("init", cudaGetDeviceCount(&n));
  if (device < 0 || device >= n) {
    fail(ErrorKind::kInvalidInput, "cuda", "device " + std::to_string(device) + " does not exist (" +
                                               std::to_string(n) + " visible)");
  }
  HEARTH_CUDA_CHECK("init", cudaSetDevice(device));
  cudaDeviceProp prop{};
  HEARTH_CUDA_CHECK("init", cudaGetDeviceProperties(&prop, device));
  name_ = "cuda:" + std::to_string(device) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
          std::to_string(prop.minor) + ")";
  // Programmatic dependent launch (launch.cuh) on Hopper and later; cuda.pdl=0: off.
  set_pdl_enabled(prop.major >= 9 && tune::on(tune::kCudaPdl));
  HEARTH_CUDA_CHECK("init", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Keep memory freed by buffers in the pool: scratch of every step is reused, not
  // returned to the driver and asked for again.
  cudaMemPool_t pool = nullptr;
  HEARTH_CUDA_CHECK("init", cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = UINT64_MAX;
  HEARTH_CUDA_CHECK("init", cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  check_cublas(cublasCreate(&cublas_), "init", "cublasCreate");
  check_cublas(cublasSetStream(cublas_, stream_), "init", "cublasSetStream");
  HEARTH_CUDA_CHECK("init", cudaMallocHost(reinterpret_cast<void**>(&stage_host_), kStageBytes));
  HEARTH_CUDA_CHECK("init", cudaMalloc(reinterpret_cast<void**>(&stage_dev_), kStageBytes));
  stage_cap_ = kStageBytes;
  note_alloc(static_cast<int64_t>(kStageBytes));
}

void LaunchRuntime::finish() {
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g != nullptr) cudaGraphDestroy(g);
    capturing_ = false;
  }
  cudaStreamSynchronize(stream_);
}

LaunchRuntime::~LaunchRuntime() {
  finish();
  drop_graphs();
  if (graphs_ && (wait_timing_ || timing_)) {
    std::fprintf(stderr, "hearth: CUDA graphs: %lld steps recorded, %lld replayed, %lld differed from their "
                 "recording (run again op by op), %lld recordings cut short\n",
                 static_cast<long long>(graph_stats_.recorded), static_cast<long long>(graph_stats_.replayed),
                 static_cast<long long>(graph_stats_.retried), static_cast<long long>(graph_stats_.abandoned));
    if (graph_timed_ > 0) {
      std::fprintf(stderr, "hearth: CUDA graphs: %lld replays timed: %.1f us of device time and %.1f us of host "
                   "launch time per replay\n", static_cast<long long>(graph_timed_),
                   1e3 * graph_gpu_ms_ / static_cast<double>(graph_timed_),
                   graph_launch_ns_ / 1e3 / static_cast<double>(graph_timed_));
    }
  }
  for (void* e : graph_events_) {
    if (e != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
  if (wait_timing_ && waits_ > 1) {
    const int64_t span = last_wait_ns_ - first_wait_ns_;
    std::fprintf(stderr,
                 "hearth: CUDA waits: the host waited %.1f ms for the device in %lld waits over %.1f ms (%.1f %%)\n",
                 wait_ns_ / 1e6, static_cast<long long>(waits_), span / 1e6, span > 0 ? 100.0 * wait_ns_ / span : 0.0);
  }
  if (timing_ && !op_times_.empty()) {
    std::sort(op_times_.begin(), op_times_.end(),
              [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    int64_t total = 0;
    for (const auto& e : op_times_) total += e.second.second;
    std::fprintf(stderr, "hearth: CUDA op timing (%s): %.1f ms in all\n",
                 host_timing_ ? "host time inside each op, no waiting" : "each op synchronised", total / 1e6);
    for (const auto& e : op_times_) {
      std::fprintf(stderr, "  %-22s %8lld calls %10.2f ms %5.1f %%  %8.1f us/call\n", e.first.c_str(),
                   static_cast<long long>(e.second.first), e.second.second / 1e6, 100.0 * e.second.second / total,
                   e.second.second / 1e3 / e.second.first);
    }
  }
  for (void* p : scratch_) cudaFree(p);
  cudaFree(stage_dev_);
  cudaFree(step_dev_);
  cudaFreeHost(stage_host_);
  if (step_host_ != nullptr) cudaFreeHost(step_host_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  cudaStreamDestroy(stream_);
}

void LaunchRuntime::note_alloc(int64_t bytes) {
  used_ = static_cast<uint64_t>(static_cast<int64_t>(used_) + bytes);
  peak_ = std::max(peak_, used_);
}

void LaunchRuntime::synchronize() {
  bind();
  wait("synchronize");
}

void LaunchRuntime::set_graphs(bool on) {
  bind();
  flush_capture();
  mode_ = StepMode::kEager;
  graphs_ = on && !(timing_ && !host_timing_);
  no_graph_.clear();
  retry_keys_.clear();
  if (!graphs_) drop_graphs();
}

void LaunchRuntime::drop_graphs() {
  for (StepGraph& g : recordings_) {
    if (g.exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g.exec));
  }
  recordings_.clear();
  replay_ = nullptr;
}

void LaunchRuntime::begin_step() {
  bind();
  flush_capture();
  step_ = nullptr;  // no description: every host array is staged, the step runs op by op
  begin_step_impl(false);
}

void LaunchRuntime::begin_step(const ops::StepDesc& d, const std::vector<uint8_t>& front, int64_t key_bucket,
                               bool graph) {
  bind();
  flush_capture();  // (the upload below must not be part of a recording)
  step_ = nullptr;
  step_desc_off_ = (front.size() + 255) & ~size_t{255};
  const size_t total = step_desc_off_ + d.size();
  if (total > 0) {
    // The mirror's last upload may still be queued: it must have read the mirror first.
    if (step_upload_pending_) wait("begin_step");
    if (total > step_cap_) {
      // Queued work may read the old device arena: done first. The arena moves: recorded
      // graphs read the old one (generation).
      wait("begin_step");
      if (step_host_ != nullptr) cudaFreeHost(step_host_);
      if (step_dev_ != nullptr) cudaFree(step_dev_);
      note_alloc(-static_cast<int64_t>(step_cap_));
      step_host_ = nullptr;
      step_dev_ = nullptr;
      step_cap_ = std::max({total, 2 * step_cap_, size_t{64} << 10});
      HEARTH_CUDA_CHECK("begin_step", cudaMallocHost(reinterpret_cast<void**>(&step_host_), step_cap_));
      HEARTH_CUDA_CHECK("begin_step", cudaMalloc(reinterpret_cast<void**>(&step_dev_), step_cap_));
      note_alloc(static_cast<int64_t>(step_cap_));
      ++generation_;
    }
    if (!front.empty()) std::memcpy(step_host_, front.data(), front.size());
    if (d.size() > 0) std::memcpy(step_host_ + step_desc_off_, d.data(), d.size());
    // One copy for the whole step, ahead of its graph (recorded or replayed) on the stream.
    HEARTH_CUDA_CHECK("begin_step", cudaMemcpyAsync(step_dev_, step_host_, total, cudaMemcpyHostToDevice, stream_));
    step_upload_pending_ = true;
    ++stage_stats_.step_uploads;
  }
  step_ = &d;
  step_base_ = d.data();
  step_size_ = d.size();
  // The step's key: its description (the model's own), what the description says its
  // launches depend on (the pool, snapshots), its shape (rows, sequences and each one's
  // rows, which rows are output rows, image rows or not) and the caller's key bucket (the
  // attention's context bucket: the launches' key ranges and table strides are the
  // bucket's). (The output rows by value: the model reads a contiguous run of them in
  // place, at an address that depends on the first.)
  uint64_t key = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) { key = (key ^ v) * 0x100000001b3ull; };
  mix(reinterpret_cast<uintptr_t>(&d));
  mix(d.launch_key());
  mix(static_cast<uint64_t>(d.n_tokens()));
  mix(static_cast<uint64_t>(d.n_seqs()));
  mix(static_cast<uint64_t>(d.n_out()));
  mix(d.pos3() != nullptr);
  mix(static_cast<uint64_t>(key_bucket));
  for (int64_t s = 0; s < d.n_seqs(); ++s) mix(static_cast<uint64_t>(d.seqs()[s].n_tokens));
  for (int64_t r = 0; r < d.n_out(); ++r) mix(static_cast<uint64_t>(d.out_rows()[r]));
  step_key_ = key;
  begin_step_impl(graph);
}

void LaunchRuntime::begin_step_impl(bool graph) {
  mode_ = StepMode::kEager;
  replay_broken_ = false;
  replay_ = nullptr;
  if (!graphs_ || !graph) return;
  // The staging offsets of a graph step start at 0: whatever read the ring before must be done.
  if (staged_since_wait_) wait("begin_step");
  stage_off_ = 0;
  ++stage_epoch_;
  stage_i_ = 0;
  const uint64_t key = step_key_;
  const auto retry = std::find(retry_keys_.begin(), retry_keys_.end(), key);
  const bool record_anew = retry != retry_keys_.end();
  if (record_anew) retry_keys_.erase(retry);
  for (StepGraph& g : recordings_) {
    if (g.key == key && g.generation == generation_ && g.frees == frees_ && !record_anew) {
      replay_ = &g;
      mode_ = StepMode::kReplay;
      return;
    }
  }
  for (const auto& [k, gen] : no_graph_) {
    if (k == key && gen == generation_) {
      mode_ = StepMode::kEager;
      return;
    }
  }
  rec_ = StepGraph{};
  rec_.key = key;
  rec_.generation = generation_;
  rec_.frees = frees_;
  HEARTH_CUDA_CHECK("graph capture", cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  mode_ = StepMode::kRecord;
}

bool LaunchRuntime::skip_launch() {
  if (mode_ != StepMode::kReplay) return false;
  // An allocation, free or wait since the step began: not the recorded step (before
  // anything more of it is done on the host).
  if (replay_broken_) retry_step();
  return true;
}

void LaunchRuntime::retry_step() {
  mode_ = StepMode::kEager;  // the caller's second attempt runs op by op
  // (Its arena stays: begin_step uploaded it. Not what the replay "staged": those bytes
  // were to go up with the graph, which never launches: a new stage epoch.)
  ++stage_epoch_;
  retry_keys_.push_back(replay_->key);
  ++graph_stats_.retried;
  replay_ = nullptr;
  throw ops::StepRetry();
}

void LaunchRuntime::launch_timed(void* exec) {
  if (!wait_timing_) {
    HEARTH_CUDA_CHECK("graph launch", cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream_));
    return;
  }
  if (graph_events_[0] == nullptr) {
    for (void*& e : graph_events_) HEARTH_CUDA_CHECK("graph launch", cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&e)));
  }
  HEARTH_CUDA_CHECK("graph launch", cudaEventRecord(static_cast<cudaEvent_t>(graph_events_[0]), stream_));
  const int64_t t0 = now_ns();
  HEARTH_CUDA_CHECK("graph launch", cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream_));
  graph_launch_ns_ += now_ns() - t0;
  HEARTH_CUDA_CHECK("graph launch", cudaEventRecord(static_cast<cudaEvent_t>(graph_events_[1]), stream_));
  graph_event_pending_ = true;
}

void LaunchRuntime::upload_stages(size_t end) {
  if (end > 0) {
    HEARTH_CUDA_CHECK("graph launch", cudaMemcpyAsync(stage_dev_, stage_host_, end, cudaMemcpyHostToDevice, stream_));
  }
}

void LaunchRuntime::end_step() {
  if (mode_ != StepMode::kEager) end_step_launch();  // the end of a graph step: the graph (recorded or replayed)
  step_ = nullptr;  // the step ends here: its arena's pointers are the host's again
  flush_capture();
}

void LaunchRuntime::end_step_launch() {
  if (mode_ == StepMode::kReplay) {
    const bool complete = !replay_broken_ && stage_i_ == replay_->stages.size();
    if (!complete) retry_step();
    upload_stages(replay_->stage_end);
    launch_timed(replay_->exec);
    ++graph_stats_.replayed;
    stage_off_ = replay_->stage_end;
    staged_since_wait_ = true;
    replay_ = nullptr;
    mode_ = StepMode::kEager;
    return;
  }
  if (mode_ != StepMode::kRecord) return;
  // A recording that reached the step's end: keep it for the steps of its key.
  mode_ = StepMode::kEager;
  capturing_ = false;
  const cudaGraphExec_t exec = end_capture(stream_);
  upload_stages(stage_off_);
  HEARTH_CUDA_CHECK("graph launch", cudaGraphLaunch(exec, stream_));
  ++graph_stats_.recorded;
  rec_.exec = exec;
  rec_.stage_end = stage_off_;
  for (StepGraph& old : recordings_) {
    if (old.key == rec_.key) {
      if (old.exec != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(old.exec));
      old = std::move(rec_);
      return;
    }
  }
  recordings_.push_back(std::move(rec_));
}

void LaunchRuntime::flush_capture() {
  if (mode_ == StepMode::kReplay) {
    // An allocation, free or wait inside a replayed step: not the recorded step. No
    // throwing here (destructors call this); the next op or the step's end does.
    replay_broken_ = true;
    return;
  }
  if (!capturing_) return;
  // A recording cut short: launch what was captured, keep nothing, run the rest op by op
  // (and the steps of this key too, until memory moves: the next attempt may then succeed).
  capturing_ = false;
  mode_ = StepMode::kEager;
  ++graph_stats_.abandoned;
  bool known = false;
  for (auto& e : no_graph_) {
    if (e.first == rec_.key) {
      e.second = generation_;
      known = true;
    }
  }
  if (!known) no_graph_.emplace_back(rec_.key, generation_);
  const cudaGraphExec_t exec = end_capture(stream_);
  // (No throwing before the launch: the captured work must run.)
  if (stage_off_ > 0) cudaMemcpyAsync(stage_dev_, stage_host_, stage_off_, cudaMemcpyHostToDevice, stream_);
  const cudaError_t lrc = cudaGraphLaunch(exec, stream_);
  cudaGraphExecDestroy(exec);  // released once the launch completes
  HEARTH_CUDA_CHECK("graph launch", lrc);
}

void LaunchRuntime::wait(const char* op) {
  flush_capture();
  staged_since_wait_ = false;
  step_upload_pending_ = false;
  if (!wait_timing_) {
    HEARTH_CUDA_CHECK(op, cudaStreamSynchronize(stream_));
    return;
  }
  const int64_t t0 = now_ns();
  HEARTH_CUDA_CHECK(op, cudaStreamSynchronize(stream_));
  const int64_t t1 = now_ns();
  if (graph_event_pending_) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(graph_events_[0]),
                             static_cast<cudaEvent_t>(graph_events_[1])) == cudaSuccess) {
      graph_gpu_ms_ += ms;
      ++graph_timed_;
    }
    graph_event_pending_ = false;
  }
  // Time from the first wait's end, so that loading and the first step's set-up are out.
  if (waits_ == 0) first_wait_ns_ = t1;
  else wait_ns_ += t1 - t0;
  last_wait_ns_ = t1;
  ++waits_;
}

const void* LaunchRuntime::stage(const void* host, size_t n, const char* op) {
  // An array of the step's description: already on the device (begin_step), at an
  // address that is the same for every step of the same counts. Nothing copied, nothing
  // recorded: a replayed step finds it where the recording did.
  const auto* h = static_cast<const uint8_t*>(host);
  if (step_ != nullptr && n > 0 && h >= step_base_ && h + n <= step_base_ + step_size_) {
    ++stage_stats_.step_reads;
    return step_dev_ + step_desc_off_ + (h - step_base_);
  }
  if (n > 0) ++stage_stats_.ring;
  const size_t bytes = (n + 255) & ~size_t{255};
  if (mode_ == StepMode::kReplay) {
    // The recorded offsets; the step's one upload copies them before the graph is launched.
    if (replay_broken_ || stage_i_ >= replay_->stages.size() || replay_->stages[stage_i_].n != n) retry_step();
    const StageRec& r = replay_->stages[stage_i_++];
    if (n > 0) std::memcpy(stage_host_ + r.off, host, n);
    return stage_dev_ + r.off;
  }
  if (bytes > stage_cap_) {
    wait(op);
    cudaFreeHost(stage_host_);
    cudaFree(stage_dev_);
    note_alloc(-static_cast<int64_t>(stage_cap_));
    stage_cap_ = std::max(bytes, 2 * stage_cap_);
    stage_host_ = nullptr;
    stage_dev_ = nullptr;
    HEARTH_CUDA_CHECK(op, cudaMallocHost(reinterpret_cast<void**>(&stage_host_), stage_cap_));
    HEARTH_CUDA_CHECK(op, cudaMalloc(reinterpret_cast<void**>(&stage_dev_), stage_cap_));
    note_alloc(static_cast<int64_t>(stage_cap_));
    stage_off_ = 0;
    ++stage_epoch_;
    ++generation_;  // recorded graphs copy from and to the old ring
  }
  if (stage_off_ + bytes > stage_cap_) {
    // Work queued earlier may still read the start of the ring: let it finish (a
    // recording is cut short here: a wait ends it).
    wait(op);
    stage_off_ = 0;
    ++stage_epoch_;
  }
  if (n > 0) std::memcpy(stage_host_ + stage_off_, host, n);
  uint8_t* dev = stage_dev_ + stage_off_;
  if (n > 0) {
    // A recorded step's stagings go up in one copy before its graph is launched
    // (upload_stages): copy nodes inside a graph made its launch cost ~100 us of host
    // time on the models with many of them.
    if (mode_ != StepMode::kRecord) {
      HEARTH_CUDA_CHECK(op, cudaMemcpyAsync(dev, stage_host_ + stage_off_, n, cudaMemcpyHostToDevice, stream_));
    }
    staged_since_wait_ = true;
  }
  if (mode_ == StepMode::kRecord) rec_.stages.push_back(StageRec{stage_off_, n});
  stage_off_ += bytes;
  return dev;
}

void* LaunchRuntime::scratch(int slot, size_t bytes, const char* op) {
  if (bytes > scratch_bytes_[slot]) {
    flush_capture();  // a graph holds no allocations
    if (scratch_[slot] != nullptr) {
      wait(op);
      cudaFree(scratch_[slot]);
      note_alloc(-static_cast<int64_t>(scratch_bytes_[slot]));
      scratch_[slot] = nullptr;
      scratch_bytes_[slot] = 0;
    }
    HEARTH_CUDA_CHECK(op, cudaMalloc(&scratch_[slot], bytes));
    scratch_bytes_[slot] = bytes;
    ++generation_;  // recorded graphs use the old address
    note_alloc(static_cast<int64_t>(bytes));
  }
  return scratch_[slot];
}

}  // namespace hearth::cuda

// The CUDA back-end's launch runtime: the one path by which every operation of
// CudaBackend reaches the device, apart from its kernels. It owns the device binding,
// the stream and the cuBLAS handle, the staging of host arrays (a pinned ring, and the
// arena of a described step uploaded once per step), the grow-only scratch slots, the
// recording and replay of decode steps as CUDA graphs, the waits for the stream, the op
// timer (cuda.op_timing, cuda.wait_timing) and the device-memory accounting. Kernels are
// launched with launch_pdl (launch.cuh: programmatic dependent launch), whose switch the
// runtime sets from the device (cuda.pdl).
//
// An operation uses it in this order:
//   LaunchRuntime::OpTimer timer(rt, "op");       // binds the device, times the op
//   const T* d = rt.stage_array(host, n, "op");    // its host arrays on the device
//   void* tmp = rt.scratch(slot, bytes, "op");     // its device temporaries
//   if (rt.skip_launch()) return;                  // a replayed step: the graph launches
//   launch_pdl(kernel, grid, block, smem, rt.stream(), ...);
// The host side of an op (checks, staging, scratch) runs in every step, recorded or
// replayed; only the launches are skipped. An op that reads results back ends the step
// (end_step) or waits (wait), which ends a recording in progress first.
// Host-only code may include this header (no CUDA syntax).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/step_desc.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct cublasContext* cublasHandle_t;

namespace hearth::cuda {

class LaunchRuntime {
 public:
  // Uses CUDA device `device` (throws Error when it is absent or the runtime fails).
  // Reads cuda.op_timing, cuda.wait_timing, cuda.graph and cuda.pdl (core/tune_keys.h).
  explicit LaunchRuntime(int device);
  // Prints the timing tables asked for (stderr) and frees the runtime's memory.
  ~LaunchRuntime();
  LaunchRuntime(const LaunchRuntime&) = delete;
  LaunchRuntime& operator=(const LaunchRuntime&) = delete;

  int device() const { return device_; }
  // "cuda:<device> (<GPU name>, sm_<major><minor>)".
  const std::string& device_name() const { return name_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  // Makes this runtime's device the calling thread's current one (the engine thread of
  // `serve` is not the thread that made the back-end).
  void bind() const;
  // Throws Error "[cuda] <op>: <what>" when rc is not cudaSuccess.
  static void check(int rc, const char* op, const char* what);
  // Ends a recording in progress (its work dropped) and waits for the stream: before the
  // owner frees device memory that queued work may read (its destructor).
  void finish();

  // Device memory accounting for what the back-end hands out or holds (bytes < 0: freed).
  void note_alloc(int64_t bytes);
  // A device buffer is freed (its address may come back for another buffer): every
  // recorded graph is dropped (frees_).
  void note_free() { ++frees_; }
  uint64_t memory_used() const { return used_; }
  uint64_t memory_peak() const { return peak_; }

  // Device memory holding n bytes of host memory for the work queued next on the stream.
  // Bytes inside the described step's arena (begin_step(const StepDesc&, ...)) are already
  // there: their device address, nothing copied. Others are copied through the ring
  // (valid until it wraps, which first waits for the stream); in a recorded step the
  // ring offsets start at 0 and depend only on the step's sequence of stagings; a
  // replayed step writes the recorded offsets and one copy uploads them before its graph.
  const void* stage(const void* host, size_t n, const char* op);
  template <class T>
  const T* stage_array(const T* host, int64_t n, const char* op) {
    return static_cast<const T*>(stage(host, sizeof(T) * static_cast<size_t>(n), op));
  }
  // +1 whenever an address stage returned from the ring may no longer hold what was
  // staged there: the ring wraps or grows, a graph step starts over at offset 0, or a
  // replayed step is abandoned (what it staged was to go up with its graph). An op that
  // reuses a staged array across calls (attention's prompt tiles) keeps the epoch with it.
  uint64_t stage_epoch() const { return stage_epoch_; }
  // Host arrays that reached the device, counted since the runtime was made (tests: a
  // replayed decode step of the step description's arrays copies nothing through the ring).
  struct StageStats {
    int64_t ring = 0;          // arrays copied through the staging ring (also a replayed step's)
    int64_t step_reads = 0;    // arrays found in the step's uploaded arena (nothing copied)
    int64_t step_uploads = 0;  // step arenas uploaded (one copy each, in begin_step)
  };
  StageStats stage_stats() const { return stage_stats_; }

  // Steps. Decode steps (described, and `graph` set by the caller: at most
  // kMaxMatvecTokens tokens) are recorded once as a CUDA graph and replayed: the host,
  // not the GPU, limits decode otherwise (docs/BENCHMARKS.md). begin_step uploads the
  // step's arena first (one copy, outside the graph); the ops read the step's arrays there
  // (tokens, positions, KV slots, block tables, the recurrent layers' state slots, how
  // each output row is returned), at addresses that are the same for every step of the
  // same counts. So a recording serves every step of its key: the description it came
  // from (each model fills its own: a step of another model never replays it), the
  // step's shape (rows, sequences and each one's rows, output rows, image rows or not)
  // and what else sets a launch (key_bucket: the attention's context bucket). A later
  // step of that key launches nothing op by op: the ops return at skip_launch(), host
  // arrays that are not the step's (prompt tiles, the passes around a state snapshot) are
  // written to the staging offsets of the recording, and the end_step that ends the step
  // uploads those and launches the graph. Every device address a graph holds is fixed
  // while no memory is freed or moved: freeing a buffer, growing scratch, staging or the
  // step arena drops every recording (generation). A replayed step that allocates, frees
  // or waits inside, or stages other sizes than its recording, throws ops::StepRetry
  // before anything of it has run; the caller runs it again op by op and the next step
  // of that key is recorded anew. Steps without a description run op by op.
  //
  // A step without a description: every host array is staged, the step runs op by op.
  void begin_step();
  // A described step: [front | step's arena] goes to the device in one copy (front: what
  // the back-end derives from the step, e.g. attention's arrays, at step_arena()), before
  // the step's graph is recorded or replayed; until the step ends (end_step) an op given
  // a pointer into step.data() reads the uploaded bytes instead of staging them.
  void begin_step(const ops::StepDesc& step, const std::vector<uint8_t>& front, int64_t key_bucket, bool graph);
  // The described step being run (null outside one), its uploaded arena on the device
  // (the front part first) and the description's part of it.
  const ops::StepDesc* step() const { return step_; }
  const uint8_t* step_arena() const { return step_dev_; }
  const uint8_t* step_desc_arena() const { return step_dev_ + step_desc_off_; }
  // Whether a graph step (recorded or replayed) is in progress.
  bool in_graph_step() const { return mode_ != StepMode::kEager; }
  // The step ends (the copy back to the host that ends it is next): a recorded step's
  // graph is kept and launched, a replayed one's launched (or ops::StepRetry thrown when
  // the step was not its recording); the step's arena pointers are the host's again.
  void end_step();

  // --tune cuda.graph=0 or set_graphs(false) turns graph steps off (on by default; off
  // with cuda.op_timing=device).
  void set_graphs(bool on);
  // Each op calls this after staging its host arrays and before launching its kernels.
  // True: the launches are skipped (a replayed step: the graph has them). Throws
  // ops::StepRetry when the replayed step allocated, freed or waited since it began.
  bool skip_launch();
  // Ends a capture in progress and launches it (before a wait, an allocation or a free);
  // in a replayed step, marks the step as differing from its recording.
  void flush_capture();
  // A kernel setting changed: recordings made with the old one are not replayed.
  void new_generation() { ++generation_; }
  struct GraphStats {
    int64_t recorded = 0;  // steps captured (and launched) as a new graph
    int64_t replayed = 0;  // steps launched from an earlier recording
    int64_t retried = 0;   // steps that differed from their recording (run again op by op)
    int64_t abandoned = 0; // recordings cut short (an allocation or a wait inside the step)
  };
  GraphStats graph_stats() const { return graph_stats_; }

  // Grow-only device scratch of at least `bytes` (slot 0..kScratch-1; growing it drops
  // the recordings). Slots: 0-2 the products' f16 / f32 copies, 3 dequantized small
  // weights (f32_values), 4 attention's partial results, 5 8-bit activations, 6 MoE
  // routing, 7 GDN, 8 MoE, 9 argmax rows, 10 attention_full's f16 K / V.
  static constexpr int kScratch = 11;
  void* scratch(int slot, size_t bytes, const char* op);

  // Waits for the stream (op names the caller in errors). With cuda.wait_timing=1 the
  // time the host spends waiting here is added up and printed when the runtime is
  // destroyed, against the wall time since the first wait: a host that rarely waits is
  // the bottleneck (launch-bound steps), one that waits most of the time feeds a busy device.
  void wait(const char* op);
  // Waits for all queued work (tests, timing).
  void synchronize();
  bool wait_timing() const { return wait_timing_; }
  // Operations begun (OpTimers made) so far: an op's output that the next op may reuse
  // is valid while this is one more than when it was written.
  uint64_t op_seq() const { return op_seq_; }

  // Each operation makes one first: binds the device and counts the op (op_seq). With
  // cuda.op_timing=device each operation waits for the device and its time is added to
  // a table printed to stderr when the runtime is destroyed (a profile of where a step's
  // time goes; off by default: it serialises host and device). cuda.op_timing=host: the
  // host's time inside each op only, nothing waited for (with cuda.wait_timing, whether
  // the host or the device limits a step).
  class OpTimer {
   public:
    OpTimer(LaunchRuntime& rt, const char* op);
    ~OpTimer();
    void rename(const char* op) { op_ = op; }

   private:
    LaunchRuntime* rt_;
    const char* op_;
    int64_t t0_ns_ = 0;
  };

 private:
  enum class StepMode { kEager, kRecord, kReplay };
  struct StageRec {
    size_t off = 0, n = 0;
  };
  struct StepGraph {
    uint64_t key = 0;      // step_key_ of the step it was recorded from
    void* exec = nullptr;  // cudaGraphExec_t
    uint64_t generation = 0, frees = 0;  // generation_ and frees_ when recorded
    std::vector<StageRec> stages;
    size_t stage_end = 0;  // the staging offset after the step
  };
  // Selects the step's mode (record, replay or op by op); graph: whether the step may be
  // recorded / replayed (a described one; key step_key_).
  void begin_step_impl(bool graph);
  void end_step_launch();
  // A graph step's stagings ([0, end) of the ring, written on the host as its ops ran)
  // to the device in one copy, before the graph that reads them is launched.
  void upload_stages(size_t end);  // at the end_step ending a recorded or replayed step
  void launch_timed(void* exec);  // cudaGraphLaunch (timed with cuda.wait_timing)
  [[noreturn]] void retry_step();  // a replayed step that is not its recording: StepRetry
  void drop_graphs();

  int device_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  uint64_t used_ = 0, peak_ = 0;
  // Staging ring: pinned host memory mirrored by device memory of the same size.
  uint8_t* stage_host_ = nullptr;
  uint8_t* stage_dev_ = nullptr;
  size_t stage_cap_ = 0, stage_off_ = 0;
  uint64_t stage_epoch_ = 0;  // see stage_epoch()
  StageStats stage_stats_;
  // The step arena (begin_step(const StepDesc&, ...)): [the front part | the StepDesc's
  // arena at step_desc_off_], a pinned host mirror and its device copy, grown rarely
  // (growth moves it: recorded graphs are dropped as for scratch). step_ is the step
  // being run (null outside a described step); step_base_ / step_size_ its host arena.
  uint8_t* step_host_ = nullptr;
  uint8_t* step_dev_ = nullptr;
  size_t step_cap_ = 0, step_desc_off_ = 0, step_size_ = 0;
  const ops::StepDesc* step_ = nullptr;
  const uint8_t* step_base_ = nullptr;
  bool step_upload_pending_ = false;  // the mirror's copy may not have run yet (wait() clears it)
  void* scratch_[kScratch] = {};
  size_t scratch_bytes_[kScratch] = {};
  // Step graphs (see begin_step).
  bool graphs_ = true, capturing_ = false;
  StepMode mode_ = StepMode::kEager;
  bool replay_broken_ = false;
  std::vector<StepGraph> recordings_;
  StepGraph rec_;                 // the step being recorded
  StepGraph* replay_ = nullptr;   // the recording being replayed
  size_t stage_i_ = 0;
  uint64_t generation_ = 1;  // +1 when scratch, staging or the step arena moves, or a kernel setting changes
  uint64_t frees_ = 0;            // +1 when a device buffer is freed
  // The described step's key (begin_step): its description's address, its shape and its
  // attention context bucket, hashed (see begin_step).
  uint64_t step_key_ = 0;
  std::vector<uint64_t> retry_keys_;  // keys whose last replay differed: recorded anew next time
  // Keys whose recording was cut short (a host round trip inside the step), with the
  // generation then: not recorded again until scratch, staging or the arena moves.
  std::vector<std::pair<uint64_t, uint64_t>> no_graph_;
  bool staged_since_wait_ = false;
  GraphStats graph_stats_;
  // Timing (see OpTimer and wait).
  bool timing_ = false;
  bool host_timing_ = false;  // cuda.op_timing=host: the host's own time per op, no waits
  bool wait_timing_ = false;
  uint64_t op_seq_ = 0;
  int64_t wait_ns_ = 0, waits_ = 0, first_wait_ns_ = 0, last_wait_ns_ = 0;
  // With cuda.wait_timing: the host's time in cudaGraphLaunch and the device's
  // time running the graphs (events around each launch, read at the next wait).
  void* graph_events_[2] = {};  // cudaEvent_t
  bool graph_event_pending_ = false;
  int64_t graph_launch_ns_ = 0, graph_timed_ = 0;
  double graph_gpu_ms_ = 0.0;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> op_times_;  // op -> (calls, ns)
};

}  // namespace hearth::cuda

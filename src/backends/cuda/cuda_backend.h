// The CUDA back-end: every operation of ops/backend.h on one NVIDIA GPU, in order on
// one stream. Buffers and prepared weights live in device memory (weights keep their
// GGUF block layout); host-memory arguments (ids, positions, KV slots, block tables,
// expert weights) are copied per call through a pinned staging ring on the same stream.
// Only copy_to_host waits for the device. Every CUDA / cuBLAS failure becomes an Error
// naming the operation. Host-only code may include this header (no CUDA syntax).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/backend.h"

typedef struct CUstream_st* cudaStream_t;
typedef struct cublasContext* cublasHandle_t;

namespace hearth::cuda {

class CudaBackend final : public ops::Backend {
 public:
  // Uses CUDA device `device` (throws Error when it is absent or the runtime fails).
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  bool supports_weight(GgmlType type) const override;
  ops::WeightView prepare_weight(const ops::WeightView& w) override;
  std::unique_ptr<ops::Buffer> alloc(int64_t n_floats) override;
  std::unique_ptr<ops::Buffer> alloc_lazy(int64_t n_floats) override;
  void copy_to_host(ops::Buffer& src, int64_t offset, int64_t n, float* dst) override;
  void copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) override;
  uint64_t device_memory_used() const override { return used_; }
  uint64_t device_memory_peak() const override { return peak_; }

  void get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) override;
  void matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) override;
  void matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                    float* const* ys) override;
  bool fused_moe() const override { return true; }
  void moe_ffn(const ops::MoeLayer& layer, const float* x, int64_t n, float* out) override;
  void add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens) override;
  void rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const ops::RopeParams& p) override;
  void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                const ops::KvLayer& cache) override;
  void attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) override;
  void ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w, const ops::GdnSeq* seqs,
                     int64_t n_seqs, float* out) override;
  void gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                       const ops::WeightView& dt_bias, const ops::GdnShape& shape, const ops::GdnSeq* seqs,
                       int64_t n_seqs, float* o) override;
  void gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                      float eps) override;
  void sigmoid_mul(float* x, const float* gate, int64_t n) override;
  void sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(float* x, const float* y, int64_t n) override;
  void copy(const float* src, int64_t n, float* dst) override;
  void fill(float* dst, float value, int64_t n) override;
  void gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) override;
  void scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights, int64_t n_ids,
                        float* dst) override;

  // Decode steps (a step whose token embedding takes at most kMaxMatvecTokens rows) are
  // captured as one CUDA graph and launched as one, instead of ~20 kernel launches per
  // layer: the host, not the GPU, limits decode otherwise (docs/BENCHMARKS.md). Capture
  // starts at that get_rows and ends at the next wait for the device (copy_to_host of the
  // logits) or at any allocation or free; the graph of the step before is updated in
  // place (cudaGraphExecUpdate) when the steps have the same shape, else made anew.
  // Off by default while measured; HEARTH_CUDA_GRAPH=1 or set_graphs(true) turns it on.
  void set_graphs(bool on);
  struct GraphStats {
    int64_t launched = 0;      // graphs launched (captured steps)
    int64_t updated = 0;       // of which reused the previous executable graph
    int64_t instantiated = 0;  // executable graphs made
    int64_t failed = 0;        // captures the runtime invalidated (reported as errors)
  };
  GraphStats graph_stats() const { return graph_stats_; }
  // Internal: ends a capture in progress and launches it (before a wait, an allocation
  // or a free).
  void flush_capture();

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // Waits for all queued work (tests, timing).
  void synchronize();
  // Bytes of device memory held by prepared weights.
  uint64_t weight_bytes() const { return weight_bytes_; }

  // Internal: with HEARTH_CUDA_OP_TIMING=1 each operation waits for the device and its
  // time is added to a table printed to stderr when the back-end is destroyed (a
  // profile of where a step's time goes; off by default: it serialises host and device).
  // HEARTH_CUDA_OP_TIMING=host: the host's time inside each op only, nothing waited for
  // (with HEARTH_CUDA_WAIT_TIMING, whether the host or the device limits a step).
  class OpTimer {
   public:
    OpTimer(CudaBackend& be, const char* op);
    ~OpTimer();
    void rename(const char* op) { op_ = op; }

   private:
    CudaBackend* be_;
    const char* op_;
    int64_t t0_ns_ = 0;
  };

  // Internal: waits for the stream (op names the caller in errors). With
  // HEARTH_CUDA_WAIT_TIMING=1 the time the host spends waiting here is added up and
  // printed when the back-end is destroyed, against the wall time since the first wait:
  // a host that rarely waits is the bottleneck (launch-bound steps), one that waits most
  // of the time feeds a busy device.
  void wait(const char* op);
  // Internal: makes this back-end's device the calling thread's current one (the
  // engine thread of `serve` is not the thread that made the back-end).
  void bind() const;
  // Internal: device memory accounting for the buffers this back-end hands out.
  void note_alloc(int64_t bytes);
  // Internal: throws Error "[cuda] <op>: <what>" when rc is not cudaSuccess.
  static void check(int rc, const char* op, const char* what);

 private:
  // Copies n bytes of host memory to device memory valid for the work queued next on
  // the stream (until the ring wraps, which first waits for the stream).
  const void* stage(const void* host, size_t n, const char* op);
  template <class T>
  const T* stage_array(const T* host, int64_t n, const char* op) {
    return static_cast<const T*>(stage(host, sizeof(T) * static_cast<size_t>(n), op));
  }
  // Device f32 values of a one-row (or small) weight: its own memory when F32, else a
  // dequantized copy made now in scratch (valid until the next call that uses it).
  const float* f32_values(const ops::WeightView& w, int64_t n, const char* op);
  // Grow-only device scratch of at least `bytes` (slot 0..kScratch-1).
  void* scratch(int slot, size_t bytes, const char* op);
  void matmul_gemm(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y);
  // MoE prompts: the (token, expert) pairs sorted by expert, each projection one grouped
  // tensor-core product (quant_gemm_grouped); ids / wts: the routing, on the host.
  bool grouped_moe_ok(const ops::MoeLayer& L) const;
  void moe_grouped(const ops::MoeLayer& L, const float* x, int64_t n, const std::vector<int32_t>& ids,
                   const std::vector<float>& wts, float* out);

  int device_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  // Staging ring: pinned host memory mirrored by device memory of the same size.
  uint8_t* stage_host_ = nullptr;
  uint8_t* stage_dev_ = nullptr;
  size_t stage_cap_ = 0, stage_off_ = 0;
  // The last kStageMemo stagings (ring offset, bytes, ring epoch: +1 at each wrap or growth).
  struct StageMemo {
    size_t off = 0, n = 0;
    uint64_t epoch = ~uint64_t{0};
    uint64_t capture = 0;  // the capture it was staged in (0: none)
  };
  static constexpr int kStageMemo = 8;
  StageMemo stage_memo_[kStageMemo];
  int stage_memo_next_ = 0;
  uint64_t stage_epoch_ = 0;
  static constexpr int kScratch = 7;  // 5: 8-bit activations; 6: MoE routing
  void* scratch_[kScratch] = {};
  size_t scratch_bytes_[kScratch] = {};
  std::vector<void*> weights_;  // device copies made by prepare_weight
  uint64_t weight_bytes_ = 0;
  uint64_t used_ = 0, peak_ = 0;
  bool timing_ = false;
  bool graphs_ = false, capturing_ = false;
  uint64_t captures_ = 0;  // captures begun
  void* graph_exec_ = nullptr;  // cudaGraphExec_t of the last captured step
  GraphStats graph_stats_;
  bool host_timing_ = false;  // HEARTH_CUDA_OP_TIMING=host: the host's own time per op, no waits
  bool wait_timing_ = false;
  int64_t wait_ns_ = 0, waits_ = 0, first_wait_ns_ = 0, last_wait_ns_ = 0;
  bool q8_matvec_ = true;  // decode products on 8-bit activations (HEARTH_CUDA_MATVEC=f32: off)
  // Products of more tokens than the matrix-vector kernels take and at most this many go
  // to quant_gemm (tensor cores on weight tiles dequantized in shared memory), more to
  // dequantize + cuBLAS, which is faster from about 64 tokens on (docs/BENCHMARKS.md);
  // HEARTH_CUDA_QGEMM_MAX overrides (0: always cuBLAS).
  int64_t qgemm_max_tokens_ = 64;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> op_times_;  // op -> (calls, ns)
};

}  // namespace hearth::cuda

// The CUDA back-end: every operation of ops/backend.h on one NVIDIA GPU, in order on
// one stream. Buffers and prepared weights live in device memory (weights keep their
// GGUF block layout); a model step's arrays (ops::StepDesc: tokens, positions, KV slots,
// block tables, ...) are uploaded once per step to a device arena at a fixed address,
// where the ops read them; other host-memory arguments (expert weights, arrays of calls
// outside a described step or of a recurrent layer's passes around a state snapshot) are
// copied per call through a pinned staging ring on the same stream. That machinery (the
// stream, staging, the step arena, graph steps, scratch, waits, op timing) is the launch
// runtime's (launch_runtime.h), which every op calls; this class holds the ops and their
// own state (weights, switches, op-specific caches).
// Only copy_to_host (and copy_wait) waits for the device. Every CUDA / cuBLAS failure becomes an Error
// naming the operation. Host-only code may include this header (no CUDA syntax).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cuda/launch_runtime.h"
#include "ops/backend.h"
#include "ops/step_desc.h"

typedef struct CUevent_st* cudaEvent_t;

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
  // Argmax rows reduced by a kernel (cuda_argmax.cu); only the other rows are copied.
  bool device_argmax() const override { return device_argmax_; }
  void fetch_rows(ops::Buffer& src, int64_t n_rows, int64_t n_cols, const ops::RowReduce* reduce,
                  const ops::PenaltyToken* penalties, float* dst,
                  ops::ArgmaxRow* picks) override;
  void copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) override;
  // Block copies (cuda_host_copy.cu; the contract: ops/backend.h), done when started:
  // through a pinned bounce buffer, one wait per round of up to 64 MiB (to the host), and
  // two pinned upload lanes with a scatter kernel (from the host). (Copies on streams of
  // their own, beside the steps: branch copystream, not yet run on a GPU.)
  CopyId copy_ranges_to_host_async(const ops::HostRange* ranges, int64_t n_ranges) override;
  CopyId copy_ranges_from_host_async(const ops::HostRange* ranges, int64_t n_ranges) override;
  bool copy_done(CopyId id) override;
  void copy_wait(CopyId id) override;
  void copy_fence(CopyId id) override;
  uint64_t device_memory_used() const override { return rt_.memory_used(); }
  uint64_t device_memory_peak() const override { return rt_.memory_peak(); }
  // --deterministic: every product, attention row, recurrence and MoE layer through one
  // kernel family whose per-row arithmetic does not depend on the batch (docs/ARCHITECTURE.md,
  // "Deterministic mode"); slower, so off by default. Set before the first step.
  bool set_deterministic(bool on) override {
    deterministic_ = on;
    rt_.new_generation();  // recordings of the other kernels are not replayed
    return true;
  }
  bool deterministic() const { return deterministic_; }
  bool supports_kv_type(ops::KvType) const override { return true; }  // f32, f16 and q8_0

  void get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) override;
  // Whether matmul sends this product to q8_gemm (int8 tensor cores).
  bool int8_gemm_takes(const ops::WeightView& w, int64_t n_tokens) const;
  // matmul with deterministic_: one kernel family per weight for every token count, each
  // computing a token's sums the same way in any batch: Q4_K on q8_gemm, the other types
  // quant_gemm takes on quant_gemm (calls of up to 64 tokens), small matrices and the
  // rest on the matrix-vector kernels (threads per row independent of the token count).
  void matmul_invariant(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y);
  void matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) override;
  // matmul's variants (cuda_matmul_family.h), in dispatch order; the one matmul runs for a
  // call (not in deterministic mode); whether one takes a call; one run by name (tests).
  struct MatmulVariant;
  static const std::vector<MatmulVariant>& matmul_variants();
  const MatmulVariant& matmul_pick(const ops::WeightView& w, int64_t n_tokens) const;
  bool matmul_takes(const MatmulVariant& v, const ops::WeightView& w, int64_t n_tokens) const;
  void matmul_variant(const MatmulVariant& v, const ops::WeightView& w, const float* x, int64_t n_tokens, float* y);
  void matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                    float* const* ys) override;
  bool fused_moe() const override { return true; }
  void moe_ffn(const ops::MoeLayer& layer, const float* x, int64_t n, float* out) override;
  bool moe_takes_shared(const ops::MoeLayer& layer, int64_t n_tokens) const override;
  // Whether moe_ffn runs a decode batch of n tokens on the tensor-core expert kernels
  // (q8_moe_mma_*: the tokens and h quantized as Q8_K).
  bool moe_mma_takes(const ops::MoeLayer& L, int64_t n) const;
  void moe_ffn_add_rms_norm(const ops::MoeLayer& layer, const float* x, int64_t n, float* out, float* x_res,
                            const ops::WeightView& norm, float eps, float* norm_out) override;
  void add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens) override;
  void rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const ops::RopeParams& p) override;
  void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                const ops::KvLayer& cache) override;
  void attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) override;
  bool gdn_snapshots() const override { return true; }
  void ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w, const ops::GdnStates& states,
                     const ops::GdnSeq* seqs, int64_t n_seqs, float* out) override;
  void gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                       const ops::WeightView& dt_bias, const ops::GdnShape& shape, const ops::GdnStates& states,
                       const ops::GdnSeq* seqs, int64_t n_seqs, float* o) override;
  void gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                      float eps, int64_t rows_per_token = 1) override;
  void add_rms_norm(float* x, const float* y, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                    float* out) override;
  void rope_store_kv(float* q, float* k, const float* v, int64_t n_tokens, int64_t n_head, int64_t n_head_kv,
                     int64_t head_dim, const int32_t* positions, const ops::RopeParams& p, const int32_t* slots,
                     const ops::KvLayer& cache) override;
  // Vision-tower operations (cuda_vision.cu).
  void layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias, int64_t n_rows,
                  int64_t n, float eps, float* y) override;
  void gelu(float* x, int64_t n, bool tanh_approx) override;
  void attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs,
                      int64_t n_segs, int64_t n_head, int64_t head_dim, float scale, float* out) override;
  void sigmoid_mul(float* x, const float* gate, int64_t n) override;
  void sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void matmul_swiglu(const ops::WeightView& gate, const ops::WeightView& up, const float* x, int64_t n_tokens, float* g,
                     float* u) override;
  void add(float* x, const float* y, int64_t n) override;
  void copy(const float* src, int64_t n, float* dst) override;
  void fill(float* dst, float value, int64_t n) override;
  void gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) override;
  void scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights, int64_t n_ids,
                        float* dst) override;

  // Decode steps (begin_step(const StepDesc&) of at most kMaxMatvecTokens tokens) are
  // recorded once as a CUDA graph and replayed (LaunchRuntime::begin_step says how).
  // --tune cuda.graph=0 or set_graphs(false) turns it off (on by default).
  void set_graphs(bool on) { rt_.set_graphs(on); }
  // Gate / up products and SwiGLU in one kernel for decode batches (off by default:
  // measured slower; cuda.fuse_swiglu=1). For tests and measuring.
  // (Recordings made with the other setting are not replayed: generation.)
  void set_fused_swiglu(bool on) {
    fuse_swiglu_ = on;
    rt_.new_generation();
  }
  // Q4_K products of 9-64 tokens on the int8 tensor cores (q8_gemm, the default) or as
  // f16 tiles (quant_gemm; cuda.int8_gemm=0). For tests and measuring.
  void set_int8_gemm(bool on) {
    int8_gemm_ = on;
    rt_.new_generation();
  }
  // The runtime's counters (tests): graph steps recorded / replayed / retried, host
  // arrays staged or read from the step's arena.
  using GraphStats = LaunchRuntime::GraphStats;
  GraphStats graph_stats() const { return rt_.graph_stats(); }
  using StageStats = LaunchRuntime::StageStats;
  StageStats stage_stats() const { return rt_.stage_stats(); }
  void begin_step(int64_t n_tokens) override;
  // A described step: its arena (with the attention's per-step arrays derived from it,
  // cuda_attention.cu) goes to the device in one copy, before the step's graph is
  // recorded or replayed; until the step ends (copy_to_host / fetch_rows) an op given a
  // pointer into step.data() reads the uploaded bytes instead of staging them.
  void begin_step(const ops::StepDesc& step) override;

  // Waits for all queued work (tests, timing).
  void synchronize() { rt_.synchronize(); }
  // Bytes of device memory held by prepared weights.
  uint64_t weight_bytes() const { return weight_bytes_; }

 private:
  using OpTimer = LaunchRuntime::OpTimer;
  // Device f32 values of a one-row (or small) weight: its own memory when F32, else a
  // dequantized copy made now in scratch (valid until the next call that uses it).
  const float* f32_values(const ops::WeightView& w, int64_t n, const char* op);
  // matmul_invariant's int8 tensor-core family (Q4_K / Q6_K), and its matrix-vector form
  // for 1-8 tokens of Q6_K (q8_gemm_matvec: the same bits).
  bool invariant_gemm8(const ops::WeightView& w) const;
  bool det_matvec_takes(const ops::WeightView& w, int64_t n_tokens) const;
  void matmul_gemm(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y);
  // The variants' parts (cuda_matmul.cu): takes, prefers and run of each.
  bool mm_q8gemm_takes(const ops::WeightView& w, int64_t n) const;
  bool mm_q8gemm_prefers(const ops::WeightView& w, int64_t n) const;
  void mm_q8gemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_matvec_q8_takes(const ops::WeightView& w, int64_t n) const;
  bool mm_matvec_q8_prefers(const ops::WeightView& w, int64_t n) const;
  void mm_matvec_q8_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_matvec_takes(const ops::WeightView& w, int64_t n) const;
  void mm_matvec_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_small_f32_takes(const ops::WeightView& w, int64_t n) const;
  void mm_small_f32_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_sgemm_f32_takes(const ops::WeightView& w, int64_t n) const;
  void mm_sgemm_f32_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_qgemm_takes(const ops::WeightView& w, int64_t n) const;
  bool mm_qgemm_prefers(const ops::WeightView& w, int64_t n) const;
  void mm_qgemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_dequant_small_takes(const ops::WeightView& w, int64_t n) const;
  bool mm_dequant_f32_prefers(const ops::WeightView& w, int64_t n) const;
  void mm_dequant_small_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_dequant_sgemm_takes(const ops::WeightView& w, int64_t n) const;
  void mm_dequant_sgemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_f16_gemm_takes(const ops::WeightView& w, int64_t n) const;
  void mm_f16_gemm_run(const ops::WeightView& w, const float* x, int64_t n, float* y);
  bool mm_always(const ops::WeightView&, int64_t) const { return true; }
  void small_f32_product(const ops::WeightView& w, const float* w32, int64_t ldw, const float* x, int64_t n, float* y);
  void sgemm_f32_product(const ops::WeightView& w, const float* w32, int64_t ldw, const float* x, int64_t n, float* y);
  // MoE prompts: the (token, expert) pairs sorted by expert, each projection one grouped
  // tensor-core product (quant_gemm_grouped); ids / wts: the routing, on the host.
  bool grouped_moe_ok(const ops::MoeLayer& L) const;
  void moe_grouped(const ops::MoeLayer& L, const float* x, int64_t n, const std::vector<int32_t>& ids,
                   const std::vector<float>& wts, float* out);
  // moe_ffn, and moe_ffn_add_rms_norm's fused form (after: the residual add and norm done by
  // the kernel that sums the experts, in decode batches).
  struct NormAfter {
    float* x_res;
    const ops::WeightView* norm;
    float eps;
    float* out;
  };
  void moe_ffn_impl(const ops::MoeLayer& L, const float* x, int64_t n, float* out, const NormAfter* after);
  bool moe_decode_q8(const ops::MoeLayer& L, int64_t n) const;
  // moe_ffn's routed experts of a prompt (the routing read back to the host).
  void moe_routed_on_host(const ops::MoeLayer& L, const float* x, int64_t n, const int32_t* ids, const float* wts,
                          float* out, OpTimer& timer);

  void sync_ranges_to_host(const ops::HostRange* ranges, int64_t n_ranges);
  void sync_ranges_from_host(const ops::HostRange* ranges, int64_t n_ranges);
  CopyId copies_done_ = 0;
  // Pinned host memory for sync_ranges_to_host: grow-only, freed with the back-end.
  struct PinnedBounce {
    void* p = nullptr;
    size_t n = 0;
    ~PinnedBounce();
  };
  uint8_t* bounce(size_t bytes, const char* op);
  // sync_ranges_from_host's two lanes (cuda_host_copy.cu): while one lane's pinned half
  // goes to the device in one copy and is scattered into place by one kernel, the host
  // gathers the next round into the other. Made on first use, freed with the back-end.
  struct UploadLanes {
    uint8_t* host[2] = {nullptr, nullptr};
    uint8_t* dev[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
    bool busy[2] = {false, false};
    ~UploadLanes();
  };
  void make_upload_lanes();

  // First: destroyed last, after every buffer this class holds (its destructor frees
  // them once the runtime has finished the stream's work).
  LaunchRuntime rt_;
  cudaStream_t stream_ = nullptr;  // rt_.stream(), which every op launches on
  // What attention derives from a step once (cuda_attention.cu, step_attention_prepare):
  // offsets into the arena's front part, counts, and the key bucket.
  struct StepAttn {
    size_t row_seq_decode = 0;  // per row: its sequence if it has one row, else -1
    size_t decode_tiles = 0;    // Tile{s, 0, 1} of each one-row sequence
    int64_t n_decode = 0;       // one-row sequences
    int64_t n_rows = 0;         // rows covered by sequences (the last sequence row + 1)
    int64_t rows_in = 0;        // rows of some sequence
    int64_t max_keys = 0;       // the longest sequence's keys (pos0 + n_tokens)
    bool any_multi = false;     // a sequence of several rows
  };
  StepAttn step_attn_;
  std::vector<uint8_t> step_front_;  // the derived arrays, built on the host
  // Lays out step_front_ and step_attn_ for a step (the front part of its arena).
  void step_attention_prepare(const ops::StepDesc& d);
  // Prompt tiles of the step's sequences, staged once per (step, tile height) and reused
  // by every layer while the ring holds them (LaunchRuntime::stage_epoch).
  struct StepTiles {
    uint64_t serial = 0, epoch = 0;
    int64_t rows_per_tile = 0;
    bool skip_single = false;
    const void* dev = nullptr;
    int64_t n = 0;
  };
  StepTiles step_tiles_;
  // Decode attention's per-(row, block of heads) counters of finished key ranges (zero
  // between launches: the last range resets its counter), for that many pairs.
  static constexpr int64_t kAttnCounters = 1 << 16;
  unsigned* attn_counters_ = nullptr;
  std::vector<void*> weights_;  // device copies made by prepare_weight
  uint64_t weight_bytes_ = 0;
  // An 8-bit quantization of an op's output, written by that op (add_rms_norm) into
  // q8_matvec's scratch for the product right after it (cuda.fuse_quant=0: not).
  // Valid for the next op only (rt_.op_seq() counts ops), for that x and shape.
  struct Q8Ready {
    const float* x = nullptr;
    int64_t n_rows = 0, n_cols = 0;
    const void* scratch = nullptr;
    uint64_t seq = 0;
  };
  Q8Ready q8_ready_;
  bool fuse_quant_ = true;
  // The scratch an op writing out: [n_rows, n] quantizes it into (nullptr: not wanted).
  void* q8_ready_scratch(const float* out, int64_t n_rows, int64_t n);
  // add_rms_norm's one-kernel path: whether it takes these buffers, and its launch (y the
  // weighted sum of MoE pair rows when pairs is given, also written to y_out; q8: from
  // q8_ready_scratch or null).
  bool add_rms_norm_vec_ok(const float* x, const float* y, const float* out, const ops::WeightView& weight,
                           int64_t n) const;
  void launch_add_rms_norm(float* x, const float* y, const float* w, int64_t n_rows, int64_t n, float eps, float* out,
                           void* q8, const float* pairs, const float* wts, int per, float* y_out);
  // out: [n_rows, n_cols] = silu(gate) * up, quantized for the 8-bit product after it
  // where it can be (matmul_swiglu's unfused path).
  void swiglu_rows(const float* gate, const float* up, int64_t n_rows, int64_t n_cols, float* out);
  // Whether x: [n_tokens, n_cols] was quantized into scratch5 by the op just before.
  bool take_q8_ready(const float* x, int64_t n_tokens, int64_t n_cols, const void* scratch5);
  bool int8_gemm_ = true;
  bool deterministic_ = false;  // batch-invariant kernels only (set_deterministic)
  bool device_argmax_ = true;  // fetch_rows reduces greedy rows (cuda.argmax=0: every row copied)
  bool fuse_swiglu_ = false;  // decode gate/up products with SwiGLU in one kernel (cuda.fuse_swiglu=1)
  bool gated_norm_q8_ = true;  // the gated norm quantizes for the out projection (cuda.gated_q8=0: not)
  bool device_draw_ = true;  // temperature draws in fetch_rows (cuda.draw=0: on the host)
  std::vector<ops::PenaltyToken> pen_zero_;  // fetch_rows without a penalty list: empty slots
  // Long-context decode on the tensor cores (cuda.attn_tc_decode): 2 warps split keys,
  // two stage buffers; 1 the same with one; 0 warps split query vectors (the prompt kernel).
  int tc_decode_mode_ = 2;  // stage buffers of the decode kernel, 1-3 (cuda.attn_tc_decode; 0: query split)
  // Decode rows' keys split into ranges of at least this many keys, about this many blocks
  // in all (cuda.tc_decode_range / _blocks; 0: the blocks the GPU holds at once).
  int64_t tc_decode_range_keys_ = 256;
  int64_t tc_decode_blocks_ = 0;
  int64_t tc_decode_min_keys_ = 4096;  // decode rows from this key bucket on the tensor cores (cuda.tc_decode_min)
  int64_t tc_decode_min_rows_ = 2;  // and steps with this many decode rows (cuda.tc_decode_rows)
  int64_t moe_group_min_tokens_ = 2;  // decode batches from this many tokens group MoE pairs (cuda.moe_group_min)
  // Grouped decode batches of at least this many tokens run the experts' products on the
  // int8 tensor cores (q8_moe_mma_*; cuda.moe_mma_min), not in deterministic mode.
  // 8, measured on the H200 (Qwen3.5-35B-A3B, ms a step, the dp4a kernels / these): 8
  // tokens 6.72 / 6.51, 12 tokens 9.58 / 8.35; 4 tokens 4.79 / 5.05 (an earlier form).
  int64_t moe_mma_min_tokens_ = 8;
  // Decode batches the tensor-core expert kernels take also run the shared expert as each
  // token's last pair, past moe_shared_max_tokens_ (cuda.moe_shared_mma=0: not).
  bool moe_shared_mma_ = true;
  // moe_ffn takes shared experts in decode calls of up to this many tokens (0: never;
  // cuda.moe_shared; more tokens: the model's separate ops, whose int8 tensor-core
  // products beat a 64-pair run of the shared expert).
  int64_t moe_shared_max_tokens_ = 16;
  bool moe_norm_ = true;    // moe_ffn_add_rms_norm as one op in decode (cuda.moe_norm=0: two)
  bool tc_attention_ = true;  // prompt attention on the tensor cores (cuda.attn_tc=0: the scalar kernel)
  bool decode_warp_ = false;  // decode attention on the warp kernel where it takes the call (cuda.attn_decode_warp=1)
  int decode_warp_stages_ = 0;  // its copy stages a warp (cuda.attn_decode_warp_stages; 0: per cache type)
  bool decode_warp_dot_ = false;  // its q8_0 scores in int8 (cuda.attn_decode_warp_dot=int8)
  bool fuse_ = true;  // add_rms_norm / rope_store_kv as one kernel each (cuda.fuse=0: the separate ops)
  bool q8_matvec_ = true;  // decode products on 8-bit activations (cuda.matvec=f32: off)
  // Products of more tokens than the matrix-vector kernels take and at most this many go
  // to quant_gemm (tensor cores on weight tiles dequantized in shared memory), more to
  // dequantize + cuBLAS, which is faster from about 64 tokens on (docs/BENCHMARKS.md);
  // cuda.qgemm_max overrides (0: always cuBLAS).
  int64_t qgemm_max_tokens_ = 64;
  PinnedBounce bounce_;  // freed once the runtime's destructor-time wait (rt_.finish) is done
  UploadLanes lanes_;
};

}  // namespace hearth::cuda

// The CPU back-end: operations split over a thread pool. Matrix products
// dequantize each weight row once and reuse it for every token of the batch;
// the SIMD quantized dot products come in cpu/ kernels chosen at run time.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/kernel_table.h"
#include "backends/cpu/op_timing.h"
#include "backends/cpu/packed.h"
#include "core/thread_pool.h"
#include "ops/backend.h"

namespace hearth::cpu {

// Tokens per piece when quantizing activations: a decode batch's few rows take about a
// microsecond, less than handing them to the pool, so they are quantized inline; a
// prompt's rows are split in pieces of about 32K values.
inline int64_t act_grain(int64_t n_cols) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n_cols)); }

struct MoeScratch;  // cpu_moe.cpp

// A work item of attention_full (cpu_vision.cpp): query rows [row0, row0 + n_q) of the
// segment of rows [seg0, seg0 + seg_n) (its transposed key blocks from kt_block0), one head.
struct FullAttnItem {
  int64_t row0, seg0, seg_n, kt_block0;
  int32_t n_q, head;
};

// Decode runs: one-token sequences at consecutive rows and positions over the same block
// table, which is how a speculative verification's rows come (BatchSeq::decode_rows: each
// row attends as a one-token step would). They read the same keys, so the blocked
// attention kernel takes a run's rows into the same blocks, each query keeping the
// one-token arithmetic. run[s]: the length of the run starting at sequence s, 0 for the
// later sequences of a run (1: a sequence alone).
void decode_runs(const ops::AttentionSeq* seqs, int64_t n_seqs, std::vector<int32_t>& run);

// Throws Error(kInvalidInput) naming `backend` when p asks for multi-axis RoPE that
// backend.h does not define (no NeoX layout, no pos3, vision sections not covering
// n_rot / 2); nothing for plain RoPE (cpu_vision.cpp).
void check_rope_multi(const ops::RopeParams& p, const char* backend);

// Float-weight products (matmul_f32.h): rows converted and multiplied in chunks of 16 to
// kFloatRows (multiples of every tile's row count) against blocks of kFloatTokens tokens,
// one chunk x block per pool work item: larger chunks read the tokens' rows fewer times,
// smaller ones and token blocks keep every thread busy.
constexpr int64_t kFloatRows = 64;
constexpr int64_t kFloatTokens = 256;

class CpuBackend final : public ops::Backend {
 public:
  // n_threads <= 0: one per physical core. reference_kernels picks the plain
  // (non-SIMD) quantized dot products, for tests.
  explicit CpuBackend(int n_threads, bool reference_kernels = false);
  // With op timing on, prints the table not yet printed (see print_op_timing).
  ~CpuBackend() override;

  std::string name() const override;
  bool supports_weight(GgmlType type) const override;
  bool supports_kv_type(ops::KvType) const override { return true; }
  ops::WeightView prepare_weight(const ops::WeightView& w) override;
  std::unique_ptr<ops::Buffer> alloc(int64_t n_floats) override;
  std::unique_ptr<ops::Buffer> alloc_lazy(int64_t n_floats) override;
  void copy_to_host(ops::Buffer& src, int64_t offset, int64_t n, float* dst) override;
  void copy_from_host(const float* src, int64_t n, ops::Buffer& dst, int64_t offset) override;
  // Block copies beside the steps (cpu_copies.cpp): done at once (the default), unless
  // --tune cpu.copy_lag=N (read at each call): then each runs beside the next N steps, as
  // copies on a GPU's copy stream would: copy_done is false until N steps have begun since
  // the copy started (or, with no steps, 64 N polls have passed); a download's bytes are
  // taken at the call and reach the host memory when it finishes, an upload's land at
  // copy_fence or when it finishes. For tests of the callers' side of the contract
  // (ops/backend.h) on the CPU.
  using ops::Backend::begin_step;
  void begin_step(int64_t n_tokens) override {
    if (n_tokens > 0) ++steps_begun_;
  }
  CopyId copy_ranges_to_host_async(const ops::HostRange* ranges, int64_t n_ranges) override;
  CopyId copy_ranges_from_host_async(const ops::HostRange* ranges, int64_t n_ranges) override;
  bool copy_done(CopyId id) override;
  void copy_wait(CopyId id) override;
  void copy_fence(CopyId id) override;
  // Always batch-invariant: every kernel computes a row the same way for any batch
  // (the tests compare each against its reference for 1 to many rows), so on or off
  // changes nothing.
  bool set_deterministic(bool on) override {
    (void)on;
    return true;
  }
  // Off by default (the logits are already in host memory); tests turn it on to run the
  // engine's greedy path as on a GPU (Backend::fetch_rows reducing argmax rows).
  void set_argmax_rows(bool on) { argmax_rows_ = on; }
  int64_t argmax_rows_fetched() const { return argmax_rows_fetched_; }
  int64_t draw_rows_fetched() const { return draw_rows_fetched_; }
  bool device_argmax() const override { return argmax_rows_; }
  void fetch_rows(ops::Buffer& src, int64_t n_rows, int64_t n_cols, const ops::RowReduce* reduce,
                  const ops::PenaltyToken* penalties, float* dst, ops::ArgmaxRow* picks) override {
    for (int64_t r = 0; r < n_rows && reduce != nullptr; ++r) {
      argmax_rows_fetched_ += reduce[r].kind == ops::RowKind::kArgmax;
      draw_rows_fetched_ += reduce[r].kind == ops::RowKind::kDraw;
    }
    Backend::fetch_rows(src, n_rows, n_cols, reduce, penalties, dst, picks);
  }

  void get_rows(const ops::WeightView& table, const int32_t* ids, int64_t n_ids, float* out) override;
  void matmul(const ops::WeightView& w, const float* x, int64_t n_tokens, float* y) override;
  // Weights of one type and width: the activations are quantized once and one parallel
  // pass covers every weight's rows (otherwise one matmul each).
  void matmul_multi(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                    float* const* ys) override;
  void add_bias(float* x, const ops::WeightView& bias, int64_t n_tokens) override;
  void rms_norm(const float* x, const ops::WeightView& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const ops::RopeParams& p) override;
  void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                const ops::KvLayer& cache) override;
  void attention(const float* q, const ops::KvLayer& cache, const ops::AttentionSeq* seqs, int64_t n_seqs,
                 int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) override;
  // Gated DeltaNet layers (cpu_gdn.cpp).
  void ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w, const ops::GdnStates& states,
                     const ops::GdnSeq* seqs, int64_t n_seqs, float* out) override;
  void gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                       const ops::WeightView& dt_bias, const ops::GdnShape& shape, const ops::GdnStates& states,
                       const ops::GdnSeq* seqs, int64_t n_seqs, float* o) override;
  void gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                      float eps, int64_t rows_per_token = 1) override;
  // Vision-tower operations (cpu_vision.cpp).
  void layer_norm(const float* x, const ops::WeightView& weight, const ops::WeightView& bias, int64_t n_rows,
                  int64_t n, float eps, float* y) override;
  void gelu(float* x, int64_t n, bool tanh_approx) override;
  void attention_full(const float* q, const float* k, const float* v, const ops::FullAttentionSeg* segs,
                      int64_t n_segs, int64_t n_head, int64_t head_dim, float scale, float* out) override;
  void sigmoid_mul(float* x, const float* gate, int64_t n) override;
  void sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(float* x, const float* y, int64_t n) override;
  void copy(const float* src, int64_t n, float* dst) override;
  // Row movement for routed experts (cpu_backend_rows.cpp).
  void fill(float* dst, float value, int64_t n) override;
  void gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) override;
  void scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights, int64_t n_ids,
                        float* dst) override;

  // Routed experts as one operation (cpu_moe.cpp): every selected expert's gate and up
  // rows in one parallel pass, then every down row in one, each row by the same kernel
  // (so the same bits) as matmul on that expert alone. set_fused_moe(false) before the
  // model binds its weights keeps the model's generic path (one matmul per expert and
  // projection), the fused path's oracle in tests.
  bool fused_moe() const override { return fused_moe_; }
  void moe_ffn(const ops::MoeLayer& layer, const float* x, int64_t n, float* out) override;
  void set_fused_moe(bool on) { fused_moe_ = on; }

  int n_threads() const { return pool_.n_threads(); }
  // Whether prepare_weight repacks Q4_0/Q4_1/Q8_0 weights for the multi-row kernels
  // (default: yes where the CPU has them, unless cpu.repack=0). Set before
  // preparing weights; views prepared earlier keep what they got.
  void set_repack(bool on) { repack_ = on && packed_available(); }
  bool repack() const { return repack_; }
  // Bytes held by repacked weights.
  int64_t packed_bytes() const { return packed_bytes_; }
  // Tests: false runs attention as one work item per (query row, head) even where the
  // blocked AVX-512 kernel applies (it gives the same bits; this is its oracle).
  void set_attention_blocks(bool on) { attention_blocks_ = on; }

  // Per-operation timing (op_timing.h): on when cpu.op_timing=1 at construction,
  // or set here. print_op_timing writes the table gathered since the last reset to
  // stderr (title: what was measured; wall_ms > 0: the caller's wall time over the same
  // span, for the time outside the back-end); a table never printed is printed when
  // the back-end is destroyed.
  bool op_timing() const { return op_times_ != nullptr; }
  void set_op_timing(bool on);
  void reset_op_timing();
  void print_op_timing(const std::string& title = "", double wall_ms = 0);
  std::vector<OpTimeRow> op_timing_rows() const;

 private:
  static bool packed_available();
  // Packed matmul over n weights sharing their input (all packed, one type and width).
  // matmul_multi of weights of several kinds, one call per kind; false when that split
  // would not help (one kind, or every weight its own).
  bool matmul_multi_by_kind(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens,
                            float* const* ys);
  void matmul_packed(const ops::WeightView* const* ws, int n, const float* x, int64_t n_tokens, float* const* ys);
  void make_attention_blocks(const ops::AttentionSeq* seqs, int64_t n_seqs, int64_t n_head, int64_t n_head_kv);

  ThreadPool pool_;
  bool argmax_rows_ = false;
  int64_t argmax_rows_fetched_ = 0, draw_rows_fetched_ = 0;
  bool reference_kernels_;
  const KernelTable* kernels_;  // the float kernels' builds for this CPU (plain with reference_kernels)
  std::vector<uint8_t> act_scratch_;
  std::vector<int32_t> row_seq_;  // attention: query row -> sequence
  std::vector<float> kv_f32_;     // attention over an f16 cache: one sequence's K and V in f32
  std::vector<int32_t> ident_;    // ... and its block table 0, 1, 2, ...
  std::vector<float> gdn_qk_, gdn_gates_;            // gated delta net: normalised q|k, gates
  std::vector<std::vector<float>> gdn_scratch_;      // ... per-thread chunk buffers
  bool attention_blocks_ = true;        // blocked attention where the kernel table has it
  std::vector<AttnBlock> attn_blocks_;  // ... its work items
  std::vector<int64_t> key_offs_, seq_offs_;  // attention: key row offsets per sequence
  std::vector<int32_t> run_len_;              // ... its decode runs (decode_runs)
  std::vector<float> full_kt_;                // attention_full: the keys transposed in blocks
  std::vector<int64_t> full_blocks_;          // ... each block's first row and rows
  std::vector<FullAttnItem> full_items_;      // ... and its work items
  bool repack_ = false;
  bool fused_moe_ = true;
  std::shared_ptr<MoeScratch> moe_;  // shared_ptr: the type is complete only in cpu_moe.cpp
  HugeArena packed_arena_;  // their memory: huge pages, streamed by every token
  std::vector<std::unique_ptr<PackedWeight>> packed_;  // repacked weights
  int64_t packed_bytes_ = 0;
  std::vector<float> act_d_, act_s_;  // packed matmul: per (token, block) activation scales
  std::vector<int32_t> act_corr_;
  std::unique_ptr<OpTimes> op_times_;  // null: timing off
  // Copies held back by cpu.copy_lag (cpu_copies.cpp), in order.
  struct LaggedCopy {
    CopyId id = 0;
    bool upload = false, landed = false;  // landed: an upload's bytes are in the buffers
    int64_t done_at_step = 0;  // steps_begun_ from which it is done
    int64_t polls_left = 0;    // or after this many more polls
    struct Range {
      float* dev;  // in the buffer (resolved at the call)
      float* host;
      int64_t n;
    };
    std::vector<Range> ranges;
    std::vector<std::vector<float>> taken;  // a download's bytes, taken at the call
  };
  std::deque<LaggedCopy> lagged_;
  int64_t steps_begun_ = 0;  // model steps begun (begin_step with tokens)
  void finish_lagged(LaggedCopy& c);
};

}  // namespace hearth::cpu

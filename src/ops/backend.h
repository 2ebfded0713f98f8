// The operation interface model code is written against. A back-end (CPU now,
// CUDA later) implements every operation; model code never sees how. Buffers
// are owned by the back-end that made them (host memory for the CPU, device
// memory for CUDA); model code only passes them to operations and reads results
// back through copy_to_host. Shapes are given row-major, innermost last.
// A Backend is used by one thread at a time (it may use a thread pool inside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "format/ggml_types.h"

namespace hearth::ops {

// A weight tensor as stored in the model file: n_rows rows of n_cols elements of
// `type`, rows contiguous (ggml ne0 = n_cols, ne1 = n_rows). Borrowed, not owned.
struct WeightView {
  std::string name;
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t n_cols = 0;
  int64_t n_rows = 0;
  uint64_t row_bytes = 0;
  // > 0: the rows are n_expert experts' matrices of n_rows / n_expert rows each, one
  // after another (MoeLayer); a back-end keeps each expert's rows addressable alone.
  int64_t n_expert = 0;
  // The back-end's own copy made by prepare_weight (the CPU's repacked rows, CUDA's
  // device memory); opaque to model code, null when the back-end reads `data`.
  const void* backend_data = nullptr;
};

// A block of float32 activations owned by a back-end.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual float* data() = 0;  // back-end memory: pass to operations only
  virtual int64_t size() const = 0;  // in floats
};

// Multi-axis positions (Qwen-VL): token t has a position on each of three axes,
// pos3[3 t + a] (host memory, a = 0 time, 1 height, 2 width), and each rotated pair i
// (i < n_rot / 2, NeoX layout) turns by one axis' position:
//  - kInterleaved (the Qwen3-VL / Qwen3.5 language model's mRoPE): pair i uses axis 1 when
//    i % 3 == 1 and i < 3 * sections[1], axis 2 when i % 3 == 2 and i < 3 * sections[2],
//    else axis 0; its angle is pos * freq_scale * freq_base^(-2 i / n_rot), as plain RoPE.
//    With the three positions equal this is plain NeoX RoPE, value for value.
//  - kVision (the vision tower's 2-D RoPE): the first sections[0] pairs use axis 1 (row),
//    the next sections[1] use axis 2 (column) (sections[0] + sections[1] == n_rot / 2);
//    pair j of a section of s pairs turns by pos * freq_base^(-j / s).
enum class RopeMulti : uint8_t { kNone = 0, kInterleaved = 1, kVision = 2 };

struct RopeParams {
  int64_t n_rot = 0;        // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // linear scaling: position * freq_scale
  bool neox = false;        // NeoX layout rotates (i, i + n_rot/2); normal rotates (2i, 2i+1)
  RopeMulti multi = RopeMulti::kNone;  // kNone: `positions` of the call; else pos3 (neox only)
  int32_t sections[3] = {0, 0, 0};
  const int32_t* pos3 = nullptr;       // [n_tokens, 3], host memory; set when multi != kNone
};

// One segment of a non-causal attention (Backend::attention_full): rows first_row ..
// first_row + n_rows see each other and nothing else (one image of a vision batch).
struct FullAttentionSeg {
  int64_t first_row = 0;
  int64_t n_rows = 0;
};

// Element type of the KV cache. Q8_0 is llama.cpp's q8_0: each run of 32 values of a
// row is one block of 34 bytes, an f16 scale d = max|x| / 127 then 32 int8 q =
// round(x / d) (value = d * q); rows of Q8_0 need n_kv_dim (and head_dim) % 32 == 0.
enum class KvType : uint8_t { F32 = 0, F16 = 1, Q8_0 = 2 };
inline constexpr int64_t kQ8Block = 32;       // values per q8_0 block
inline constexpr int64_t kQ8BlockBytes = 34;  // its bytes: f16 scale + 32 int8
// Bytes of one element (F32 / F16 only: a Q8_0 row's size is kv_row_bytes').
inline int64_t kv_type_size(KvType t) { return t == KvType::F16 ? 2 : 4; }
// Bytes of a cache row of n values (n % kQ8Block == 0 for Q8_0).
inline int64_t kv_row_bytes(KvType t, int64_t n) {
  return t == KvType::Q8_0 ? n / kQ8Block * kQ8BlockBytes : n * kv_type_size(t);
}
inline const char* kv_type_name(KvType t) {
  return t == KvType::Q8_0 ? "q8_0" : t == KvType::F16 ? "f16" : "f32";
}

// One layer's paged KV cache as a back-end stores it: K and V each hold
// n_blocks * block_size rows of n_kv_dim elements of `type`, row r at r * n_kv_dim
// (Q8_0: row r at byte r * kv_row_bytes(Q8_0, n_kv_dim), kv head h's values at byte
// h * kv_row_bytes(Q8_0, head_dim) of it).
// Logical position p of a sequence lives in row
//   block_table[p / block_size] * block_size + p % block_size.
// block_size is a power of two.
struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
  KvType type = KvType::F32;
  int64_t block_size = 16;
  int64_t n_kv_dim = 0;
};

// One sequence of an attention batch.
struct AttentionSeq {
  int64_t first_row = 0;               // its first query row in q / out
  int64_t n_tokens = 0;                // its query rows
  int64_t pos0 = 0;                    // position of its first query
  const int32_t* block_table = nullptr;  // host memory; covers positions < pos0 + n_tokens
};

// Shape of a Gated DeltaNet (linear attention) layer: n_k_heads query/key heads of
// d_k, n_v_heads value heads of d_v (a multiple of n_k_heads), a causal depthwise conv
// of conv_kernel taps over the conv_channels() = 2 Hk dk + Hv dv mixed channels.
struct GdnShape {
  int64_t n_k_heads = 0, n_v_heads = 0, d_k = 0, d_v = 0, conv_kernel = 4;
  bool v_tiled = false;  // value head h reads key head h % Hk (else h / (Hv / Hk))
  float l2_eps = 1e-6f;  // of the q/k L2 normalisation
  int64_t key_dim() const { return n_k_heads * d_k; }
  int64_t value_dim() const { return n_v_heads * d_v; }
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
  int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_channels(); }
  int64_t ssm_state_floats() const { return n_v_heads * d_k * d_v; }
};

// Where one Gated DeltaNet layer keeps the recurrent states of its state slots, in
// back-end memory, updated in place: slot s's conv state [conv_kernel - 1, channels]
// (the inputs before this call, oldest first) at conv + s * slot_stride and its delta-rule
// state [Hv, d_k, d_v] at ssm + s * slot_stride, f32. (Addresses that stay while the
// states do: a step names its sequences' slots by index, in its step description, so a
// recorded step reads the slots of whichever sequences run.)
// A snapshot inside a call: the state of sequence `seq` (an index into the call's
// GdnSeq array) after its first `after` rows (1 .. its n_tokens - 1), conv and delta-rule
// state both, copied into state slot `slot` (speculative verification's checkpoint after
// each drafted row, to roll back to).
struct GdnSnap {
  int32_t seq = 0;
  int32_t after = 0;
  int32_t slot = -1;
};

struct GdnStates {
  float* conv = nullptr;
  float* ssm = nullptr;
  int64_t slot_stride = 0;  // floats from one slot's state to the next
  // Snapshots to write while the rows run, in (seq, after) order, host memory; only for a
  // back-end whose gdn_snapshots() is true (the others are given none: the model runs
  // their rows in passes and copies the states between them).
  const GdnSnap* snaps = nullptr;
  int64_t n_snaps = 0;
};

// One sequence of a Gated DeltaNet batch: rows first_row .. first_row + n_tokens of
// the inputs, its recurrent state in slot state_slot of the layer's GdnStates. (int32:
// the step description holds these as the device reads them, StepDesc::gdn_seqs.)
struct GdnSeq {
  int32_t first_row = 0;
  int32_t n_tokens = 0;
  int32_t state_slot = 0;
};

// The routed experts of one MoE layer for a back-end that runs them as one operation
// (Backend::moe_ffn): the router and each projection's experts as one weight whose
// rows are expert 0's, then expert 1's, ... (n_expert * n_ff rows for gate / up,
// n_expert * n_embd for down), prepared with prepare_weight like any other.
struct MoeLayer {
  const WeightView* router = nullptr;  // [n_embd -> n_expert]
  const WeightView* gate = nullptr;    // all experts' [n_embd -> n_ff]
  const WeightView* up = nullptr;
  const WeightView* down = nullptr;    // all experts' [n_ff -> n_embd]
  int64_t n_expert = 0, n_used = 0, n_embd = 0, n_ff = 0;
  bool norm_weights = true;  // divide the chosen experts' probabilities by their sum
  // A shared expert every token uses (optional; set only where Backend::moe_takes_shared
  // says the back-end takes it for the call): out += s * shared_down(silu(shared_gate x) *
  // (shared_up x)), s = sigmoid(shared_inp . x) (shared_inp: one f32 row of n_embd), or 1
  // without shared_inp; shared_gate / shared_up [n_embd -> n_ff_shared].
  const WeightView* shared_gate = nullptr;
  const WeightView* shared_up = nullptr;
  const WeightView* shared_down = nullptr;
  const WeightView* shared_inp = nullptr;
  int64_t n_ff_shared = 0;
};

// How Backend::fetch_rows returns one output row.
enum class RowKind : uint8_t {
  kCopy = 0,    // the whole row
  kArgmax = 1,  // only the index of its first largest value (greedy decoding)
  kDraw = 2,    // a temperature draw (engine::Sampler::drawable, whose arithmetic it repeats)
};
// A token of a row's recent history and how often it occurred there: the repetition,
// presence and frequency penalties' input (engine::Sampler::penalty_counts).
struct PenaltyToken {
  int32_t token = 0;
  int32_t count = 0;
};
constexpr int kMaxPenaltyTokens = 64;  // per row in Backend::fetch_rows (more: the row is sampled on the host)
struct RowReduce {
  RowKind kind = RowKind::kCopy;
  float scale = 1.0f;  // kDraw: 1 / temperature
  double u = 0.0;      // kDraw: the draw's uniform number in [0, 1)
  int32_t top_k = 0;   // kDraw: the top_k most likely tokens only (<= 0 or >= the row: all)
  float top_p = 1.0f;  // kDraw: then the most likely holding top_p of the mass (>= 1: all)
  float min_p = 0.0f;  // kDraw: then those at least min_p x the most likely (<= 0: all)
  // kArgmax / kDraw: penalties applied to the row first, to the n_penalty tokens of this
  // row's slot of fetch_rows' penalty list, as engine::Sampler applies them (0: none).
  int32_t n_penalty = 0;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
};

// One output row reduced to what greedy decoding or a draw needs (Backend::fetch_rows).
struct ArgmaxRow {
  int32_t argmax = -1;    // index of the first largest value (kDraw: the drawn token; -1:
                          // the back-end did not draw and copied the row instead)
  int32_t bad = -1;       // index of the first NaN or infinite value, -1 when none
  int32_t bad_nan = 0;    // 1: that value is NaN (else infinite)
  int32_t penalized = 0;  // 1: a row copied to the host (argmax -1) already has its penalties applied
};

// One copy of Backend::copy_ranges_to_host / copy_ranges_from_host: n floats at float
// offset `offset` of buf, and the host memory on the other side (the destination of a
// copy to the host, the source of one from it).
struct HostRange {
  Buffer* buf = nullptr;
  int64_t offset = 0;
  int64_t n = 0;
  float* host = nullptr;
};

// Thrown by a back-end that replays recorded steps (CUDA graphs) when a step turns out,
// part-way, not to be the one it recorded: nothing of the step has run yet, and the
// caller runs the whole step again (the back-end then runs it op by op).
class StepRetry : public std::exception {
 public:
  const char* what() const noexcept override { return "step differs from its recording: run it again"; }
};

class StepDesc;  // ops/step_desc.h

class Backend {
 public:
  virtual ~Backend() = default;
  // A model step of n_tokens tokens starts: the operations up to the next copy_to_host
  // are one step, which the caller runs again whole if an operation throws StepRetry
  // (CausalLm does). Back-ends that replay steps may record it; the default does nothing.
  virtual void begin_step(int64_t n_tokens) { (void)n_tokens; }
  // The same for a step described by `step` (ops/step_desc.h): its operations then take
  // their per-step arrays from it (step.tokens(), step.positions(), step.attn_seqs(), ...),
  // which stay unchanged until the step ends. A back-end may upload it once here and read
  // those arrays on the device; the default calls begin_step(step.n_tokens()).
  virtual void begin_step(const StepDesc& step);
  virtual std::string name() const = 0;
  // Whether matmul/get_rows accept weights of this type.
  virtual bool supports_weight(GgmlType type) const = 0;
  // Whether store_kv / attention read and write a KV cache of this type (the pool
  // refuses the others at load). F32 and F16 everywhere; Q8_0 where a back-end says so.
  virtual bool supports_kv_type(KvType type) const { return type != KvType::Q8_0; }
  // Prepares a weight for use (CPU: repacks the types its multi-row kernels read; CUDA:
  // upload); the view returned is the one to pass to operations. Throws Error(kUnsupported).
  virtual WeightView prepare_weight(const WeightView& w) = 0;

  virtual std::unique_ptr<Buffer> alloc(int64_t n_floats) = 0;
  // A buffer whose contents start undefined and whose memory is committed only as it
  // is first written (CPU: untouched pages cost no resident memory): the KV pool.
  virtual std::unique_ptr<Buffer> alloc_lazy(int64_t n_floats) = 0;
  virtual void copy_to_host(Buffer& src, int64_t offset, int64_t n, float* dst) = 0;
  // Whether fetch_rows computes its argmax rows where the logits are (then only a few
  // bytes per such row cross to the host); models then end every step with fetch_rows
  // (greedy rows or not), else with copy_to_host.
  virtual bool device_argmax() const { return false; }
  // The step's output rows ([n_rows, n_cols] at the start of src) to the host, ending the
  // step like copy_to_host: row r into dst row r, except rows reduced by reduce[r]
  // (nullptr: none): for kArgmax the dst row is left as it is and picks[r] holds only
  // the index of the first largest value and the first non-finite one; for kDraw the
  // back-end may likewise return the drawn token (and the first non-finite value) in
  // picks[r], or copy the row and set picks[r].argmax = -1. Rows with penalties
  // (reduce[r].n_penalty > 0, their tokens at penalties[r * kMaxPenaltyTokens ..]) are
  // reduced after applying them, or copied with argmax -1 (picks[r].penalized: whether the
  // copy has them applied). The default copies every row, scans the argmax rows without
  // penalties on the host and draws none.
  virtual void fetch_rows(Buffer& src, int64_t n_rows, int64_t n_cols, const RowReduce* reduce,
                          const PenaltyToken* penalties, float* dst, ArgmaxRow* picks);
  // Writes n floats from host memory into dst at offset (tests, state restore).
  virtual void copy_from_host(const float* src, int64_t n, Buffer& dst, int64_t offset) = 0;
  // Many copies between back-end buffers and host memory at once, between steps (the KV
  // disk tier's and the swap's block I/O: a block is one small range per layer). Same
  // contract as one copy_to_host / copy_from_host per range, in order; on return the
  // host memory holds the results / may be reused. The default starts the copy below
  // (copy_ranges_*_async) and waits for it (copy_wait).
  virtual void copy_ranges_to_host(const HostRange* ranges, int64_t n_ranges);
  virtual void copy_ranges_from_host(const HostRange* ranges, int64_t n_ranges);

  // The same copies, started between steps and run beside them (CUDA: on copy streams of
  // their own, ordered against the steps by events on the device, never by the host
  // waiting). Each call returns the copy's id (> 0, increasing with each call). Rules:
  //  - Host memory. The ranges' host side belongs to the copy from the call until
  //    copy_done(id) has returned true or copy_wait(id) has returned: the caller keeps
  //    it allocated and does not read or write it meanwhile (a download's bytes may be
  //    written there as late as inside that copy_done / copy_wait call; an upload's may
  //    be read until then). The HostRange array and the Buffer objects it names are the
  //    caller's again on return (the buffers' memory must outlive the copy).
  //  - A download (_to_host) reads the ranges as every operation and copy started before
  //    the call leaves them. Operations and uploads started after it may write those
  //    ranges: the back-end orders such writes after the download's reads.
  //  - An upload (_from_host) writes the ranges. Operations and copies started after
  //    copy_done(id) returned true, copy_wait(id) returned or copy_fence(id) was called
  //    see its bytes; nothing else may read or write its ranges before one of those
  //    (their contents are undefined until then; the caller keeps them out of every step).
  //  - Copies are finished in order: copy_done(id) is true when copy id and every copy
  //    started before it are done; it never waits. copy_wait(id) waits for that.
  //  - copy_fence(id): operations started after it are ordered after uploads <= id
  //    without the host waiting (CUDA: the compute stream waits for their events); for
  //    a step that must read an upload's blocks now. Their host memory is still the
  //    copy's until copy_done / copy_wait.
  //  - Not inside a step (between the operations of one forward pass): a back-end that
  //    records steps then runs the copy at once, synchronously.
  // The default runs each copy at once, synchronously: it is done when the call returns.
  using CopyId = uint64_t;
  virtual CopyId copy_ranges_to_host_async(const HostRange* ranges, int64_t n_ranges);
  virtual CopyId copy_ranges_from_host_async(const HostRange* ranges, int64_t n_ranges);
  virtual bool copy_done(CopyId id) { return id <= copies_started_; }
  virtual void copy_wait(CopyId id) { (void)id; }
  virtual void copy_fence(CopyId id) { (void)id; }
  // Device memory this back-end holds now / at most so far, in bytes (0 for host back-ends).
  virtual uint64_t device_memory_used() const { return 0; }
  virtual uint64_t device_memory_peak() const { return 0; }
  // Batch-invariant kernels on (`--deterministic`): a row's results must then not depend
  // on the other rows of a step (how many there are, whose they are, prompt or decode),
  // so that a request's greedy output is the same alone or in any batch. Returns whether
  // the back-end gives that; the default gives it only when not asked.
  virtual bool set_deterministic(bool on) { return !on; }

  // out: [n_ids, table.n_cols] = rows ids[] of table (dequantized).
  virtual void get_rows(const WeightView& table, const int32_t* ids, int64_t n_ids, float* out) = 0;
  // y: [n_tokens, w.n_rows] = x: [n_tokens, w.n_cols] times w transposed.
  virtual void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y) = 0;
  // ys[i]: [n_tokens, ws[i]->n_rows] = x times ws[i] transposed, for n weights that share
  // their input (q/k/v, gate/up): the results of one matmul each, in fewer passes.
  virtual void matmul_multi(const WeightView* const* ws, int n, const float* x, int64_t n_tokens, float* const* ys) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, n_tokens, ys[i]);
  }
  // x: [n_tokens, n] += bias: [n] (an F32 weight with one row).
  virtual void add_bias(float* x, const WeightView& bias, int64_t n_tokens) = 0;
  // y: [n_rows, n] = x / sqrt(mean(x^2) + eps) * weight (F32, [n]); y may alias x.
  virtual void rms_norm(const float* x, const WeightView& weight, int64_t n_rows, int64_t n, float eps,
                        float* y) = 0;
  // In place rotary embedding. x: [n_tokens, n_heads, head_dim]; positions: [n_tokens].
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const int32_t* positions, const RopeParams& p) = 0;
  // Writes k, v: [n_tokens, n_kv_dim] into rows slots[i] of the layer's cache
  // (converted to its element type). slots is host memory.
  virtual void store_kv(const float* k, const float* v, int64_t n_tokens, int64_t n_kv_dim, const int32_t* slots,
                        const KvLayer& cache) = 0;
  // Causal grouped-query attention for a batch of sequences, reading the paged cache
  // through each sequence's block table. q, out: [n_tokens total, n_head, head_dim],
  // the sequences' query rows one after another; query t of a sequence (position
  // pos0 + t) sees its keys 0 .. pos0 + t; query head h reads kv head h / (n_head / n_head_kv).
  virtual void attention(const float* q, const KvLayer& cache, const AttentionSeq* seqs, int64_t n_seqs,
                         int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, float* out) = 0;
  // Whether ssm_conv_silu and gated_delta_net take GdnStates::snaps: the states after
  // given rows written inside the call, bit for bit those of running the rows in passes
  // (one-token recurrent steps) with copies between them.
  virtual bool gdn_snapshots() const { return false; }
  // Causal depthwise conv over time + SiLU, per sequence with the conv state of its slot
  // (states.conv; ssm is not read): x, out: [n_tokens total, channels]; w: F32 [channels
  // rows of kernel taps] (tap kernel-1 multiplies the current input). out must not alias
  // x. seqs: host memory (a back-end with device memory reads an array of the step
  // description where it uploaded it).
  virtual void ssm_conv_silu(const float* x, int64_t channels, const WeightView& w, const GdnStates& states,
                             const GdnSeq* seqs, int64_t n_seqs, float* out) = 0;
  // The gated delta rule over a batch of sequences. qkv: [n, conv_channels] (conv
  // output: q heads | k heads | v heads); a, b: [n, Hv] (decay and write-strength
  // logits); ssm_a: F32 [Hv] (= -exp(A_log)); dt_bias: F32 [Hv]. Per value head:
  // q, k L2-normalised, q scaled by 1/sqrt(d_k), g = ssm_a * softplus(a + dt_bias),
  // beta = sigmoid(b), S = exp(g) (I - beta k k^T) S + beta k v^T, o = S^T q. A
  // sequence of several tokens may use the chunked form (same result). o: [n, Hv, d_v].
  // Each sequence's delta-rule state: states.ssm of its slot.
  virtual void gated_delta_net(const float* qkv, const float* a, const float* b, const WeightView& ssm_a,
                               const WeightView& dt_bias, const GdnShape& shape, const GdnStates& states,
                               const GdnSeq* seqs, int64_t n_seqs, float* o) = 0;
  // x: [n_rows, n] = x / sqrt(mean(x^2) + eps) * w * silu(z) (w F32 [n]), in place.
  // rows_per_token: how many consecutive rows make one token's vector (the product after
  // it reads x as [n_rows / rows_per_token, rows_per_token * n]; a back-end may prepare
  // that product's input here).
  virtual void gated_rms_norm(float* x, const float* z, const WeightView& w, int64_t n_rows, int64_t n,
                              float eps, int64_t rows_per_token = 1) = 0;
  // x: [n_rows, n] += y, then out = x / sqrt(mean(x^2) + eps) * weight: a residual add
  // and the norm after it, one kernel where the back-end fuses them (same results as
  // add + rms_norm). out may alias y, not x.
  virtual void add_rms_norm(float* x, const float* y, const WeightView& weight, int64_t n_rows, int64_t n, float eps,
                            float* out) {
    add(x, y, n_rows * n);
    rms_norm(x, weight, n_rows, n, eps, out);
  }
  // RoPE on q: [n_tokens, n_head, head_dim] and k: [n_tokens, n_head_kv, head_dim] in
  // place, then k and v written to the cache rows slots[] (rope, rope and store_kv, one
  // kernel where the back-end fuses them; same results).
  virtual void rope_store_kv(float* q, float* k, const float* v, int64_t n_tokens, int64_t n_head, int64_t n_head_kv,
                             int64_t head_dim, const int32_t* positions, const RopeParams& p, const int32_t* slots,
                             const KvLayer& cache) {
    rope(q, n_tokens, n_head, head_dim, positions, p);
    rope(k, n_tokens, n_head_kv, head_dim, positions, p);
    store_kv(k, v, n_tokens, n_head_kv * head_dim, slots, cache);
  }
  // Vision-tower operations (the default throws Error(kUnsupported)).
  // y: [n_rows, n] = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias (weight, bias F32
  // [n]; var the biased variance); y may alias x.
  virtual void layer_norm(const float* x, const WeightView& weight, const WeightView& bias, int64_t n_rows, int64_t n,
                          float eps, float* y);
  // x = gelu(x) in place over n values: exact (0.5 x (1 + erf(x / sqrt 2))) or, with
  // tanh_approx, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (gelu_pytorch_tanh).
  virtual void gelu(float* x, int64_t n, bool tanh_approx);
  // Non-causal multi-head attention within each segment: q, k, v, out: [n_rows total,
  // n_head, head_dim] (the segments' rows one after another, all heads with their own
  // k / v); out row r of segment s = softmax(scale q_r . k_j, j in s) v_j. out must not
  // alias q, k or v.
  virtual void attention_full(const float* q, const float* k, const float* v, const FullAttentionSeg* segs,
                              int64_t n_segs, int64_t n_head, int64_t head_dim, float scale, float* out);

  // x *= sigmoid(gate), elementwise over n values.
  virtual void sigmoid_mul(float* x, const float* gate, int64_t n) = 0;
  // x: [n_rows, n_cols]; row r *= sigmoid(gate[r]) (one gate value per row: the MoE
  // shared expert's gate, a dot product per token).
  virtual void sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) = 0;

  // out = silu(gate) * up, elementwise over n values.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // g: [n_tokens, gate.n_rows] = silu(x gate^T) * (x up^T) for gate and up of one shape;
  // u: [n_tokens, up.n_rows] is the back-end's to use as temporary memory. The same
  // results as matmul_multi into g and u, then swiglu(g, u) into g; one kernel where the
  // back-end fuses them.
  virtual void matmul_swiglu(const WeightView& gate, const WeightView& up, const float* x, int64_t n_tokens, float* g,
                             float* u) {
    const WeightView* ws[2] = {&gate, &up};
    float* ys[2] = {g, u};
    matmul_multi(ws, 2, x, n_tokens, ys);
    swiglu(g, u, n_tokens * gate.n_rows, g);
  }
  // x += y, elementwise over n values.
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // Copies n floats between back-end buffers.
  virtual void copy(const float* src, int64_t n, float* dst) = 0;
  // Sets n floats of dst to value.
  virtual void fill(float* dst, float value, int64_t n) = 0;
  // dst: [n_ids, n] = rows ids[i] of src: [*, n]. ids is host memory.
  virtual void gather_rows(const float* src, int64_t n, const int32_t* ids, int64_t n_ids, float* dst) = 0;
  // dst row ids[i] += weights[i] * src row i, for i < n_ids; rows of n floats. ids and
  // weights are host memory; ids may repeat only across calls, not within one.
  virtual void scatter_add_rows(const float* src, int64_t n, const int32_t* ids, const float* weights,
                                int64_t n_ids, float* dst) = 0;

  // Whether moe_ffn is implemented; then models bind each projection's experts as one
  // weight (MoeLayer) and call it instead of routing on the host.
  virtual bool fused_moe() const { return false; }
  // out: [n, n_embd] (overwritten) = sum over each token's n_used best experts (softmax
  // of the router's logits, ties to the lower index; optionally renormalised) of
  // weight * down_e(silu(gate_e x) * up_e x), x: [n, n_embd].
  virtual void moe_ffn(const MoeLayer& layer, const float* x, int64_t n, float* out);
  // moe_ffn into out, then add_rms_norm(x_res, out, norm, n, n_embd, eps, norm_out) (the
  // residual add and the next norm): one op where the back-end fuses the experts' sum with
  // them. norm_out may alias x.
  virtual void moe_ffn_add_rms_norm(const MoeLayer& layer, const float* x, int64_t n, float* out, float* x_res,
                                    const WeightView& norm, float eps, float* norm_out) {
    moe_ffn(layer, x, n, out);
    add_rms_norm(x_res, out, norm, n, layer.n_embd, eps, norm_out);
  }
  // Whether moe_ffn also takes layer's shared expert (its shared_* fields set) for a call
  // of n_tokens tokens; otherwise models run the shared expert as separate ops and that
  // moe_ffn call never sees it.
  virtual bool moe_takes_shared(const MoeLayer& /*layer*/, int64_t /*n_tokens*/) const { return false; }

 protected:
  CopyId copies_started_ = 0;  // the last id copy_ranges_*_async returned
};

}  // namespace hearth::ops

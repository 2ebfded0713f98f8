// Quantized weights on the device: the GGUF block layouts read as stored (rows of
// row_bytes, blocks in file order), dequantized in registers. The contract between
// the CUDA back-end (cuda_backend.*) and the weight kernels (quant_*.cu). Every
// function enqueues work on `stream` and returns at once; pointers are device memory
// unless said otherwise. Host-only code may include this header (no CUDA syntax).
// Requirements (checked; a violation throws Error(kInvalidInput), an unsupported type
// Error(kUnsupported)): n_cols a multiple of the type's block; weight data and
// row_bytes aligned as the block layout allows (16 bytes for Q4_K / Q5_K and for float
// rows of a multiple of 8 elements); x, dst and out 16-byte aligned (cudaMalloc's are).
// Results: dequantize_rows_f32 / get_rows_f32 are bit-identical with the CPU reference
// dequantizer, dequantize_rows_f16 is that value rounded to nearest; quant_matvec
// accumulates in f32 (error about 1e-7 of sum |w x| measured) in a fixed order, so its
// result does not depend on anything but its inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/ggml_types.h"

typedef struct CUstream_st* cudaStream_t;

namespace hearth::cuda {

// Whether the kernels below handle weights of this type: F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4.
bool quant_supported(GgmlType type);

// A weight matrix on the device: n_rows rows of n_cols elements, row r at r * row_bytes.
struct DeviceWeight {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  uint64_t row_bytes = 0;
};

// Throws Error(kInvalidInput) when w breaks the requirements above (Error(kUnsupported)
// for a type without kernels); `op` names the caller in the message.
void check_device_weight(const DeviceWeight& w, const char* op);

// y: [n_tokens, w.n_rows] f32 = x: [n_tokens, w.n_cols] f32 times w transposed, reading
// the weights once for all tokens (decode: n_tokens small, up to kMaxMatvecTokens).
constexpr int64_t kMaxMatvecTokens = 8;
void quant_matvec(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, cudaStream_t stream);

// The same product on 8-bit activations, the fast decode path for Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K and Q6_K: each token's x is quantized in chunks of 32 (d = max
// |x| / 127, q = round(x / d)) into `scratch` (device, 256-byte aligned, at least
// q8_matvec_scratch_bytes), then multiplied with the weights' integer quants (dp4a), the
// scales applied in f32. Its result equals the exact product of the dequantized weights
// with those quantized activations to f32 rounding (about 1e-3 of sum |w x| from the f32
// product, as on the CPU back-end).
bool q8_matvec_supported(GgmlType type);
// The decode kernels' shape comes from tuning keys (core/tune_keys.h), read at each launch,
// the same sums in every shape (for measuring; the tests run each against the default):
//   cuda.matvec_tpr     threads per row: 32 (the default, 0), 64 or 128;
//   cuda.matvec_ilp     the warp-per-row kernel's units decoded ahead per thread: 1 or 2
//                       (0: the default, 1);
//   cuda.matvec_early   whether the first of them are loaded before waiting for the kernel
//                       before: 0 or 1 (-1: the default, 1);
//   cuda.matvec_rows    rows per warp below 3 tokens: 1, or 0 the default (two: the
//                       activations read once for two rows);
//   cuda.matvec_smem    1 (the default): one or two tokens' activations staged in shared
//                       memory by each block (at most 48 KiB); 0: read from global memory;
//   cuda.matvec_stream  weights streamed through shared memory by the bulk copy engine for
//                       one or two tokens (Hopper and later; quant_q8_stream.cuh): 0 off,
//                       1 eight warps a block and three segments in flight, 2 four warps and
//                       four, 3 sixteen warps and two, 4 (the default) eight warps and three
//                       with a ninth warp of its own requesting the segments;
//   cuda.matvec_persist 1 (the default): the streamed kernel runs at most as many blocks as
//                       the device holds at once, each walking several groups of rows; 0: a
//                       block per group;
//   cuda.matvec_stream_rows  launches of more rows than this (65,536 by default; 0: no
//                       limit) take the register-fed kernel instead of the streamed one.
size_t q8_matvec_scratch_bytes(int64_t n_cols, int64_t n_tokens);
void q8_matvec(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
               size_t scratch_bytes, cudaStream_t stream);
// y: [n_tokens, gate.n_rows] = silu(x gate^T) * (x up^T) for gate and up of one type and
// shape, x quantized once: the bits of q8_matvec_multi into two outputs followed by
// swiglu (cuda_ops.cu), in one product kernel.
void q8_matvec_swiglu(const DeviceWeight& gate, const DeviceWeight& up, const float* x, int64_t n_tokens, float* y,
                      void* scratch, size_t scratch_bytes, cudaStream_t stream, bool x_ready = false);
// ys[i] = x times ws[i] transposed for weights of equal n_cols (any supported types), x
// quantized once for all of them. x_ready: x (at most kMaxMatvecTokens tokens) is
// already quantized in scratch, laid out as q8_scratch_layout says (by the kernel that
// wrote x: add_rms_norm), and only the products run.
void q8_matvec_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream, bool x_ready = false);
// q8_matvec's scratch holds x's quants (n_tokens x n_cols int8) from its start and the
// chunks' (d, d * sum q) pairs (two floats per 32 values, token by token) from this
// byte offset.
size_t q8_scratch_scales_offset(int64_t n_tokens, int64_t n_cols);

// Bytes of scratch that 8-bit activations of n_rows rows of n_cols take (no token cap).
size_t q8_scratch_bytes(int64_t n_cols, int64_t n_rows);

// y: [n_tokens, w.n_rows] = x w^T for 1..kMaxQ8GemmCallTokens tokens on the integer
// tensor cores (quant_mmq.cu): x quantized as for q8_matvec, each 32-element sub-block one
// mma.m16n8k32 s8 product scaled in f32. Its result equals the exact product of the
// dequantized weights with the quantized x to f32 rounding (as q8_matvec's); a token's
// outputs are the same bits in any batch. scratch: q8_gemm_scratch_bytes, 256-byte aligned.
// The default mode sends it batches of up to kMaxQ8GemmTokens (past that cuBLAS wins);
// the deterministic one every Q4_K / Q6_K product, in calls of up to kMaxQ8GemmCallTokens.
constexpr int64_t kMaxQ8GemmTokens = 64;
constexpr int64_t kMaxQ8GemmCallTokens = 1024;
bool q8_gemm_supported(GgmlType type);
// Whether q8_gemm quantizes the tokens as ggml's Q8_K (one scale per 256 values, the CPU
// back-end's rounding; the default) rather than in chunks of 32 (cuda.mmq_q8k=0).
bool q8_gemm_uses_q8k();
// Its variants, the same bits, from tuning keys read at each call (for tests and
// measurements): Q4_K with Q8_K tokens takes one MMA on the raw quants a sub-block, scaled
// after in integers, or two on the scale's split halves (cuda.mmq_scale_after: on / off
// forces one, auto picks by the token tile, the default); from 17 tokens the wide kernel
// (quant_mmq_wide.cuh) with cuda.mmq_wide = 2 or 4
// warps along the rows for 33 or more tokens (default 2; 17-32 tokens always take 4), or 0
// for the narrow one.
// Kernel attributes q8_gemm needs (more than 48 KiB of shared memory), set once per device
// before any launch (so none is set during a stream capture).
void q8_gemm_prepare();
// Fewest tokens q8_gemm takes over from the matrix-vector kernels (Q8_K kernel only): Q4_K
// from 4, Q6_K from 9 (measured on the H200: its 4-8 token products were faster on the
// matrix-vector kernel, 9B 4-sequence step 5.28 against 6.04 ms).
constexpr int64_t kMinQ8GemmTokens = 4;
constexpr int64_t kMinQ8GemmTokensQ6K = 9;
size_t q8_gemm_scratch_bytes(const DeviceWeight& w, int64_t n_tokens);
void q8_gemm(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch, size_t scratch_bytes,
             cudaStream_t stream);
// q8_gemm's outputs, bit for bit, for 1 .. kMaxMatvecTokens tokens by a matrix-vector
// kernel (quant_mmq_matvec.cuh: the same Q8_K tokens, integers per 256 columns and float
// chain per split), at the matrix-vector kernels' cost instead of a 16-token tile's: the
// batch-invariant mode's decode. Needs q8_gemm_uses_q8k(). scratch: 256-byte aligned.
size_t q8_gemm_matvec_scratch_bytes(int64_t n_cols, int64_t n_tokens);
void q8_gemm_matvec(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
                    size_t scratch_bytes, cudaStream_t stream);
// The same for n weights of one column count sharing x (x quantized once).
void q8_gemm_matvec_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                          void* scratch, size_t scratch_bytes, cudaStream_t stream);
// q8_gemm for n weights of one column count sharing x (q / k / v, gate / up): x quantized
// once, then each weight's products exactly as q8_gemm computes them (the same bits).
// scratch: q8_gemm_multi_scratch_bytes, 256-byte aligned.
size_t q8_gemm_multi_scratch_bytes(const DeviceWeight* ws, int n, int64_t n_tokens);
void q8_gemm_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys, void* scratch,
                   size_t scratch_bytes, cudaStream_t stream);

// ys[i]: [n_tokens, ws[i].n_rows] = x times ws[i] transposed, for n weights with equal
// n_cols that share x (q/k/v, gate/up): as n quant_matvec calls, with one launch for each
// run of consecutive weights of one type (up to 4).
void quant_matvec_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                        cudaStream_t stream);

// The same product for more tokens (batched decode, prompt chunks) on tensor cores: tiles
// of the weights dequantized into shared memory as f16 (dequantize_rows_f16's values; for
// Q4_0, Q8_0, Q4_K and Q6_K by fast half2 decoders, within a rounding of them), x
// rounded to f16 into `scratch` (device, 256-byte aligned, quant_gemm_scratch_bytes),
// products accumulated in f32, columns split over blocks when the rows alone do not fill
// the GPU and the partial sums added in a fixed order. A token's output does not depend on the
// other tokens for batches of 9 to 64 tokens, nor above 64. All quantized types (not F32,
// F16, BF16).
bool quant_gemm_supported(GgmlType type);
// Steps of weight loads quant_gemm keeps in flight: cuda.qgemm_pf (1..3, default 2), read
// at each call. The same results for every value. For measuring.
size_t quant_gemm_scratch_bytes(const DeviceWeight& w, int64_t n_tokens);
void quant_gemm(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, void* scratch,
                size_t scratch_bytes, cudaStream_t stream);

// Grouped products of stacked experts (MoE prompts, tokens sorted by expert): w holds
// experts of rows_per_expert rows; tile i (device memory, n_tiles of them) multiplies rows
// first .. first + count - 1 of x (count <= tile_tokens_max <= 64) with expert `expert`
// into the same rows of y: [n_pairs, rows_per_expert]. x is rounded to f16 into `scratch`
// (quant_gemm_grouped_scratch_bytes). Same kernels and accuracy as quant_gemm.
struct ExpertTile {
  int32_t expert, first, count;
};
size_t quant_gemm_grouped_scratch_bytes(const DeviceWeight& w, int64_t n_pairs);
void quant_gemm_grouped(const DeviceWeight& w, int64_t rows_per_expert, const ExpertTile* tiles, int n_tiles,
                        int tile_tokens_max, const float* x, int64_t n_pairs, float* y, void* scratch,
                        size_t scratch_bytes, cudaStream_t stream);

// The routed experts' decode products on 8-bit activations (quant_q8_moe.cu). Weights hold
// n_expert experts stacked (expert e's rows from row e * rows_per_expert); pair p of the
// n_tokens * n_used pairs is token p / n_used with expert ids[p] (device int32).
// q8_moe_gate_up: h: [n_pairs, rows_per_expert] = silu(gate_e x) * (up_e x), gate and
//   up of one type and shape; scratch of q8_scratch_bytes(n_cols, n_tokens).
// q8_moe_down: y: [n_pairs, rows_per_expert] = down_e h[p]; scratch of
//   q8_scratch_bytes(down.n_cols, n_pairs).
// groups (optional): the pairs grouped by expert by q8_moe_group (n_expert <= 512, at most
// 2,048 pairs, q8_moe_group_bytes at a 16-byte aligned address): each used expert's rows
// are then read once for all its pairs (rows of up to 64 units; longer ones as without).
// A pair's outputs are the same bits with and without groups, whatever the other pairs.
// shared_w (and for gate_up shared_w2, its up rows): a shared expert's rows_per_expert rows,
// of the stacked weights' type and row length, taken by pairs whose id is the stacked
// weights' expert count (n_rows / rows_per_expert); n_expert then counts it too.
// x_ready: x already quantized into scratch (as q8_matvec_multi's x_ready).
bool q8_moe_group_fits(int64_t n_pairs, int64_t n_expert);  // what q8_moe_group takes
size_t q8_moe_group_bytes(int64_t n_pairs, int n_expert);
void q8_moe_group(const int32_t* ids, int64_t n_pairs, int n_expert, void* groups, cudaStream_t stream);
void q8_moe_gate_up(const DeviceWeight& gate, const DeviceWeight& up, int64_t rows_per_expert, const int32_t* ids,
                    int64_t n_tokens, int n_used, const float* x, float* h, void* scratch, size_t scratch_bytes,
                    cudaStream_t stream, const void* groups = nullptr, int n_expert = 0,
                    const void* shared_w = nullptr, const void* shared_w2 = nullptr, bool x_ready = false);
void q8_moe_down(const DeviceWeight& down, int64_t rows_per_expert, const int32_t* ids, int64_t n_pairs,
                 const float* h, float* y, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                 const void* groups = nullptr, int n_expert = 0, const void* shared_w = nullptr);

// The same products on the int8 tensor cores (quant_mmq_moe.cu), for decode batches with the
// pairs grouped (groups required): Q4_K / Q6_K experts of a multiple of 256 columns, the
// tokens (gate / up) and h (down) quantized as Q8_K into scratch (q8_moe_mma_scratch_bytes
// of the product's n_cols and its token or pair count). A pair's outputs are the same bits
// in any batch on this path (not those of q8_moe_*: other activation scales). Kernel
// attributes by q8_moe_mma_prepare (from q8_gemm_prepare). Q4_K rows of a multiple of 16
// bytes, Q6_K rows of an even number of 4-aligned blocks (q8_moe_mma_supported).
bool q8_moe_mma_supported(GgmlType type, int64_t n_cols, uint64_t row_bytes);
size_t q8_moe_mma_scratch_bytes(int64_t n_cols, int64_t n_rows);
void q8_moe_mma_prepare();
// Short rows (64 of them in 32 KiB) of the down products are staged as whole row tiles
// (the default; cuda.moe_mma_rows=0: off, read at each call), or as the other products
// are: the same bits. For tests and measurements.
void q8_moe_mma_gate_up(const DeviceWeight& gate, const DeviceWeight& up, int64_t rows_per_expert, int64_t n_tokens,
                        int n_used, const float* x, float* h, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                        const void* groups, int n_expert, const void* shared_w = nullptr,
                        const void* shared_w2 = nullptr);
void q8_moe_mma_down(const DeviceWeight& down, int64_t rows_per_expert, int64_t n_pairs, const float* h, float* y,
                     void* scratch, size_t scratch_bytes, cudaStream_t stream, const void* groups, int n_expert,
                     const void* shared_w = nullptr);

// dst: [n_rows, w.n_cols] = rows row0 .. row0 + n_rows of w, dequantized, as f16 (for
// tensor-core products of many tokens) or f32.
void dequantize_rows_f16(const DeviceWeight& w, int64_t row0, int64_t n_rows, void* dst_f16, cudaStream_t stream);
void dequantize_rows_f32(const DeviceWeight& w, int64_t row0, int64_t n_rows, float* dst, cudaStream_t stream);

// out: [n_ids, w.n_cols] f32 = rows ids[i] of w (ids: device int32, each in [0, n_rows)).
void get_rows_f32(const DeviceWeight& w, const int32_t* ids, int64_t n_ids, float* out, cudaStream_t stream);

}  // namespace hearth::cuda

// What the attention kernels of CudaBackend::attention share: the batch description
// (the step's, or staged per call), the prompt tiles, and the tensor-core prompt kernel's launcher
// (cuda_attention_tc.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/backend.h"
#include "ops/step_desc.h"

namespace hearth::cuda {

// Per sequence: its first query row, rows, position of its first row, and where its block
// table starts in the tables (the step description's own layout, ops::StepSeq: the kernels
// read the uploaded step arena as it is).
using SeqDesc = ops::StepSeq;

// Rows row0 .. row0 + n_rows - 1 (relative) of sequence seq.
struct Tile {
  int32_t seq, row0, n_rows;
};

// Query vectors per block of the scalar prompt kernel (cuda_attention_prefill.cu), and
// the kernel: tiles of at most kPrefillQ / group rows, grid tiles x KV heads, kv_stride in
// the cache's elements (q8_0: blocks), epl = head_dim / 32 rounded up to 2, 4 or 8.
constexpr int kPrefillQ = 16;
void launch_prefill_scalar(ops::KvType type, int epl, dim3 grid, cudaStream_t st, const float* q, const void* k,
                           const void* v, const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head,
                           int group, int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out);

// Query vectors (rows x the query heads of one KV head) per block of the tensor-core
// prompt kernel.
constexpr int kTcQueries = 64;

// Whether the tensor-core prompt kernel takes this shape: f16 or q8_0 cache, head size 64,
// 128 or 256, at most kTcQueries query heads per KV head, 16-byte aligned key rows.
bool prefill_tc_supported(int64_t head_dim, int64_t group, const void* k, const void* v, int64_t kv_stride);

// Causal attention of the tiles' query rows (grid: tiles x KV heads; each tile at most
// kTcQueries / group rows) over the f16 paged cache, on the f16 tensor cores with f32
// accumulation. q8: the cache is q8_0 (k, v: KvQ8Block rows, kv_stride in blocks), each
// staged value d * q rounded to f16 (within 2^-11 of it, well inside q8_0's own error). q and the softmax weights enter as a pair of f16 values (value and
// remainder), so scores and sums keep ~f32 precision. part != null (grid.z key ranges per
// tile): each range's [max, sum, unnormalised output] goes to part[((row * n_head + head) *
// grid.z + z) * (head_dim + 2)] instead, for attention_combine_kernel to merge.
// decode 1-3: every tile is one row and group <= kTcDecodeGroup (the decode variant:
// the block's four warps split each chunk's keys instead of its query vectors), with
// decode - 1 chunks' copies in flight during each chunk. q8_raw 2-4 (a q8_0 cache in the
// decode variant; tc_decode_q8_raw_stages): each warp copies its keys' raw blocks with
// cp.async, q8_raw - 1 chunks ahead, and dequantizes them itself (the same f16 values,
// and so the same results, as the staged path of q8_raw 0, the reference).
constexpr int kTcDecodeGroup = 16;
void launch_prefill_tc(dim3 grid, cudaStream_t stream, const float* q, const void* k, const void* v, bool q8,
                       const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head, int group,
                       int head_dim, int64_t kv_stride, int bs_log2, float scale, float* out, float* part = nullptr,
                       int decode = 0, int q8_raw = 0);
// Blocks of the decode variant (decode 1-3; q8_raw: the raw q8_0 one) for this head size
// that the whole GPU holds at once (multiprocessors x blocks one holds by its registers
// and shared memory).
int64_t tc_decode_resident_blocks(int head_dim, int decode, int q8_raw = 0);
// Raw stages of the q8_0 decode variant for decode mode 1-3 (mode + 1, fewer where the
// GPU's shared memory is smaller), or 0: the staged reference path (switched off, a head
// size the variant lacks, or rows whose heads do not start at multiples of head_dim / 16
// bytes: n_kv_dim not a multiple of head_dim).
int tc_decode_q8_raw_stages(int64_t head_dim, int64_t n_kv_dim, int decode);
// Switches the raw q8_0 decode variant on (the default) or off for the process: tests
// compare it against the reference path, and timings of the two.
void set_tc_decode_q8_raw(bool on);

// Decode attention by warps (cuda_attention_decode.cu): the step's one-row sequences
// (tiles of one row each, grid tiles x KV heads x key ranges) over an f16 or q8_0 cache,
// each range's [max, sum, unnormalised output] into part as launch_prefill_tc's decode
// variant writes it, for attention_combine_kernel. Takes head sizes 64, 128 and 256, at
// most kDecodeWarpGroup query heads a KV head, 16-byte aligned caches whose heads start at
// multiples of the copy piece (decode_warp_supported).
constexpr int kDecodeWarpGroup = 8;
bool decode_warp_supported(int64_t head_dim, int64_t group, bool q8, const void* k, const void* v, int64_t n_kv_dim);
// Blocks of it that the whole GPU holds at once (the wave the key ranges fill). stages:
// copy stages a warp, 2 or 3 (0: the cache type's default); dot (q8_0 only): the scores
// in int8 (the query vectors quantized per 32 dimensions, dp4a) instead of f32.
int64_t decode_warp_resident_blocks(int head_dim, int group, bool q8, int stages, bool dot);
void launch_decode_warp(dim3 grid, cudaStream_t stream, const float* q, const void* k, const void* v, bool q8,
                        const SeqDesc* seqs, const Tile* tiles, const int32_t* tables, int n_head, int group,
                        int head_dim, int64_t n_kv_dim, int bs_log2, float scale, float* part, int stages, bool dot);

}  // namespace hearth::cuda

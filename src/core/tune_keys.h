// Every tuning key of Hearth, declared once: its name (for `--tune name=value` and
// `hearth info --tune`), type, group, default, range or choices, and a one-line doc.
// The code reads a key with tune::get / tune::on (core/tune.h); nothing reads the
// environment for these. The measurements behind the defaults are in the comments at the
// code that reads each key and in docs/journal/benchmarks-2026-12.md.
//
// Columns of X(id, name, type, group, default, min, max, choices, doc):
//   type   Bool (0 / 1), Int (min..max), Enum (the index of one of `choices`, "a|b|c";
//          a value may be given as the name or as its index)
//   group  Kill: a switch that is on by default and turns one optimization off
//          (for measuring it, or for getting around a fault in it); Tune: a number or a
//          variant; Debug: timing and diagnostics printed to stderr.
#pragma once

// clang-format off
#define HEARTH_TUNE_KEYS(X)                                                                                        \
  /* The thread pool and the server. */                                                                            \
  X(kPoolSpinUs, "pool.spin_us", Int, Tune, 200, 0, 10000000, "",                                                  \
    "microseconds a waiting pool thread spins before it sleeps (0: sleep at once)")                                \
  X(kEngineTiming, "engine.timing", Enum, Debug, 0, 0, 2, "off|steps|each",                                        \
    "serve: where the engine's steps spend their time (steps: totals at stop; each: also per step and request)")   \
  X(kEngineParallelFinish, "engine.parallel_finish", Enum, Tune, 1, 0, 2, "auto|off|on",                            \
    "serve: a step's plain rows (no draft, no constraint) finished on the sampling threads (auto: on a GPU back-end)") \
  X(kKvDiskThreads, "kvdisk.read_threads", Int, Tune, 0, 0, 64, "",                                                \
    "threads that read and check one prefix hit's files (0: half the cores, 1 to 8)")                              \
  X(kSpecAdaptive, "spec.adaptive", Bool, Kill, 1, 0, 1, "",                                                         \
    "--spec: draft lengths from measured step times and acceptance (0: always --spec-max where the drafter has it)") \
  /* The CPU back-end. */                                                                                          \
  X(kCpuRepack, "cpu.repack", Bool, Kill, 1, 0, 1, "",                                                             \
    "repack quantized weights for the packed (AVX-512 VNNI) kernels where the CPU has them")                       \
  X(kCpuIsa, "cpu.isa", Enum, Kill, 0, 0, 2, "auto|avx2|plain",                                                   \
    "caps the instruction sets the CPU kernels may use (avx2: no AVX-512 / AMX, as on an AVX2-only CPU; plain: none)") \
  X(kCpuMoe, "cpu.moe", Enum, Kill, 0, 0, 1, "fused|generic",                                                      \
    "mixture-of-experts layers as one fused op, or the model's per-expert ops (for comparisons)")                  \
  X(kCpuTile8, "cpu.tile8", Bool, Kill, 1, 0, 1, "",                                                               \
    "packed K-quant products take eight tokens a tile (off: four)")                                                \
  X(kCpuTokenBlock, "cpu.token_block", Int, Tune, 128, 0, 1048576, "",                                             \
    "tokens per block of a long prompt in the packed K-quant products (rounded down to a multiple of 8; 0: none)") \
  X(kCpuPrefillBlocks, "cpu.prefill_blocks", Int, Tune, 0, 0, 1048576, "",                                         \
    "prompt tokens per (block, group) task of the packed products (a multiple of 8; 0: off, an experiment)")       \
  X(kCpuPrefetchKb, "cpu.prefetch_kb", Int, Tune, 32, 0, 65536, "",                                                \
    "software prefetch distance of streamed weights in KiB, whole blocks (0: none)")                               \
  X(kCpuOpTiming, "cpu.op_timing", Bool, Debug, 0, 0, 1, "",                                                       \
    "time every CPU back-end op; the table is printed to stderr")                                                  \
  X(kCpuCopyLag, "cpu.copy_lag", Int, Debug, 0, 0, 64, "",                                                         \
    "tests: block copies beside the steps finish only after this many steps, as on a GPU (0: at once)")             \
  /* The CUDA back-end: switches. */                                                                               \
  X(kCudaGraph, "cuda.graph", Bool, Kill, 1, 0, 1, "",                                                             \
    "replay decode steps as CUDA graphs (off as well with cuda.op_timing=device)")                                 \
  X(kCudaPdl, "cuda.pdl", Bool, Kill, 1, 0, 1, "",                                                                 \
    "programmatic dependent launch on Hopper and later")                                                           \
  X(kCudaFuse, "cuda.fuse", Bool, Kill, 1, 0, 1, "",                                                               \
    "add_rms_norm and rope_store_kv as one kernel each (off: the separate ops; also turns cuda.fuse_* off)")       \
  X(kCudaFuseQuant, "cuda.fuse_quant", Bool, Kill, 1, 0, 1, "",                                                    \
    "a product's kernel quantizes the activations of the product right after it")                                  \
  X(kCudaFuseSwiglu, "cuda.fuse_swiglu", Bool, Tune, 0, 0, 1, "",                                                  \
    "decode gate / up products and SwiGLU in one kernel (measured slower on the H200: off)")                       \
  X(kCudaArgmax, "cuda.argmax", Bool, Kill, 1, 0, 1, "",                                                           \
    "greedy rows reduced on the device (off: every logits row copied to the host)")                                \
  X(kCudaDraw, "cuda.draw", Bool, Kill, 1, 0, 1, "",                                                               \
    "temperature draws on the device (off: on the host)")                                                          \
  X(kCudaInt8Gemm, "cuda.int8_gemm", Bool, Kill, 1, 0, 1, "",                                                      \
    "prompt products on the int8 tensor cores (off: f16 tiles)")                                                   \
  X(kCudaGemmMulti, "cuda.gemm_multi", Bool, Kill, 1, 0, 1, "",                                                    \
    "products of one input share its 8-bit quantization in batched decode")                                       \
  X(kCudaDetMatvec, "cuda.det_matvec", Bool, Kill, 1, 0, 1, "",                                                   \
    "--deterministic Q6_K decode products (1-8 tokens) on q8_gemm's matrix-vector form (off: its tiles)")             \
  X(kCudaGatedQ8, "cuda.gated_q8", Bool, Kill, 1, 0, 1, "",                                                        \
    "the gated norm quantizes its output for the out projection")                                                  \
  X(kCudaAttnTc, "cuda.attn_tc", Bool, Kill, 1, 0, 1, "",                                                          \
    "prompt attention on the tensor cores (off: the scalar kernel)")                                               \
  X(kCudaAttnDecodeWarp, "cuda.attn_decode_warp", Bool, Tune, 0, 0, 1, "",                                        \
    "long-context and batched decode attention on the warp kernel (not yet timed on a GPU: off by default)")     \
  X(kCudaAttnDecodeWarpStages, "cuda.attn_decode_warp_stages", Int, Tune, 0, 0, 3, "",                          \
    "copy stages a warp of the warp decode attention, 2 or 3 (0: the default of the cache type)")                 \
  X(kCudaAttnDecodeWarpDot, "cuda.attn_decode_warp_dot", Enum, Tune, 0, 0, 1, "f32|int8",                       \
    "scores of the warp decode attention over a q8_0 cache: f32, or int8 (queries quantized per 32, dp4a)")        \
  X(kCudaMoeNorm, "cuda.moe_norm", Bool, Kill, 1, 0, 1, "",                                                        \
    "moe_ffn_add_rms_norm as one op in decode (off: two)")                                                         \
  X(kCudaMoeSharedMma, "cuda.moe_shared_mma", Bool, Kill, 1, 0, 1, "",                                             \
    "the shared expert on the int8 tensor cores with the token's last pair past cuda.moe_shared tokens")           \
  X(kCudaMmqQ6k, "cuda.mmq_q6k", Bool, Kill, 1, 0, 1, "",                                                          \
    "Q6_K prompt products on the int8 tensor-core kernel")                                                         \
  X(kCudaMmqQ8k, "cuda.mmq_q8k", Bool, Kill, 1, 0, 1, "",                                                          \
    "activations quantized in rows of 256 (Q8_K) for the int8 products (off: chunks of 32)")                       \
  X(kCudaMoeMmaRows, "cuda.moe_mma_rows", Bool, Kill, 1, 0, 1, "",                                                 \
    "the whole-row-tile MoE kernel for short expert rows")                                                         \
  X(kCudaMatvec, "cuda.matvec", Enum, Kill, 0, 0, 1, "q8|f32",                                                     \
    "decode products on 8-bit activations, or on f32 ones")                                                        \
  /* The CUDA back-end: thresholds and variants. */                                                                \
  X(kCudaQgemmMax, "cuda.qgemm_max", Int, Tune, 64, 0, 1073741824, "",                                             \
    "most tokens of a product on the quantized GEMM kernels (0: always cuBLAS)")                                   \
  X(kCudaQgemmPf, "cuda.qgemm_pf", Int, Tune, 2, 1, 3, "",                                                         \
    "steps of loads in flight in the quantized GEMM")                                                              \
  X(kCudaMmqScaleAfter, "cuda.mmq_scale_after", Enum, Tune, 2, 0, 2, "off|on|auto",                                \
    "the int8 GEMM scales after the sum (auto: for 16-token tiles)")                                               \
  X(kCudaMmqWide, "cuda.mmq_wide", Int, Tune, 2, 0, 4, "",                                                         \
    "warps along the rows of the wide int8 kernel for 33+ tokens: 2 or 4 (0: two 32-token tiles; 1, 3: 2)")        \
  X(kCudaAttnTcDecode, "cuda.attn_tc_decode", Int, Tune, 2, 0, 3, "",                                              \
    "stage buffers of the tensor-core decode attention, 1-3 (0: the query-split kernel)")                          \
  X(kCudaTcDecodeRange, "cuda.tc_decode_range", Int, Tune, 256, 64, 1073741824, "",                                \
    "keys a block of the tensor-core decode attention takes at least")                                             \
  X(kCudaTcDecodeBlocks, "cuda.tc_decode_blocks", Int, Tune, 0, 0, 1073741824, "",                                 \
    "blocks of the tensor-core decode attention in all (0: the blocks the GPU holds at once)")                     \
  X(kCudaTcDecodeMin, "cuda.tc_decode_min", Int, Tune, 4096, 1, 1073741824, "",                                    \
    "decode rows from this key bucket on the tensor cores")                                                        \
  X(kCudaTcDecodeRows, "cuda.tc_decode_rows", Int, Tune, 2, 1, 1073741824, "",                                     \
    "and steps with at least this many decode rows")                                                               \
  X(kCudaMoeGroupMin, "cuda.moe_group_min", Int, Tune, 2, 1, 1073741824, "",                                       \
    "decode batches from this many tokens group their MoE pairs by expert")                                        \
  X(kCudaMoeMmaMin, "cuda.moe_mma_min", Int, Tune, 8, 1, 1073741824, "",                                           \
    "MoE batches from this many tokens on the int8 tensor cores (not in deterministic mode)")                      \
  X(kCudaMoeShared, "cuda.moe_shared", Int, Tune, 16, 0, 1073741824, "",                                           \
    "most tokens whose shared expert runs inside the fused MoE op")                                                \
  X(kCudaMoeUpl, "cuda.moe_upl", Int, Tune, 2, 1, 1073741824, "",                                                  \
    "units a lane of the grouped MoE kernel takes")                                                                \
  X(kCudaMoeMmaRowTiles, "cuda.moe_mma_row_tiles", Int, Tune, 4, 1, 64, "",                                        \
    "row tiles a block of the whole-row-tile MoE kernel takes")                                                    \
  X(kCudaMatvecTpr, "cuda.matvec_tpr", Int, Tune, 0, 0, 128, "",                                                   \
    "threads a row of the 8-bit decode matvec: 32, 64 or 128 (0: the default, 32)")                                               \
  X(kCudaMatvecIlp, "cuda.matvec_ilp", Int, Tune, 0, 0, 2, "",                                                     \
    "units decoded ahead a thread of the 8-bit matvec, 1 or 2 (0: the default, 1)")                                             \
  X(kCudaMatvecEarly, "cuda.matvec_early", Int, Tune, -1, -1, 1, "",                                               \
    "the matvec loads its first units before waiting for the kernel before (-1: the default, 1)")                                                               \
  X(kCudaMatvecRows, "cuda.matvec_rows", Int, Tune, 0, 0, 2, "",                                                   \
    "rows a warp of the 8-bit matvec below 3 tokens: 1 (0: the default, 2)")                                                         \
  X(kCudaMatvecSmem, "cuda.matvec_smem", Int, Tune, 1, 0, 1, "",                                                   \
    "the matvec stages activations in shared memory (up to 2 tokens)")                                             \
  X(kCudaMatvecStream, "cuda.matvec_stream", Int, Tune, 4, 0, 4, "",                                               \
    "the streamed-weight matvec's shape (0: off; 1-4: the shapes of launch_stream_shape)")                         \
  X(kCudaMatvecPersist, "cuda.matvec_persist", Int, Tune, 1, 0, 1, "",                                             \
    "the streamed matvec as persistent blocks (0: a block per group of rows)")                                     \
  X(kCudaMatvecStreamRows, "cuda.matvec_stream_rows", Int, Tune, 65536, 0, 1073741824, "",                         \
    "most rows of a streamed matvec (0: no limit)")                                                                \
  /* The CUDA back-end: timing. */                                                                                 \
  X(kCudaOpTiming, "cuda.op_timing", Enum, Debug, 0, 0, 2, "off|device|host",                                      \
    "time every op (device: waits for each, graphs off; host: the host's time only); table to stderr")             \
  X(kCudaWaitTiming, "cuda.wait_timing", Bool, Debug, 0, 0, 1, "",                                                 \
    "add up the host's time waiting for the device and in graph launches")
// clang-format on

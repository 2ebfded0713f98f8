// What the int8 tensor-core products share (quant_mmq.cu: q8_gemm; quant_mmq_moe.cu: the
// routed experts of decode batches): block shape, cp.async and mma.sync wrappers, token
// staging, the Q8_K step arithmetic and the Q8_K quantizer. Included inside the
// anonymous namespace of hearth::cuda by those files (each gets its own copies).

constexpr int kThreads = 128, kRows = 64, kStep = 256, kMaxSplits = 8;
constexpr int kXRow = kStep + 16;  // staged bytes per token: rows 4 banks apart (conflict-free B loads)
constexpr int kDRow = 10;          // staged chunk scales per token (8 used; 16-byte aligned, conflict-free)
constexpr int kBlockBytes = 144;   // Q4_K

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mma_s8(const int (&a)[4], int b0, int b1, int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0), "r"(0), "r"(0), "r"(0));
}

__device__ __forceinline__ void mma_s8_acc(const int (&a)[4], int b0, int b1, int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}

// Step st's 256 quantized values of tokens tok0 .. tok0 + BN - 1 into dst ([BN][kXRow]),
// by the whole block (cp.async; zeros past n_tokens).
template <int BN, int NT = kThreads>
__device__ __forceinline__ void stage_tokens(int8_t* dst, const int8_t* __restrict__ xq, int64_t n_cols, int64_t tok0,
                                             int64_t n_tokens, int st) {
  for (int i = static_cast<int>(threadIdx.x); i < BN * (kStep / 16); i += NT) {
    const int tk = i / (kStep / 16), c = i % (kStep / 16);
    int8_t* d = dst + tk * kXRow + c * 16;
    if (tok0 + tk < n_tokens) {
      cp_async16(d, xq + (tok0 + tk) * n_cols + static_cast<int64_t>(st) * kStep + c * 16);
    } else {
      *reinterpret_cast<int4*>(d) = make_int4(0, 0, 0, 0);
    }
  }
}

// Step st's Q8_K scales of tokens tok0 .. tok0 + BN - 1 into dst[BN] (threads 0 .. BN - 1;
// zeros past n_tokens).
template <int BN>
__device__ __forceinline__ void stage_token_scales(float* dst, const float* __restrict__ xd, int64_t tok0,
                                                   int64_t n_tokens, int n_steps, int st) {
  if (static_cast<int>(threadIdx.x) < BN) {
    const int tk = static_cast<int>(threadIdx.x);
    if (tok0 + tk < n_tokens) {
      cp_async4(dst + tk, xd + (tok0 + tk) * n_steps + st);
    } else {
      dst[tk] = 0.0f;
    }
  }
}

// One 256-column step of a Q8_K product: acc + d xa isum - dmin xa msum, with every
// rounding spelled out (nothing left to the compiler's contraction): any kernel that
// computes a token's sums in q8_gemm's order through this gets its bits.
__device__ __forceinline__ float q8k_step(float acc, float2 dm, float xa, int isum, int msum) {
  const float a = __fmul_rn(dm.x, xa), b = __fmul_rn(dm.y, xa);
  return __fadd_rn(acc, __fmaf_rn(a, static_cast<float>(isum), -__fmul_rn(b, static_cast<float>(msum))));
}

// Tokens as ggml's Q8_K (the CPU back-end's quantize_q8_k, same rounding): per token and
// 256 columns, iscale = -127 / (the value of largest magnitude, the first on ties),
// q = min(127, round-to-nearest-even(iscale x)), scale 1 / iscale (0 and q = 0 for an
// all-zero block). One warp per (token, 256 columns), 8 consecutive values a lane.
__global__ void q8k_quantize_kernel(const float* __restrict__ x, int64_t n_tokens, int64_t n_cols,
                                    int8_t* __restrict__ xq, float* __restrict__ xd) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t nb = n_cols / kStep;
  const int64_t wid = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (wid >= n_tokens * nb) return;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t tok = wid / nb, b = wid % nb;
  const float* src = x + tok * n_cols + b * kStep + lane * 8;
  float e[8];
  float amax = 0.0f, mx = 0.0f;
  int idx = 0x7fffffff;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    e[j] = src[j];
    if (fabsf(e[j]) > amax) {
      amax = fabsf(e[j]);
      mx = e[j];
      idx = lane * 8 + j;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, amax, off), om = __shfl_xor_sync(0xffffffffu, mx, off);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
    if (oa > amax || (oa == amax && oi < idx)) {
      amax = oa;
      mx = om;
      idx = oi;
    }
  }
  unsigned packed[2] = {0u, 0u};
  float d = 0.0f;
  if (amax != 0.0f) {
    const float iscale = -127.0f / mx;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int v = min(127, __float2int_rn(iscale * e[j]));
      packed[j / 4] |= (static_cast<unsigned>(v) & 0xffu) << (8 * (j % 4));
    }
    d = 1.0f / iscale;
  }
  *reinterpret_cast<uint2*>(xq + tok * n_cols + b * kStep + lane * 8) = make_uint2(packed[0], packed[1]);
  if (lane == 0) xd[tok * nb + b] = d;
}

// Q6_K blocks (210 bytes: ql[128], qh[64], 16 int8 scales, f16 d), staged from the
// 4-aligned address at or before each block (quant_mmq_q6k.cuh).
constexpr int kQ6Bytes = 210, kQ6Stage = 216;

// The int8 mma with k = 16: A 16 x 16 (two words a thread: rows gid and gid + 8, columns
// 4 tig .. 4 tig + 3), B 16 x 8 (one word: rows 4 tig .., column gid).
__device__ __forceinline__ void mma_s8_k16(int a0, int a1, int b, int (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %8, %9, %10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(0), "r"(0), "r"(0), "r"(0));
}

// The 32-bit word at byte offset off of a staged row whose block starts at byte o (0 or
// 2) of it: aligned loads when o is 0, two and a byte permute when it is 2.
__device__ __forceinline__ int q6_word(const uint8_t* row, int o, int off) {
  const int* p = reinterpret_cast<const int*>(row + off);
  if (o == 0) return *p;
  return static_cast<int>(__byte_perm(static_cast<unsigned>(p[0]), static_cast<unsigned>(p[1]), 0x5432));
}

// Values 4 tig .. 4 tig + 3 of group j of the block staged at row (o: its offset there),
// each q - 32 as a signed byte.
__device__ __forceinline__ int q6_quad(const uint8_t* row, int o, int j, int tig) {
  const int h = j >> 3, quarter = (j & 7) >> 1, l = 16 * (j & 1) + 4 * tig;
  const int ql = q6_word(row, o, 64 * h + 32 * (quarter & 1) + l);
  const int qh = q6_word(row, o, 128 + 32 * h + l);
  const int q = ((ql >> (4 * (quarter >> 1))) & 0x0f0f0f0f) | (((qh >> (2 * quarter)) & 0x03030303) << 4);
  return static_cast<int>(__vsub4(static_cast<unsigned>(q), 0x20202020u));
}

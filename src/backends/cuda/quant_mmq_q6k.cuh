// q8_gemm's Q6_K kernel (included by quant_mmq.cu inside its anonymous namespace: it uses
// that file's constants, cp.async helpers and stage_tokens). Tokens as Q8_K, as for Q4_K.
//
// A Q6_K block (210 bytes: ql[128], qh[64], 16 int8 scales, f16 d) holds 256 6-bit values
// q in 16 groups of 16 with a scale each: value = d * sc[j] * (q - 32). Each group of 16
// columns meets the tokens in one mma.m16n8k16 (s8 x s8 -> s32) with A = q - 32 (-32..31,
// int8 as it is), the group's integer sum times its scale added in integers (|sum| <= 16 *
// 32 * 127, times 128, over 16 groups: inside int32), so a block's whole dot product is
// one integer until d * dx (the CPU back-end's vec_dot_q6_K_q8_K computes the same integers).
//
// Blocks are 2-byte aligned only: a step's rows are staged from the 4-aligned address at
// or before each block (216 bytes; the 2 bytes before the block when it starts at an
// odd 16-bit word). Rows of a multiple of 16 bytes (8 blocks) keep the last block of a
// row ending on a word, so no read goes past a row.

template <int BN, int NS>
constexpr size_t q6k_smem_bytes() {
  return NS * (static_cast<size_t>(kRows) * kQ6Stage + static_cast<size_t>(BN) * kXRow + sizeof(float) * BN);
}

template <int BN, int NS, int MINB = 3>
__global__ void __launch_bounds__(kThreads, MINB)
    mmq_q6k_q8k_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                       const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t n_tokens,
                       int steps_per_split, float* __restrict__ out) {
  constexpr int NT8 = BN / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wsm = smem;                                                   // [NS][kRows][kQ6Stage]
  int8_t* xs = reinterpret_cast<int8_t*>(smem + NS * kRows * kQ6Stage);  // [NS][BN][kXRow]
  float* ds = reinterpret_cast<float*>(xs + NS * BN * kXRow);            // [NS][BN]
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int64_t rowb = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t row0 = rowb + warp * 16;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int n_steps = static_cast<int>(n_cols / kStep);
  const int step0 = static_cast<int>(blockIdx.z) * steps_per_split;
  const int step1 = min(n_steps, step0 + steps_per_split);

  auto stage = [&](int buf, int st) {
    uint8_t* wb = wsm + buf * (kRows * kQ6Stage);
    const int o = (st * kQ6Bytes) & 3;  // (row_bytes is a multiple of 16)
    const int words = (o + kQ6Bytes + 3) / 4;
    for (int i = static_cast<int>(threadIdx.x); i < kRows * (kQ6Stage / 4); i += kThreads) {
      const int r = i / (kQ6Stage / 4), c = i % (kQ6Stage / 4);
      if (c >= words) continue;
      const int64_t row = min(rowb + r, n_rows - 1);  // rows past the end: read, never written
      cp_async4(wb + r * kQ6Stage + c * 4, w + row * row_bytes + static_cast<int64_t>(st) * kQ6Bytes - o + c * 4);
    }
    stage_tokens<BN>(xs + buf * (BN * kXRow), xq, n_cols, tok0, n_tokens, st);
    stage_token_scales<BN>(ds + buf * BN, xd, tok0, n_tokens, n_steps, st);
  };

  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  float acc[NT8][4];
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
  }
#pragma unroll
  for (int k = 0; k < NS - 1; ++k) {
    if (step0 + k < step1) stage(k, step0 + k);
    cp_async_commit();
  }
  for (int st = step0; st < step1; ++st) {
    const int it = st - step0, buf = it % NS;
    cp_async_wait<NS - 2>();
    __syncthreads();
    if (st + NS - 1 < step1) stage((it + NS - 1) % NS, st + NS - 1);
    cp_async_commit();
    const int o = (st * kQ6Bytes) & 3;
    const uint8_t* w0 = wsm + buf * (kRows * kQ6Stage) + (warp * 16 + gid) * kQ6Stage;  // row gid
    const uint8_t* w1 = w0 + 8 * kQ6Stage;                                             // row gid + 8
    const int8_t* xb = xs + buf * (BN * kXRow);
    const float* db = ds + buf * BN;
    int isum[NT8][4];
#pragma unroll
    for (int n = 0; n < NT8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) isum[n][i] = 0;
    }
#pragma unroll 4
    for (int j = 0; j < 16; ++j) {
      const int a0 = q6_quad(w0, o, j, tig), a1 = q6_quad(w1, o, j, tig);
      const int sc0 = static_cast<int8_t>(w0[o + 192 + j]), sc1 = static_cast<int8_t>(w1[o + 192 + j]);
#pragma unroll
      for (int n = 0; n < NT8; ++n) {
        const int b = *reinterpret_cast<const int*>(xb + (n * 8 + gid) * kXRow + 16 * j + 4 * tig);
        int c[4];
        mma_s8_k16(a0, a1, b, c);
        isum[n][0] += sc0 * c[0];
        isum[n][1] += sc0 * c[1];
        isum[n][2] += sc1 * c[2];
        isum[n][3] += sc1 * c[3];
      }
    }
    const float d0 = __half2float(*reinterpret_cast<const __half*>(w0 + o + 208));
    const float d1 = __half2float(*reinterpret_cast<const __half*>(w1 + o + 208));
#pragma unroll
    for (int n = 0; n < NT8; ++n) {
      const float xa = db[n * 8 + 2 * tig], xc = db[n * 8 + 2 * tig + 1];
      acc[n][0] = __fmaf_rn(__fmul_rn(d0, xa), static_cast<float>(isum[n][0]), acc[n][0]);
      acc[n][1] = __fmaf_rn(__fmul_rn(d0, xc), static_cast<float>(isum[n][1]), acc[n][1]);
      acc[n][2] = __fmaf_rn(__fmul_rn(d1, xa), static_cast<float>(isum[n][2]), acc[n][2]);
      acc[n][3] = __fmaf_rn(__fmul_rn(d1, xc), static_cast<float>(isum[n][3]), acc[n][3]);
    }
  }
  float* dst = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
#pragma unroll
  for (int n = 0; n < NT8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = tok0 + n * 8 + 2 * tig + (i & 1), row = row0 + gid + (i >= 2 ? 8 : 0);
      if (tok < n_tokens && row < n_rows) dst[tok * n_rows + row] = acc[n][i];
    }
  }
}

template <int BN, int NS, int MINB = 3>
void launch_q6k(dim3 grid, cudaStream_t stream, const uint8_t* w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                const int8_t* xq, const float* xd, int64_t n_tokens, int steps_per_split, float* out) {
  constexpr size_t smem = q6k_smem_bytes<BN, NS>();  // (allowed past 48 KiB by q8_gemm_prepare)
  launch_pdl(mmq_q6k_q8k_kernel<BN, NS, MINB>, grid, kThreads, smem, stream, w, row_bytes, n_rows, n_cols, xq, xd,
             n_tokens, steps_per_split, out);
}

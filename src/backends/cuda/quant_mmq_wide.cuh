// q8_gemm's wide kernels for 33 or more tokens (included by quant_mmq.cu inside its
// anonymous namespace: its constants, cp.async helpers, stage_tokens, q8k_step and the
// Q6_K word decoders). Tokens as Q8_K, as in the narrow kernels, and the same sums in the
// same order: a token's outputs are the same bits whichever kernel computes them.
//
// Why another shape: the narrow kernels give each warp 16 rows and up to 32 tokens, so
// each weight word a warp decodes meets at most four token tiles, every token fragment is
// loaded with two 32-bit shared loads per (warp, tile), and 64 tokens run as two blocks
// that each stage and decode the whole weight block again. Measured on the H200 that
// made them instruction-bound (~0.5 TB/s, issue slots half busy, the tensor pipe ~4 %).
// Here a block covers 32 WR rows x 32 WC tokens (64 by default) with WR WC warps, each warp 32 rows (two
// m16 tiles) x 32 tokens (four n8 tiles): a decoded A fragment meets four token tiles,
// a token fragment (ldmatrix.x4: two tiles' k32 fragments, or four tiles' k16 ones in
// one instruction) two row tiles, and the weight bytes are staged once for 64 tokens.
//
// Q4_K: each 32-value sub-block's raw quants meet the tokens in one mma.m16n8k32, the
// integer result is multiplied by the row's 6-bit scale afterwards, and the mins take a
// second MMA with A = the sub-block's min in every byte (as the narrow kernel's
// scale-after form: the same integers). Q6_K: one mma.m16n8k16 a group of 16 with the
// group's int8 scale applied afterwards (as mmq_q6k_q8k_kernel).
constexpr int kWideTokens = 64;

__device__ __forceinline__ void ldmatrix_x4(const void* smem, int (&r)[4]) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

template <bool kQ6>
__host__ __device__ constexpr int wide_stage_row() {
  return kQ6 ? kQ6Stage : kBlockBytes;
}

// WC: warps along the tokens (a block's tokens: 32 WC).
template <bool kQ6, int WR, int NS, int WC = 2>
constexpr size_t wide_smem_bytes() {
  return NS * (static_cast<size_t>(32 * WR) * wide_stage_row<kQ6>() + static_cast<size_t>(32 * WC) * kXRow +
               sizeof(float) * 32 * WC);
}

// One 256-column step's weights of rows rowb .. rowb + 32 WR - 1 into wb (Q4_K: 144-byte
// blocks, 16-byte copies; Q6_K: from the 4-aligned address at or before the block, as
// mmq_q6k_q8k_kernel stages them).
template <bool kQ6, int NT>
__device__ __forceinline__ void wide_stage_weights(uint8_t* wb, const uint8_t* __restrict__ w, uint64_t row_bytes,
                                                   int64_t n_rows, int64_t rowb, int rows, int st) {
  if constexpr (kQ6) {
    const int o = (st * kQ6Bytes) & 3;
    const int words = (o + kQ6Bytes + 3) / 4;
    for (int i = static_cast<int>(threadIdx.x); i < rows * words; i += NT) {
      const int r = i / words, c = i % words;
      const int64_t row = min(rowb + r, n_rows - 1);  // rows past the end: read, never written
      cp_async4(wb + r * kQ6Stage + c * 4, w + row * row_bytes + static_cast<int64_t>(st) * kQ6Bytes - o + c * 4);
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < rows * (kBlockBytes / 16); i += NT) {
      const int r = i / (kBlockBytes / 16), c = i % (kBlockBytes / 16);
      const int64_t row = min(rowb + r, n_rows - 1);
      cp_async16(wb + r * kBlockBytes + c * 16, w + row * row_bytes + static_cast<int64_t>(st) * kBlockBytes + c * 16);
    }
  }
}

// A step's integer sums of one warp (2 row tiles x 4 token tiles): isum (scaled
// quants . x) and, for Q4_K, msum (mins . x). Q4_K rows at w0 (row tile 0, row gid);
// the other rows 8, 16 and 24 rows on.
__device__ __forceinline__ void wide_q4k_step(const uint8_t* w0, const int8_t* xw, int lane, int (&isum)[2][4][4],
                                              int (&msum)[2][4][4]) {
  const int tig = lane & 3;
  unsigned scw[2][2][2], mw[2][2][2];  // [tile][row lo / hi][sub-blocks 0-3 / 4-7]
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int4 hd = *reinterpret_cast<const int4*>(w0 + (16 * mt + 8 * h) * kBlockBytes);
      const auto y = static_cast<unsigned>(hd.y), z = static_cast<unsigned>(hd.z), x = static_cast<unsigned>(hd.w);
      scw[mt][h][0] = y & 0x3f3f3f3fu;
      mw[mt][h][0] = z & 0x3f3f3f3fu;
      scw[mt][h][1] = (x & 0x0f0f0f0fu) | ((y >> 2) & 0x30303030u);
      mw[mt][h][1] = ((x >> 4) & 0x0f0f0f0fu) | ((z >> 2) & 0x30303030u);
    }
  }
  // ldmatrix row addresses: lane i gives token 16 p + 8 (i / 16) + i % 8 of the warp's
  // tokens, bytes 16 ((i / 8) & 1) of the sub-block.
  const int8_t* xl = xw + (8 * (lane >> 4) + (lane & 7)) * kXRow + 16 * ((lane >> 3) & 1);
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    int q[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const uint8_t* r = w0 + 16 * mt * kBlockBytes + 16 + 32 * g + 4 * tig;
      q[mt][0] = *reinterpret_cast<const int*>(r);
      q[mt][1] = *reinterpret_cast<const int*>(r + 8 * kBlockBytes);
      q[mt][2] = *reinterpret_cast<const int*>(r + 16);
      q[mt][3] = *reinterpret_cast<const int*>(r + 8 * kBlockBytes + 16);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int sb = 2 * g + h;
      int b[4][2];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        int r[4];
        ldmatrix_x4(xl + 16 * p * kXRow + 32 * sb, r);
        b[2 * p][0] = r[0];
        b[2 * p][1] = r[1];
        b[2 * p + 1][0] = r[2];
        b[2 * p + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        int aq[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) aq[i] = h ? (q[mt][i] >> 4) & q8::kLo4 : q[mt][i] & q8::kLo4;
        const int sh = 8 * (sb & 3);
        const int sc0 = static_cast<int>((scw[mt][0][sb >> 2] >> sh) & 0xffu);
        const int sc1 = static_cast<int>((scw[mt][1][sb >> 2] >> sh) & 0xffu);
        const int m0 = static_cast<int>(__byte_perm(mw[mt][0][sb >> 2], 0u, (sb & 3) * 0x1111u));
        const int m1 = static_cast<int>(__byte_perm(mw[mt][1][sb >> 2], 0u, (sb & 3) * 0x1111u));
        const int am[4] = {m0, m1, m0, m1};
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          int c[4];
          mma_s8(aq, b[n][0], b[n][1], c);
          isum[mt][n][0] += sc0 * c[0];
          isum[mt][n][1] += sc0 * c[1];
          isum[mt][n][2] += sc1 * c[2];
          isum[mt][n][3] += sc1 * c[3];
          mma_s8_acc(am, b[n][0], b[n][1], msum[mt][n]);
        }
      }
    }
  }
}

// The same for Q6_K rows staged at w0 (block at byte o of each staged row): isum only.
__device__ __forceinline__ void wide_q6k_step(const uint8_t* w0, int o, const int8_t* xw, int lane,
                                              int (&isum)[2][4][4]) {
  const int tig = lane & 3;
  // ldmatrix row addresses: lane i gives token 8 (i / 8) + i % 8 of the warp's tokens.
  const int8_t* xl = xw + lane * kXRow;
#pragma unroll 4
  for (int j = 0; j < 16; ++j) {
    int b[4];
    ldmatrix_x4(xl + 16 * j, b);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const uint8_t* r0 = w0 + 16 * mt * kQ6Stage;
      const uint8_t* r1 = r0 + 8 * kQ6Stage;
      const int a0 = q6_quad(r0, o, j, tig), a1 = q6_quad(r1, o, j, tig);
      const int sc0 = static_cast<int8_t>(r0[o + 192 + j]), sc1 = static_cast<int8_t>(r1[o + 192 + j]);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        int c[4];
        mma_s8_k16(a0, a1, b[n], c);
        isum[mt][n][0] += sc0 * c[0];
        isum[mt][n][1] += sc0 * c[1];
        isum[mt][n][2] += sc1 * c[2];
        isum[mt][n][3] += sc1 * c[3];
      }
    }
  }
}

// out: [splits][n_tokens][n_rows] partial sums (y itself with one split), as the narrow
// kernels; the split of the columns is theirs (plan_for), so the bits are theirs too.
template <bool kQ6, int WR, int NS, int WC = 2>
__global__ void __launch_bounds__(32 * WR * WC)
    mmq_wide_kernel(const uint8_t* __restrict__ w, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
                    const int8_t* __restrict__ xq, const float* __restrict__ xd, int64_t n_tokens, int steps_per_split,
                    float* __restrict__ out) {
  constexpr int NT = 32 * WR * WC, RB = 32 * WR, SR = wide_stage_row<kQ6>(), BN = 32 * WC;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wsm = smem;                                            // [NS][RB][SR]
  int8_t* xs = reinterpret_cast<int8_t*>(smem + NS * RB * SR);  // [NS][BN][kXRow]
  float* ds = reinterpret_cast<float*>(xs + NS * BN * kXRow);     // [NS][BN]
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int wr = warp % WR, wc = warp / WR;  // the warp's 32 rows, its 32 tokens
  const int64_t rowb = static_cast<int64_t>(blockIdx.x) * RB;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.y) * BN;
  const int n_steps = static_cast<int>(n_cols / kStep);
  const int step0 = static_cast<int>(blockIdx.z) * steps_per_split;
  const int step1 = min(n_steps, step0 + steps_per_split);

  auto stage = [&](int buf, int st) {
    wide_stage_weights<kQ6, NT>(wsm + buf * (RB * SR), w, row_bytes, n_rows, rowb, RB, st);
    stage_tokens<BN, NT>(xs + buf * (BN * kXRow), xq, n_cols, tok0, n_tokens, st);
    stage_token_scales<BN>(ds + buf * BN, xd, tok0, n_tokens, n_steps, st);
  };

  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.f;
    }
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
    const uint8_t* w0 = wsm + buf * (RB * SR) + (32 * wr + gid) * SR;  // row tile 0, row gid
    const int8_t* xw = xs + buf * (BN * kXRow) + 32 * wc * kXRow;
    const float* db = ds + buf * BN + 32 * wc;
    int isum[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) isum[mt][n][i] = 0;
      }
    }
    if constexpr (kQ6) {
      const int o = (st * kQ6Bytes) & 3;
      wide_q6k_step(w0, o, xw, lane, isum);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const float d0 = __half2float(*reinterpret_cast<const __half*>(w0 + 16 * mt * SR + o + 208));
        const float d1 = __half2float(*reinterpret_cast<const __half*>(w0 + (16 * mt + 8) * SR + o + 208));
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const float xa = db[n * 8 + 2 * tig], xc = db[n * 8 + 2 * tig + 1];
          acc[mt][n][0] = __fmaf_rn(__fmul_rn(d0, xa), static_cast<float>(isum[mt][n][0]), acc[mt][n][0]);
          acc[mt][n][1] = __fmaf_rn(__fmul_rn(d0, xc), static_cast<float>(isum[mt][n][1]), acc[mt][n][1]);
          acc[mt][n][2] = __fmaf_rn(__fmul_rn(d1, xa), static_cast<float>(isum[mt][n][2]), acc[mt][n][2]);
          acc[mt][n][3] = __fmaf_rn(__fmul_rn(d1, xc), static_cast<float>(isum[mt][n][3]), acc[mt][n][3]);
        }
      }
    } else {
      int msum[2][4][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int n = 0; n < 4; ++n) {
#pragma unroll
          for (int i = 0; i < 4; ++i) msum[mt][n][i] = 0;
        }
      }
      wide_q4k_step(w0, xw, lane, isum, msum);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const float2 dm0 = __half22float2(*reinterpret_cast<const __half2*>(w0 + 16 * mt * SR));
        const float2 dm1 = __half22float2(*reinterpret_cast<const __half2*>(w0 + (16 * mt + 8) * SR));
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const float xa = db[n * 8 + 2 * tig], xc = db[n * 8 + 2 * tig + 1];
          acc[mt][n][0] = q8k_step(acc[mt][n][0], dm0, xa, isum[mt][n][0], msum[mt][n][0]);
          acc[mt][n][1] = q8k_step(acc[mt][n][1], dm0, xc, isum[mt][n][1], msum[mt][n][1]);
          acc[mt][n][2] = q8k_step(acc[mt][n][2], dm1, xa, isum[mt][n][2], msum[mt][n][2]);
          acc[mt][n][3] = q8k_step(acc[mt][n][3], dm1, xc, isum[mt][n][3], msum[mt][n][3]);
        }
      }
    }
  }
  float* o = out + static_cast<int64_t>(blockIdx.z) * n_tokens * n_rows;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t tok = tok0 + 32 * wc + n * 8 + 2 * tig + (i & 1);
        const int64_t row = rowb + 32 * wr + 16 * mt + gid + (i >= 2 ? 8 : 0);
        if (tok < n_tokens && row < n_rows) o[tok * n_rows + row] = acc[mt][n][i];
      }
    }
  }
}

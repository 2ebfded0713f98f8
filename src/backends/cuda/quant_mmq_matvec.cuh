// q8_gemm's results for a few tokens (1 .. kMaxMatvecTokens) by a matrix-vector kernel
// (included by quant_mmq.cu inside its anonymous namespace: its constants, q8k_step,
// q6_quad and plan_for). The batch-invariant mode (--deterministic) sends every Q4_K /
// Q6_K product to q8_gemm, whose 16-token tiles waste most of their work on one token;
// this kernel gives the same bits at a matrix-vector kernel's cost:
//  - the tokens are the same Q8_K quants and scales (q8k_quantize_kernel);
//  - each 256-column step's sums are the same integers (exact whatever their order):
//    Q4_K: isum = sum over sub-blocks of scale * (q . x), msum = sum of min * (sum of x);
//    Q6_K: isum = sum over groups of 16 of scale * ((q - 32) . x);
//  - the floats then follow q8_gemm's chain: within each split of plan_for (which depends
//    on the weight only) the steps in order from 0.0f through q8k_step (Q4_K) or
//    fma(d * xa, isum, acc) (Q6_K), and the splits' sums added in order (sum_splits).
// A warp per row; each quarter-warp one step of four consecutive ones, each lane one
// 32-column sub-block (Q6_K: two groups of 16); the quarter's integers summed by
// shuffles, then the four steps chained in order by every lane (the chain is uniform).

constexpr int kMvRowsPerBlock = 4;  // warps (rows) a block

template <int NT, bool kQ6>
__global__ void __launch_bounds__(32 * kMvRowsPerBlock)
    mmq_matvec_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t n_rows, int64_t n_cols,
                      const int8_t* __restrict__ xq, const float* __restrict__ xk, int steps_per_split,
                      float* __restrict__ y) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMvRowsPerBlock + threadIdx.x / 32;
  if (row >= n_rows) return;  // (whole warps: no shuffle loses a partner)
  const int n_steps = static_cast<int>(n_cols / kStep);
  const int quarter = lane / 8, sb = lane % 8;
  const uint8_t* wrow = w + row * row_bytes;
  float acc[NT], total[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = total[t] = 0.0f;
  for (int st0 = 0; st0 < n_steps; st0 += 4) {
    const int st = st0 + quarter;
    int isum[NT], msum[NT];
    float2 dm = make_float2(0.0f, 0.0f);  // Q4_K (d, dmin); Q6_K (d, -)
#pragma unroll
    for (int t = 0; t < NT; ++t) isum[t] = msum[t] = 0;
    if (st < n_steps) {
      if constexpr (!kQ6) {
        // Q4_K block (144 bytes, 16-aligned): half2 (d, dmin), 12 bytes of 6-bit scales and
        // mins, qs[128]: sub-block sb's 32 values are the low (sb even) or high nibbles of
        // qs[32 (sb / 2) ..].
        const uint8_t* blk = wrow + static_cast<int64_t>(st) * 144;
        const int4 hd = *reinterpret_cast<const int4*>(blk);
        const int s3[3] = {hd.y, hd.z, hd.w};
        dm = __half22float2(*reinterpret_cast<const __half2*>(&hd.x));
        int sc, m;
        q8::scale_min_k4(s3, sb, &sc, &m);
        const int4 qa = *reinterpret_cast<const int4*>(blk + 16 + 32 * (sb / 2));
        const int4 qb = *reinterpret_cast<const int4*>(blk + 16 + 32 * (sb / 2) + 16);
        const int qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
        const int shift = 4 * (sb & 1);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int8_t* xs = xq + static_cast<int64_t>(t) * n_cols + static_cast<int64_t>(st) * kStep + 32 * sb;
          const int4 xa = *reinterpret_cast<const int4*>(xs), xb = *reinterpret_cast<const int4*>(xs + 16);
          const int xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
          int dot = 0, xsum = 0;
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            dot = __dp4a((qw[i] >> shift) & q8::kLo4, xw[i], dot);
            xsum = __dp4a(0x01010101, xw[i], xsum);
          }
          isum[t] = sc * dot;
          msum[t] = m * xsum;
        }
      } else {
        // Q6_K block (210 bytes, 2-aligned): read from the 4-aligned address at or before it
        // (q6_quad's words); groups 2 sb and 2 sb + 1 (16 values each) are columns 32 sb ...
        const uint8_t* blk = wrow + static_cast<int64_t>(st) * kQ6Bytes;
        const int o = static_cast<int>(reinterpret_cast<uintptr_t>(blk) & 3);
        const uint8_t* base = blk - o;
        dm.x = __half2float(*reinterpret_cast<const __half*>(blk + 208));
        int a[2][4];
        int scs[2];
#pragma unroll
        for (int g = 0; g < 2; ++g) {
          const int j = 2 * sb + g;
          scs[g] = static_cast<int8_t>(blk[192 + j]);
#pragma unroll
          for (int tig = 0; tig < 4; ++tig) a[g][tig] = q6_quad(base, o, j, tig);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const int8_t* xs = xq + static_cast<int64_t>(t) * n_cols + static_cast<int64_t>(st) * kStep + 32 * sb;
          const int4 xa = *reinterpret_cast<const int4*>(xs), xb = *reinterpret_cast<const int4*>(xs + 16);
          const int x0[4] = {xa.x, xa.y, xa.z, xa.w}, x1[4] = {xb.x, xb.y, xb.z, xb.w};
          int d0 = 0, d1 = 0;
#pragma unroll
          for (int tig = 0; tig < 4; ++tig) {
            d0 = __dp4a(a[0][tig], x0[tig], d0);
            d1 = __dp4a(a[1][tig], x1[tig], d1);
          }
          isum[t] = scs[0] * d0 + scs[1] * d1;
        }
      }
    }
    // The quarter's eight sub-blocks: integers, exact in any order.
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
      for (int off = 1; off < 8; off <<= 1) {
        isum[t] += __shfl_xor_sync(0xffffffffu, isum[t], off);
        if constexpr (!kQ6) msum[t] += __shfl_xor_sync(0xffffffffu, msum[t], off);
      }
    }
    // The four steps in order, on every lane; a split's first step folds the previous
    // split's sum into the total (sum_splits' order: part 0, + part 1, ...).
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int s = st0 + k;
      if (s >= n_steps) break;
      const float2 dmk = make_float2(__shfl_sync(0xffffffffu, dm.x, 8 * k), __shfl_sync(0xffffffffu, dm.y, 8 * k));
      const bool fold = s > 0 && s % steps_per_split == 0;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int is = __shfl_sync(0xffffffffu, isum[t], 8 * k);
        const float xa = xk[static_cast<int64_t>(t) * n_steps + s];
        if (fold) {
          total[t] = s == steps_per_split ? acc[t] : total[t] + acc[t];
          acc[t] = 0.0f;
        }
        if constexpr (kQ6) {
          acc[t] = __fmaf_rn(__fmul_rn(dmk.x, xa), static_cast<float>(is), acc[t]);
        } else {
          const int ms = __shfl_sync(0xffffffffu, msum[t], 8 * k);
          acc[t] = q8k_step(acc[t], dmk, xa, is, ms);
        }
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      y[static_cast<int64_t>(t) * n_rows + row] = n_steps > steps_per_split ? total[t] + acc[t] : acc[t];
    }
  }
}

template <int NT>
void launch_mmq_matvec(const DeviceWeight& w, const int8_t* xq, const float* xk, int steps_per_split, float* y,
                       cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((w.n_rows + kMvRowsPerBlock - 1) / kMvRowsPerBlock);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  if (w.type == GgmlType::Q6_K) {
    launch_pdl(mmq_matvec_kernel<NT, true>, blocks, 32 * kMvRowsPerBlock, 0, stream, wd,
               static_cast<int64_t>(w.row_bytes), w.n_rows, w.n_cols, xq, xk, steps_per_split, y);
  } else {
    launch_pdl(mmq_matvec_kernel<NT, false>, blocks, 32 * kMvRowsPerBlock, 0, stream, wd,
               static_cast<int64_t>(w.row_bytes), w.n_rows, w.n_cols, xq, xk, steps_per_split, y);
  }
}

// Temperature draws from a logits row on the device (CudaBackend::fetch_rows), one block
// of kDrawThreads per row, repeating engine::Sampler's arithmetic exactly (the same token
// for the same row, parameters and uniform number; Sampler::drawable states it):
// exp_shifted's polynomial with every rounding spelled out, totals summed in double per
// 1024 tokens in sum_of's order (eight running sums, the tail, then the eight), the blocks
// in order. A draw over the whole row finds the block holding r first; a draw with top-k,
// top-p or min-p gathers the few most likely tokens (a histogram of 1/16-nat buckets below
// the largest logit says how far down the draw can reach), sorts them by logit in shared
// memory and walks them as the host does. When the candidates do not fit (kDrawCap) or
// rounding leaves the cut outside them, the draw returns -1 and the row goes to the host.
#pragma once

#include <climits>

#include "ops/backend.h"

namespace hearth::cuda::draw {

constexpr int kDrawThreads = 1024;
constexpr int kSumBlock = 1024;                      // engine::Sampler's kSumBlock
constexpr int64_t kMaxCols = 256LL * kSumBlock;      // rows drawn on the device (wider: copied)
constexpr int kDrawCap = 2048;                       // candidates of a ranked draw (more: copied)
constexpr int kBuckets = 1024;                       // of 1/16 nat below the largest logit
constexpr float kPerNat = 16.0f;

// Shared memory of one row's draw; the phases reuse it.
union Smem {
  struct {
    double part[(kMaxCols / kSumBlock) * 8];  // [block][running sum]
    double bsum[kMaxCols / kSumBlock];
    float pr[kSumBlock];
  } sum;
  struct {
    int count[kBuckets];
    float mass[kBuckets];
  } hist;
  struct {
    float logit[kDrawCap];
    int id[kDrawCap];
  } cand;
};

// engine::exp_shifted's exp((x - shift) * scale) for one value, bit for bit (no contraction).
__device__ __forceinline__ float exp_like_host(float x, float shift, float scale) {
  constexpr unsigned kLow = 0xc2ae0000u;  // the bits of -87.0f
  const float t = __fmul_rn(__fsub_rn(x, shift), scale);
  const unsigned tb = __float_as_uint(t);
  if ((tb >> 31) != 0u && tb > kLow) return 0.0f;
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(t, 1.44269504f), 12582912.0f), 12582912.0f);
  const float r = __fsub_rn(__fsub_rn(t, __fmul_rn(n, 0.693145752f)), __fmul_rn(n, 1.42860677e-06f));
  float p = 1.98756912e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.39819994e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.33345205e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.16657962e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.66666657e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
  return __fmul_rn(p, __int_as_float((static_cast<int>(n) + 127) << 23));
}

// The total of exp_like_host(row[i], shift, scale) over the row, summed as
// engine::Sampler's blocked_total (sm.sum.bsum keeps the blocks' sums). Every thread gets it.
__device__ double blocked_total(const float* __restrict__ row, int n, float shift, float scale, Smem& sm) {
  __shared__ double s_sum;
  const int tid = static_cast<int>(threadIdx.x);
  const int nb = (n + kSumBlock - 1) / kSumBlock;
  for (int task = tid; task < nb * 8; task += kDrawThreads) {  // running sum k of block b
    const int b = task / 8, k = task % 8;
    const int len = min(kSumBlock, n - b * kSumBlock), full = len / 8 * 8;
    const float* x = row + static_cast<int64_t>(b) * kSumBlock;
    double a = 0.0;
    for (int i = k; i < full; i += 8) a = __dadd_rn(a, static_cast<double>(exp_like_host(x[i], shift, scale)));
    sm.sum.part[task] = a;
  }
  __syncthreads();
  for (int b = tid; b < nb; b += kDrawThreads) {
    const int len = min(kSumBlock, n - b * kSumBlock), full = len / 8 * 8;
    const float* x = row + static_cast<int64_t>(b) * kSumBlock;
    double sb = 0.0;
    for (int i = full; i < len; ++i) sb = __dadd_rn(sb, static_cast<double>(exp_like_host(x[i], shift, scale)));
    for (int k = 0; k < 8; ++k) sb = __dadd_rn(sb, sm.sum.part[b * 8 + k]);
    sm.sum.bsum[b] = sb;
  }
  __syncthreads();
  if (tid == 0) {
    double sum = 0.0;
    for (int b = 0; b < nb; ++b) sum = __dadd_rn(sum, sm.sum.bsum[b]);
    s_sum = sum;
  }
  __syncthreads();
  return s_sum;
}

// A draw over every token of the row in id order (shift = the largest value).
__device__ int draw_full(const float* __restrict__ row, int n, float shift, float scale, double u, Smem& sm) {
  __shared__ double s_acc, s_r;
  __shared__ int s_from, s_found;
  const int tid = static_cast<int>(threadIdx.x);
  const int nb = (n + kSumBlock - 1) / kSumBlock;
  const double sum = blocked_total(row, n, shift, scale, sm);
  if (tid == 0) {
    const double r = __dmul_rn(u, sum);
    double acc = 0.0;
    int from = 0;
    for (int b = 0; b + 1 < nb && r >= __dadd_rn(acc, sm.sum.bsum[b]); ++b) {
      acc = __dadd_rn(acc, sm.sum.bsum[b]);
      from = (b + 1) * kSumBlock;
    }
    s_r = r;
    s_acc = acc;
    s_from = from;
    s_found = -1;
  }
  __syncthreads();
  for (int start = s_from; start < n; start += kSumBlock) {
    const int i = start + tid;
    if (tid < kSumBlock) sm.sum.pr[tid] = i < n ? exp_like_host(row[i], shift, scale) : 0.0f;
    __syncthreads();
    if (tid == 0) {
      double acc = s_acc;
      const int len = min(kSumBlock, n - start);
      for (int j = 0; j < len; ++j) {
        acc = __dadd_rn(acc, static_cast<double>(sm.sum.pr[j]));
        if (s_r < acc) {
          s_found = start + j;
          break;
        }
      }
      s_acc = acc;
    }
    __syncthreads();
    if (s_found >= 0) break;
  }
  if (s_found >= 0) return s_found;
  // Rounding left r at the very top: the last token that can be drawn (as the host does).
  if (tid == 0) {
    for (int i = n; i-- > 0;) {
      if (exp_like_host(row[i], shift, scale) > 0.0f) {
        s_found = i;
        break;
      }
    }
    if (s_found < 0) s_found = n - 1;
  }
  __syncthreads();
  return s_found;
}

// Bucket of a logit l <= top: floor((top - l) x 16), the last for everything further down.
// Monotone in l, so the tokens of buckets <= b are the most likely ones, ties included.
__device__ __forceinline__ int bucket_of(float l, float top) {
  const float d = __fmul_rn(__fsub_rn(top, l), kPerNat);
  return d >= static_cast<float>(kBuckets - 1) ? kBuckets - 1 : static_cast<int>(d);
}

// (logit, id) a goes after b: by decreasing logit, ties by increasing id (ranked), or by
// increasing id alone.
__device__ __forceinline__ bool goes_after(float la, int ia, float lb, int ib, bool ranked) {
  if (!ranked) return ia > ib;
  return la < lb || (la == lb && ia > ib);
}

// The draw of p.kind == kDraw with top-k, top-p or min-p (shift = the largest value).
// Returns the token, -1 when it cannot be decided here, -2 when every token is kept
// unranked (then draw_full decides).
__device__ int draw_filtered(const float* __restrict__ row, int n, float top, const ops::RowReduce& p, Smem& sm) {
  __shared__ double s_total;
  __shared__ int s_last, s_count, s_next, s_tok;
  __shared__ bool s_below_fail;  // tokens past the candidates fail min-p
  const int tid = static_cast<int>(threadIdx.x);
  const bool top_k_on = p.top_k > 0 && p.top_k < n;
  const bool top_p_on = p.top_p < 1.0f;
  const bool ranked = top_k_on || top_p_on;
  const bool min_p_on = p.min_p > 0.0f;
  double total = 0.0;
  if (top_p_on) total = blocked_total(row, n, top, 1.0f, sm);
  const bool want_mass = top_p_on && !top_k_on;
  for (int b = tid; b < kBuckets; b += kDrawThreads) {
    sm.hist.count[b] = 0;
    sm.hist.mass[b] = 0.0f;
  }
  __syncthreads();
  for (int base = 0; base < n; base += kDrawThreads) {  // every thread takes every turn
    const int i = base + tid;
    const bool in = i < n;
    const float l = in ? row[i] : top;
    const int b = in ? bucket_of(l, top) : -1;
    // One shared-memory atomic per bucket and warp (most tokens share a few buckets).
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    if (in && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&sm.hist.count[b], __popc(peers));
    if (in && want_mass) atomicAdd(&sm.hist.mass[b], exp_like_host(l, top, 1.0f));
  }
  __syncthreads();
  if (tid == 0) {
    // How far down the draw can reach: the k-th rank's bucket, the bucket where the mass
    // (in float, with a margin: the exact cut is found below) reaches top_p, min-p's bound.
    int last = kBuckets - 1;
    if (top_k_on) {
      int c = 0;
      for (last = 0; last < kBuckets - 1; ++last) {
        c += sm.hist.count[last];
        if (c >= p.top_k) break;
      }
    } else if (top_p_on) {
      const double want = static_cast<double>(p.top_p) * total * (1.0 + 1e-3);
      double acc = 0.0;
      for (last = 0; last < kBuckets - 1; ++last) {
        acc += sm.hist.mass[last];
        if (acc >= want) break;
      }
    }
    bool below_fail = false;
    if (min_p_on) {
      // p(l) >= min_p means top - l <= -ln(min_p) (to the polynomial's 2e-6): one bucket of margin.
      const float d = -logf(p.min_p) * kPerNat;
      const int lm = d >= static_cast<float>(kBuckets - 2) ? kBuckets - 1 : static_cast<int>(d) + 1;
      if (lm <= last) {
        last = lm;
        below_fail = lm < kBuckets - 1;
      }
    }
    int count = 0;
    for (int b = 0; b <= last; ++b) count += sm.hist.count[b];
    s_last = last;
    s_count = count;
    s_below_fail = below_fail;
    s_next = 0;
    s_tok = -1;
    s_total = total;
  }
  __syncthreads();
  const int count = s_count, last = s_last;
  if (count > kDrawCap) return -1;
  for (int i = tid; i < n; i += kDrawThreads) {
    const float l = row[i];
    if (bucket_of(l, top) <= last) {
      const int at = atomicAdd(&s_next, 1);
      sm.cand.logit[at] = l;
      sm.cand.id[at] = i;
    }
  }
  int width = 1;
  while (width < count) width <<= 1;
  __syncthreads();
  for (int i = count + tid; i < width; i += kDrawThreads) {
    sm.cand.logit[i] = -INFINITY;
    sm.cand.id[i] = INT_MAX;
  }
  __syncthreads();
  // Bitonic sort of the candidates (padding last).
  for (int k = 2; k <= width; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < width; i += kDrawThreads) {
        const int o = i ^ j;
        if (o <= i) continue;
        const float li = sm.cand.logit[i], lo = sm.cand.logit[o];
        const int ii = sm.cand.id[i], io = sm.cand.id[o];
        const bool up = (i & k) == 0;
        if (up ? goes_after(li, ii, lo, io, ranked) : goes_after(lo, io, li, ii, ranked)) {
          sm.cand.logit[i] = lo;
          sm.cand.logit[o] = li;
          sm.cand.id[i] = io;
          sm.cand.id[o] = ii;
        }
      }
      __syncthreads();
    }
  }
  if (tid == 0) {
    const float* cl = sm.cand.logit;
    const int* ci = sm.cand.id;
    int nf = -1;  // the candidates kept for the draw (a prefix, ranked), -1: undecided here
    if (ranked) {
      int n1 = -1;  // after top-k and top-p
      if (top_p_on) {
        const double threshold = __dmul_rn(static_cast<double>(p.top_p), s_total);
        const int limit = top_k_on ? min(p.top_k, count) : count;
        double cum = 0.0;
        for (int i = 0; i < limit; ++i) {
          cum = __dadd_rn(cum, static_cast<double>(exp_like_host(cl[i], top, 1.0f)));
          if (cum >= threshold) {
            n1 = i + 1;
            break;
          }
        }
      }
      if (n1 < 0 && top_k_on && p.top_k <= count) n1 = p.top_k;
      if (n1 < 0 && count == n) n1 = n;  // every token, no cut (rounding)
      if (min_p_on) {
        const int bound = n1 < 0 ? count : n1;
        int keep = 1;
        while (keep < bound && exp_like_host(cl[keep], top, 1.0f) >= p.min_p) ++keep;
        if (keep < bound || n1 >= 0) {
          nf = keep;
        } else if (s_below_fail || count == n) {
          nf = count;  // the next token, past the candidates, fails min-p
        }
      } else {
        nf = n1;
      }
    } else {
      // min-p alone: the tokens that pass, in id order (compacted in place).
      int m = 0;
      for (int i = 0; i < count; ++i) {
        if (exp_like_host(cl[i], top, 1.0f) >= p.min_p) {
          sm.cand.logit[m] = cl[i];
          sm.cand.id[m] = ci[i];
          ++m;
        }
      }
      nf = m == n ? -2 : m;
    }
    if (nf > 0) {
      double sum = 0.0;
      for (int i = 0; i < nf; ++i) sum = __dadd_rn(sum, static_cast<double>(exp_like_host(cl[i], top, p.scale)));
      const double r = __dmul_rn(p.u, sum);
      double acc = 0.0;
      int tok = -1;
      for (int i = 0; i < nf && tok < 0; ++i) {
        acc = __dadd_rn(acc, static_cast<double>(exp_like_host(cl[i], top, p.scale)));
        if (r < acc) tok = ci[i];
      }
      for (int i = nf; tok < 0 && i-- > 0;) {
        if (exp_like_host(cl[i], top, p.scale) > 0.0f) tok = ci[i];
      }
      s_tok = tok < 0 ? ci[nf - 1] : tok;
    } else {
      s_tok = nf;  // -1 or -2
    }
  }
  __syncthreads();
  return s_tok;
}

}  // namespace hearth::cuda::draw

// CudaBackend operations of Gated DeltaNet layers: the causal depthwise conv with its
// state (one thread per sequence and channel) and the gated delta rule in its
// recurrent form, token by token: the q/k L2 normalisation and the gates of all tokens
// first (one parallel kernel), then the recurrence with each head's d_k x d_v state
// spread over blocks of 32 columns, four threads a column, kept in registers across the
// tokens. f32 throughout. Prompts run token by token too (the chunked form is a later
// step). Snapshots inside a call (GdnStates::snaps, speculative verification's checkpoint
// after each drafted row) are written by the same kernels as their rows pass: the bits of
// running the rows in passes with copies between them, in one launch each.
#include <algorithm>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "core/error.h"
#include "backends/cuda/launch.cuh"

namespace hearth::cuda {
namespace {

// One thread per (sequence, channel): the outputs of the sequence's rows (kOutputs; a
// prompt's rows run by conv_rows_kernel instead), then the new conv state. A sequence's
// conv state: conv + its slot * stride (the slot read here, from the step description).
// The index of sequence s's first snapshot in (seq, after) order (n when it has none).
__device__ __forceinline__ int first_snap(const ops::GdnSnap* snaps, int n, int64_t s) {
  int j = 0;
  while (j < n && snaps[j].seq < s) ++j;
  return j;
}

// snaps: n_snaps snapshots in (seq, after) order; each takes the sequence's conv state
// after its first `after` rows (the state-prefixed input's rows after .. after + hist).
template <bool kOutputs>
__global__ void ssm_conv_silu_kernel(const float* __restrict__ x, int64_t C, const float* __restrict__ w, int64_t K,
                                     float* conv, int64_t stride, const ops::GdnSeq* __restrict__ seqs, int64_t n_seqs,
                                     const ops::GdnSnap* __restrict__ snaps, int n_snaps, float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n_seqs * C) return;
  const int64_t s = idx / C, c = idx % C;
  const ops::GdnSeq q = seqs[s];
  const int64_t hist = K - 1, n = q.n_tokens;
  const float* xs = x + q.first_row * C;
  float* state = conv + q.state_slot * stride;
  auto in = [&](int64_t r) { return r < hist ? state[r * C + c] : xs[(r - hist) * C + c]; };
  if constexpr (kOutputs) {
    float* os = out + q.first_row * C;
    const float* wc = w + c * K;
    for (int64_t t = 0; t < n; ++t) {
      float acc = 0.0f;
      for (int64_t i = 0; i < K; ++i) acc += wc[i] * in(t + i);
      os[t * C + c] = silu_f(acc);
    }
  }
  // Snapshots (other slots) before the state moves on.
  for (int j = first_snap(snaps, n_snaps, s); j < n_snaps && snaps[j].seq == s; ++j) {
    float* snap = conv + int64_t{snaps[j].slot} * stride;
    for (int64_t r = 0; r < hist; ++r) snap[r * C + c] = in(snaps[j].after + r);
  }
  // New state: the last hist rows of the state-prefixed input (row n + r >= r is read
  // before row r is written).
  for (int64_t r = 0; r < hist; ++r) state[r * C + c] = in(n + r);
}

// Prompts: the outputs of every (row, channel) in parallel (the same sums as
// ssm_conv_silu_kernel); ssm_conv_silu_kernel<false> moves the states on after it.
__global__ void conv_rows_kernel(const float* __restrict__ x, int64_t C, const float* __restrict__ w, int64_t K,
                                 const float* conv, int64_t stride, const ops::GdnSeq* __restrict__ seqs,
                                 int64_t n_seqs, int64_t n_rows, float* __restrict__ out) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n_rows * C) return;
  const int64_t row = idx / C, c = idx % C;
  int64_t lo = 0, hi = n_seqs - 1;  // the sequence holding `row` (seqs in row order)
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (seqs[mid].first_row <= row) lo = mid; else hi = mid - 1;
  }
  const ops::GdnSeq q = seqs[lo];
  const int64_t t = row - q.first_row, hist = K - 1;
  if (t < 0 || t >= q.n_tokens) return;
  const float* xs = x + q.first_row * C;
  const float* wc = w + c * K;
  const float* state = conv + q.state_slot * stride;
  float acc = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    const int64_t r = t + i;
    acc += wc[i] * (r < hist ? state[r * C + c] : xs[(r - hist) * C + c]);
  }
  out[row * C + c] = silu_f(acc);
}

struct GdnArgs {
  const float* qkv;
  const float* a;
  const float* b;
  const float* A;
  const float* dt;
  const ops::GdnSeq* seqs;
  const ops::GdnSnap* snaps;  // (seq, after) order
  int n_snaps;
  float* ssm;           // slot 0's delta-rule state; a sequence's: ssm + its slot * slot_stride
  int64_t slot_stride;
  float* o;
  int hk, hv, dk, dv;
  int64_t C, kd, vd;
  bool v_tiled;
  float l2_eps, scale;
};

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The factors that L2-normalise key head kh's q (also times 1/sqrt(d_k)) and k of the row
// at src, summed over the block (every thread gets them; synchronises the block).
__device__ __forceinline__ float2 qk_inv_norms(const GdnArgs& g, const float* src, int kh, float* red) {
  float qsq = 0.0f, ksq = 0.0f;
  for (int i = threadIdx.x; i < g.dk; i += blockDim.x) {
    const float qv = src[kh * g.dk + i], kv = src[g.kd + kh * g.dk + i];
    qsq += qv * qv;
    ksq += kv * kv;
  }
  qsq = block_sum(qsq, red);
  ksq = block_sum(ksq, red);
  return make_float2(1.0f / sqrtf(qsq + g.l2_eps) * g.scale, 1.0f / sqrtf(ksq + g.l2_eps));
}

// The per-token inputs of the recurrence, for all rows at once (no dependence between
// tokens): block (row, key head) writes that head's q and k L2-normalised (q also times
// 1/sqrt(d_k)) into qn / kn [row][hk][dk]; the blocks of key head 0 also write each value
// head's decay exp(A * softplus(a + dt)) and beta sigmoid(b) into gd / bt [row][hv].
__global__ void gdn_prep_kernel(GdnArgs g, float* __restrict__ qn, float* __restrict__ kn, float* __restrict__ gd,
                                float* __restrict__ bt) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int kh = blockIdx.y;
  const float* src = g.qkv + row * g.C;
  const float2 inv = qk_inv_norms(g, src, kh, red);
  const float qinv = inv.x, kinv = inv.y;
  float* qo = qn + (row * g.hk + kh) * g.dk;
  float* ko = kn + (row * g.hk + kh) * g.dk;
  for (int i = threadIdx.x; i < g.dk; i += blockDim.x) {
    qo[i] = src[kh * g.dk + i] * qinv;
    ko[i] = src[g.kd + kh * g.dk + i] * kinv;
  }
  if (kh == 0) {
    for (int h = threadIdx.x; h < g.hv; h += blockDim.x) {
      gd[row * g.hv + h] = expf(g.A[h] * softplus_f(g.a[row * g.hv + h] + g.dt[h]));
      bt[row * g.hv + h] = sigmoid_f(g.b[row * g.hv + h]);
    }
  }
}

// The recurrence, token by token: block (seq, value head h, group of kCols columns of the
// head's d_k x d_v state); the columns are independent (each is the state of one value
// channel), so a head's columns are spread over blocks. Each column is held by kParts
// adjacent threads, part p owning state rows p, p + kParts, ... (DK / kParts registers), so
// that a token's two dot products are short chains plus two shuffles. The token's q and k
// (prepared by gdn_prep_kernel) go through shared memory, double-buffered: one barrier a
// token. kPrep (decode steps: one token a sequence): each block prepares its token's q, k
// and gates itself, as gdn_prep_kernel does (the same block sums over the same 128
// threads for d_k <= 128), instead of reading them from that kernel: one launch less a
// layer.
constexpr int kCols = 32, kParts = 4;

template <int DK, bool kPrep = false>
__global__ void __launch_bounds__(kCols * kParts)
    gdn_recurrent_kernel(GdnArgs g, const float* __restrict__ qn, const float* __restrict__ kn,
                         const float* __restrict__ gd, const float* __restrict__ bt) {
  ::hearth::cuda::pdl_wait();
  ::hearth::cuda::pdl_trigger();
  constexpr int kPer = DK / kParts;
  __shared__ float qs[2][DK], ks[2][DK];
  __shared__ float red[32];
  const ops::GdnSeq sq = g.seqs[blockIdx.x];
  const int h = blockIdx.y;
  const int tid = static_cast<int>(threadIdx.x);
  const int c = static_cast<int>(blockIdx.z) * kCols + tid / kParts, p = tid % kParts;
  const int ratio = g.hv / g.hk;
  const int kh = g.v_tiled ? h % g.hk : h / ratio;
  const int64_t head_off = static_cast<int64_t>(h) * g.dk * g.dv;
  float* S = g.ssm + sq.state_slot * g.slot_stride + head_off;
  const bool owner = c < g.dv;
  int snap = first_snap(g.snaps, g.n_snaps, blockIdx.x);  // the next snapshot of this sequence
  float col[kPer];
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int i = p + kParts * m;
    col[m] = (owner && i < g.dk) ? S[static_cast<int64_t>(i) * g.dv + c] : 0.0f;
  }
  for (int64_t t = 0; t < sq.n_tokens; ++t) {
    const int64_t row = sq.first_row + t;
    const int buf = static_cast<int>(t & 1);
    float decay, beta;
    if constexpr (kPrep) {
      const float* src = g.qkv + row * g.C;
      const float2 inv = qk_inv_norms(g, src, kh, red);
      for (int i = tid; i < DK; i += kCols * kParts) {
        qs[buf][i] = i < g.dk ? src[kh * g.dk + i] * inv.x : 0.0f;
        ks[buf][i] = i < g.dk ? src[g.kd + kh * g.dk + i] * inv.y : 0.0f;
      }
      decay = expf(g.A[h] * softplus_f(g.a[row * g.hv + h] + g.dt[h]));
      beta = sigmoid_f(g.b[row * g.hv + h]);
    } else {
      for (int i = tid; i < DK; i += kCols * kParts) {
        qs[buf][i] = i < g.dk ? qn[(row * g.hk + kh) * g.dk + i] : 0.0f;
        ks[buf][i] = i < g.dk ? kn[(row * g.hk + kh) * g.dk + i] : 0.0f;
      }
      decay = gd[row * g.hv + h];
      beta = bt[row * g.hv + h];
    }
    const float v = owner ? g.qkv[row * g.C + 2 * g.kd + static_cast<int64_t>(h) * g.dv + c] : 0.0f;
    __syncthreads();
    float delta = 0.0f;
#pragma unroll
    for (int m = 0; m < kPer; ++m) delta += col[m] * ks[buf][p + kParts * m];
    delta += __shfl_xor_sync(0xffffffffu, delta, 1);
    delta += __shfl_xor_sync(0xffffffffu, delta, 2);
    delta = beta * (v - decay * delta);
    float o = 0.0f;
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      col[m] = decay * col[m] + ks[buf][p + kParts * m] * delta;
      o += qs[buf][p + kParts * m] * col[m];
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    if (owner && p == 0) g.o[row * g.vd + static_cast<int64_t>(h) * g.dv + c] = o;
    if (snap < g.n_snaps && g.snaps[snap].seq == static_cast<int>(blockIdx.x) && g.snaps[snap].after == t + 1) {
      float* SS = g.ssm + int64_t{g.snaps[snap].slot} * g.slot_stride + head_off;
      if (owner) {
#pragma unroll
        for (int m = 0; m < kPer; ++m) {
          const int i = p + kParts * m;
          if (i < g.dk) SS[static_cast<int64_t>(i) * g.dv + c] = col[m];
        }
      }
      ++snap;
    }
  }
  if (owner) {
#pragma unroll
    for (int m = 0; m < kPer; ++m) {
      const int i = p + kParts * m;
      if (i < g.dk) S[static_cast<int64_t>(i) * g.dv + c] = col[m];
    }
  }
}

const float* need_f32(const ops::WeightView& w, int64_t n, const char* what) {
  if (w.type != GgmlType::F32 || w.n_cols * w.n_rows != n || w.backend_data == nullptr) {
    fail(ErrorKind::kInvalidInput, "cuda",
         std::string(what) + " '" + w.name + "' must be an F32 weight on the GPU with " + std::to_string(n) + " values");
  }
  return static_cast<const float*>(w.backend_data);
}

// The snapshots of a call, checked against its sequences ((seq, after) order, inside
// each sequence's rows, slots other than the sequence's own).
void check_snaps(const ops::GdnStates& st, const ops::GdnSeq* seqs, int64_t n_seqs, const char* op) {
  for (int64_t j = 0; j < st.n_snaps; ++j) {
    const ops::GdnSnap& sn = st.snaps[j];
    const bool seq_ok = sn.seq >= 0 && sn.seq < n_seqs;
    const bool ordered = j == 0 || st.snaps[j - 1].seq < sn.seq ||
                         (st.snaps[j - 1].seq == sn.seq && st.snaps[j - 1].after < sn.after);
    if (!seq_ok || !ordered || sn.after < 1 || sn.after >= seqs[sn.seq].n_tokens || sn.slot < 0 ||
        sn.slot == seqs[sn.seq].state_slot) {
      fail(ErrorKind::kInternal, "cuda", std::string(op) + ": state snapshot " + std::to_string(j) + " (sequence " +
                                             std::to_string(sn.seq) + ", after " + std::to_string(sn.after) +
                                             ", slot " + std::to_string(sn.slot) + ") is out of order or range");
    }
  }
}

}  // namespace

void CudaBackend::ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w,
                                const ops::GdnStates& states, const ops::GdnSeq* seqs, int64_t n_seqs, float* out) {
  OpTimer timer(rt_, "ssm_conv_silu");
  const int64_t K = w.n_cols;
  if (w.n_rows != channels || K < 1) {
    fail(ErrorKind::kInvalidInput, "cuda", "conv weight '" + w.name + "' must be F32 [" + std::to_string(channels) +
                                               " rows of kernel taps]");
  }
  const float* wt = need_f32(w, channels * K, "ssm_conv_silu: conv weight");
  if (n_seqs <= 0) return;
  const auto* d_seqs = rt_.stage_array(seqs, n_seqs, "ssm_conv_silu");
  check_snaps(states, seqs, n_seqs, "ssm_conv_silu");
  const auto* d_snaps = states.n_snaps > 0 ? rt_.stage_array(states.snaps, states.n_snaps, "ssm_conv_silu") : nullptr;
  const int n_snaps = static_cast<int>(states.n_snaps);
  const int64_t total = n_seqs * channels;
  int64_t n_tokens = 0, n_rows = 0;  // n_rows: the rows up to the last sequence's end
  bool rows_in_order = true;          // sequences in row order, not overlapping (gaps allowed)
  for (int64_t i = 0; i < n_seqs; ++i) {
    rows_in_order = rows_in_order && seqs[i].first_row >= n_rows;
    n_rows = seqs[i].first_row + seqs[i].n_tokens;
    n_tokens += seqs[i].n_tokens;
  }
  // Several tokens of a sequence: a thread per (row, channel), then the states (one
  // thread per sequence and channel walking its tokens serialised prompts of 512 rows).
  const bool by_rows = n_tokens > n_seqs && rows_in_order;
  if (rt_.skip_launch()) {
    return;
  }
  if (by_rows) {
    ::hearth::cuda::launch_pdl(conv_rows_kernel, static_cast<unsigned>((n_rows * channels + kThreads - 1) / kThreads),
                               kThreads, 0, stream_, x, channels, wt, K, states.conv, states.slot_stride, d_seqs,
                               n_seqs, n_rows, out);
    HEARTH_CUDA_LAUNCHED("ssm_conv_silu");
    ::hearth::cuda::launch_pdl(ssm_conv_silu_kernel<false>, static_cast<unsigned>((total + kThreads - 1) / kThreads),
                               kThreads, 0, stream_, x, channels, wt, K, states.conv, states.slot_stride, d_seqs,
                               n_seqs, d_snaps, n_snaps, out);
  } else {
    ::hearth::cuda::launch_pdl(ssm_conv_silu_kernel<true>, static_cast<unsigned>((total + kThreads - 1) / kThreads),
                               kThreads, 0, stream_, x, channels, wt, K, states.conv, states.slot_stride, d_seqs,
                               n_seqs, d_snaps, n_snaps, out);
  }
  HEARTH_CUDA_LAUNCHED("ssm_conv_silu");
}

void CudaBackend::gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                                  const ops::WeightView& dt_bias, const ops::GdnShape& sh,
                                  const ops::GdnStates& states, const ops::GdnSeq* seqs, int64_t n_seqs, float* o) {
  OpTimer timer(rt_, "gated_delta_net");
  if (sh.n_k_heads <= 0 || sh.n_v_heads % sh.n_k_heads != 0) {
    fail(ErrorKind::kInvalidInput, "cuda", "gated_delta_net: value heads must be a multiple of key heads");
  }
  if (sh.d_k > 256 || sh.d_v > 1024 || sh.d_k <= 0 || sh.d_v <= 0) {
    fail(ErrorKind::kUnsupported, "cuda", "gated_delta_net: head sizes d_k " + std::to_string(sh.d_k) + ", d_v " +
                                              std::to_string(sh.d_v) + " (the CUDA back-end takes d_k <= 256, d_v <= 1024)");
  }
  GdnArgs g{};
  g.A = need_f32(ssm_a, sh.n_v_heads, "gated_delta_net: ssm_a");
  g.dt = need_f32(dt_bias, sh.n_v_heads, "gated_delta_net: ssm_dt");
  if (n_seqs <= 0) return;
  g.qkv = qkv;
  g.a = a;
  g.b = b;
  g.seqs = rt_.stage_array(seqs, n_seqs, "gated_delta_net");
  check_snaps(states, seqs, n_seqs, "gated_delta_net");
  g.snaps = states.n_snaps > 0 ? rt_.stage_array(states.snaps, states.n_snaps, "gated_delta_net") : nullptr;
  g.n_snaps = static_cast<int>(states.n_snaps);
  g.ssm = states.ssm;
  g.slot_stride = states.slot_stride;
  g.o = o;
  g.hk = static_cast<int>(sh.n_k_heads);
  g.hv = static_cast<int>(sh.n_v_heads);
  g.dk = static_cast<int>(sh.d_k);
  g.dv = static_cast<int>(sh.d_v);
  g.C = sh.conv_channels();
  g.kd = sh.key_dim();
  g.vd = sh.value_dim();
  g.v_tiled = sh.v_tiled;
  g.l2_eps = sh.l2_eps;
  g.scale = 1.0f / std::sqrt(static_cast<float>(sh.d_k));
  // The rows the sequences cover, and their prepared q / k / gates.
  int64_t n_rows = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n_rows = std::max<int64_t>(n_rows, seqs[s].first_row + seqs[s].n_tokens);
  if (n_rows == 0) return;
  // The prepared q / k and gates in scratch (fixed addresses: a recorded step reuses them).
  const int64_t nqk = n_rows * sh.n_k_heads * sh.d_k, ng = n_rows * sh.n_v_heads;
  const auto pad = [](int64_t f) { return (f + 63) / 64 * 64; };
  auto* tmp = static_cast<float*>(
      rt_.scratch(7, sizeof(float) * static_cast<size_t>(2 * pad(nqk) + 2 * pad(ng)), "gated_delta_net"));
  float* qn = tmp;
  float* kn = qn + pad(nqk);
  float* gd = kn + pad(nqk);
  float* bt = gd + pad(ng);
  if (rt_.skip_launch()) {
    return;
  }
  // Decode steps (a token a sequence) prepare q, k and gates inside the recurrence (its
  // 128 threads sum like the prep kernel's for d_k <= 128); prompts in one parallel pass first.
  const bool fused = fuse_ && !deterministic_ && n_rows == n_seqs && sh.d_k <= kCols * kParts;
  if (!fused) {
    const int prep_threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, (sh.d_k + 31) / 32 * 32)));
    ::hearth::cuda::launch_pdl(gdn_prep_kernel, dim3(static_cast<unsigned>(n_rows), static_cast<unsigned>(sh.n_k_heads)),
                               prep_threads, 0, stream_, g, qn, kn, gd, bt);
    HEARTH_CUDA_LAUNCHED("gated_delta_net");
  }
  const dim3 grid(static_cast<unsigned>(n_seqs), static_cast<unsigned>(sh.n_v_heads),
                  static_cast<unsigned>((sh.d_v + kCols - 1) / kCols));
  const int threads = kCols * kParts;
  auto launch = [&](auto kernel) { ::hearth::cuda::launch_pdl(kernel, grid, threads, 0, stream_, g, qn, kn, gd, bt); };
  if (sh.d_k <= 32) {
    fused ? launch(gdn_recurrent_kernel<32, true>) : launch(gdn_recurrent_kernel<32>);
  } else if (sh.d_k <= 64) {
    fused ? launch(gdn_recurrent_kernel<64, true>) : launch(gdn_recurrent_kernel<64>);
  } else if (sh.d_k <= 128) {
    fused ? launch(gdn_recurrent_kernel<128, true>) : launch(gdn_recurrent_kernel<128>);
  } else {
    launch(gdn_recurrent_kernel<256>);
  }
  HEARTH_CUDA_LAUNCHED("gated_delta_net");
}

}  // namespace hearth::cuda

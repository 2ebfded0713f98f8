// CudaBackend operations of Gated DeltaNet layers: the causal depthwise conv with its
// state (one thread per sequence and channel) and the gated delta rule in its
// recurrent form, token by token (one block per sequence and value head; thread j owns
// column j of the head's d_k x d_v state, kept in registers across the tokens). The
// q/k L2 normalisation and the gates are computed in the same kernel. f32 throughout.
// Prompts run token by token too (the chunked form is a later step).
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

__global__ void ssm_conv_silu_kernel(const float* __restrict__ x, int64_t C, const float* __restrict__ w, int64_t K,
                                     const ops::GdnSeq* __restrict__ seqs, int64_t n_seqs, float* __restrict__ out) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n_seqs * C) return;
  const int64_t s = idx / C, c = idx % C;
  const ops::GdnSeq q = seqs[s];
  const int64_t hist = K - 1, n = q.n_tokens;
  const float* xs = x + q.first_row * C;
  float* os = out + q.first_row * C;
  const float* wc = w + c * K;
  auto in = [&](int64_t r) { return r < hist ? q.conv_state[r * C + c] : xs[(r - hist) * C + c]; };
  for (int64_t t = 0; t < n; ++t) {
    float acc = 0.0f;
    for (int64_t i = 0; i < K; ++i) acc += wc[i] * in(t + i);
    os[t * C + c] = silu_f(acc);
  }
  // New state: the last hist rows of the state-prefixed input (row n + r >= r is read
  // before row r is written).
  for (int64_t r = 0; r < hist; ++r) q.conv_state[r * C + c] = in(n + r);
}

struct GdnArgs {
  const float* qkv;
  const float* a;
  const float* b;
  const float* A;
  const float* dt;
  const ops::GdnSeq* seqs;
  float* o;
  int hk, hv, dk, dv;
  int64_t C, kd, vd;
  bool v_tiled;
  float l2_eps, scale;
};

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Block (seq, value head h), blockDim.x >= max(dv, 32) rounded to warps. DK >= dk.
template <int DK>
__global__ void gdn_recurrent_kernel(GdnArgs g) {
  extern __shared__ float sh[];  // q[dk] | k[dk]
  __shared__ float red[32];
  float* qs = sh;
  float* ks = sh + g.dk;
  const ops::GdnSeq sq = g.seqs[blockIdx.x];
  const int h = blockIdx.y, j = threadIdx.x;
  const int ratio = g.hv / g.hk;
  const int kh = g.v_tiled ? h % g.hk : h / ratio;
  float* S = sq.ssm_state + static_cast<int64_t>(h) * g.dk * g.dv;
  float col[DK];
  const bool owner = j < g.dv;
#pragma unroll
  for (int i = 0; i < DK; ++i) col[i] = (owner && i < g.dk) ? S[static_cast<int64_t>(i) * g.dv + j] : 0.0f;
  for (int64_t t = 0; t < sq.n_tokens; ++t) {
    const int64_t row = sq.first_row + t;
    const float* src = g.qkv + row * g.C;
    float qsq = 0.0f, ksq = 0.0f;
    for (int i = j; i < g.dk; i += blockDim.x) {
      const float qv = src[kh * g.dk + i], kv = src[g.kd + kh * g.dk + i];
      qs[i] = qv;
      ks[i] = kv;
      qsq += qv * qv;
      ksq += kv * kv;
    }
    qsq = block_sum(qsq, red);
    ksq = block_sum(ksq, red);
    const float qinv = 1.0f / sqrtf(qsq + g.l2_eps) * g.scale, kinv = 1.0f / sqrtf(ksq + g.l2_eps);
    const float gate = g.A[h] * softplus_f(g.a[row * g.hv + h] + g.dt[h]);
    const float beta = sigmoid_f(g.b[row * g.hv + h]);
    const float decay = expf(gate);
    if (owner) {
      const float v = src[2 * g.kd + static_cast<int64_t>(h) * g.dv + j];
      float delta = 0.0f;
#pragma unroll
      for (int i = 0; i < DK; ++i) {
        if (i < g.dk) delta += col[i] * (ks[i] * kinv);
      }
      delta = beta * (v - decay * delta);
      float o = 0.0f;
#pragma unroll
      for (int i = 0; i < DK; ++i) {
        if (i < g.dk) {
          col[i] = decay * col[i] + (ks[i] * kinv) * delta;
          o += (qs[i] * qinv) * col[i];
        }
      }
      g.o[row * g.vd + static_cast<int64_t>(h) * g.dv + j] = o;
    }
    __syncthreads();  // qs / ks are rewritten by the next token
  }
  if (owner) {
#pragma unroll
    for (int i = 0; i < DK; ++i) {
      if (i < g.dk) S[static_cast<int64_t>(i) * g.dv + j] = col[i];
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

}  // namespace

void CudaBackend::ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w, const ops::GdnSeq* seqs,
                                int64_t n_seqs, float* out) {
  OpTimer timer(*this, "ssm_conv_silu");
  const int64_t K = w.n_cols;
  if (w.n_rows != channels || K < 1) {
    fail(ErrorKind::kInvalidInput, "cuda", "conv weight '" + w.name + "' must be F32 [" + std::to_string(channels) +
                                               " rows of kernel taps]");
  }
  const float* wt = need_f32(w, channels * K, "ssm_conv_silu: conv weight");
  if (n_seqs <= 0) return;
  const auto* d_seqs = stage_array(seqs, n_seqs, "ssm_conv_silu");
  const int64_t total = n_seqs * channels;
  ssm_conv_silu_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream_>>>(
      x, channels, wt, K, d_seqs, n_seqs, out);
  HEARTH_CUDA_LAUNCHED("ssm_conv_silu");
}

void CudaBackend::gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                                  const ops::WeightView& dt_bias, const ops::GdnShape& sh, const ops::GdnSeq* seqs,
                                  int64_t n_seqs, float* o) {
  OpTimer timer(*this, "gated_delta_net");
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
  g.seqs = stage_array(seqs, n_seqs, "gated_delta_net");
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
  const dim3 grid(static_cast<unsigned>(n_seqs), static_cast<unsigned>(sh.n_v_heads));
  const int threads = static_cast<int>(std::max<int64_t>(32, (sh.d_v + 31) / 32 * 32));
  const size_t smem = sizeof(float) * 2 * static_cast<size_t>(sh.d_k);
  if (sh.d_k <= 32) {
    gdn_recurrent_kernel<32><<<grid, threads, smem, stream_>>>(g);
  } else if (sh.d_k <= 64) {
    gdn_recurrent_kernel<64><<<grid, threads, smem, stream_>>>(g);
  } else if (sh.d_k <= 128) {
    gdn_recurrent_kernel<128><<<grid, threads, smem, stream_>>>(g);
  } else {
    gdn_recurrent_kernel<256><<<grid, threads, smem, stream_>>>(g);
  }
  HEARTH_CUDA_LAUNCHED("gated_delta_net");
}

}  // namespace hearth::cuda

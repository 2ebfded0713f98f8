// CpuBackend operations of Gated DeltaNet layers (Qwen3.5, Qwen3-Next): the causal
// conv with its state, the gated delta rule (recurrent step for single tokens, the
// chunked form, chunks of 64, for prompts: linear in their length), the gated RMSNorm
// and the sigmoid gate. The plain double-precision oracle is ops/gated_deltanet_ref.h;
// tests/unit/backend_gdn_test.cpp compares these with it.
//
// Work split: the q/k normalisation and the gates are computed once per token and
// key/value head (parallel over tokens); the recurrence runs one task per (sequence,
// value head), each with its own state slice, so tasks never share memory they write.
// Everything is f32 with sums in the order written (no fused multiply-adds).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "core/error.h"

namespace hearth::cpu {
namespace {

constexpr int64_t kChunk = 64;

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

const float* f32_weight(const ops::WeightView& w, int64_t n, const char* what) {
  if (w.type != GgmlType::F32 || w.n_cols * w.n_rows != n) {
    fail(ErrorKind::kInvalidInput, "cpu",
         std::string(what) + " '" + w.name + "' must be F32 with " + std::to_string(n) + " values");
  }
  return static_cast<const float*>(w.data);
}

// One value head of one sequence: its slices of the prepared inputs and its state.
struct HeadTask {
  const float* q;  // [n, row] normalised and scaled queries; head at + kh * dk
  const float* k;
  const float* v;  // [n, v_row]; head at + h * dv
  const float* g;  // [n, hv]; head at + h
  const float* beta;
  float* S;        // [dk, dv]
  float* o;        // [n, o_row]; head at + h * dv
  int64_t n, row, v_row, o_row, hv, dk, dv;
};

// S = exp(g) S + k (beta (v - exp(g) S^T k))^T, o = S^T q, token by token.
template <bool Simd>
void recurrent_head(const HeadTask& t, std::vector<float>& tmp) {
  tmp.resize(static_cast<size_t>(t.dv));
  float* delta = tmp.data();
  for (int64_t s = 0; s < t.n; ++s) {
    const float* q = t.q + s * t.row;
    const float* k = t.k + s * t.row;
    const float* v = t.v + s * t.v_row;
    float* o = t.o + s * t.o_row;
    const float decay = std::exp(t.g[s * t.hv]);
    const float beta = t.beta[s * t.hv];
    std::fill(delta, delta + t.dv, 0.0f);
    for (int64_t i = 0; i < t.dk; ++i) {
      const float ki = k[i];
      const float* Si = t.S + i * t.dv;
      for (int64_t j = 0; j < t.dv; ++j) delta[j] += Si[j] * ki;
    }
    for (int64_t j = 0; j < t.dv; ++j) delta[j] = beta * (v[j] - decay * delta[j]);
    std::fill(o, o + t.dv, 0.0f);
    for (int64_t i = 0; i < t.dk; ++i) {
      const float ki = k[i], qi = q[i];
      float* Si = t.S + i * t.dv;
      for (int64_t j = 0; j < t.dv; ++j) {
        Si[j] = decay * Si[j] + ki * delta[j];
        o[j] += qi * Si[j];
      }
    }
  }
}

// G_i = sum of the chunk's log-decays up to token i, and exp(G_i).
inline void cumulative_decay(const HeadTask& t, int64_t c0, int64_t L, float* G, float* eg) {
  float cum = 0.0f;
  for (int64_t i = 0; i < L; ++i) {
    cum += t.g[(c0 + i) * t.hv];
    G[i] = cum;
    eg[i] = std::exp(cum);
  }
}

// The state after a chunk: S = el S0 + sum_j e(j) k_j u_j^T, el = exp(G_last),
// e(j) = exp(G_last - G_j).
template <class E>
inline void update_state(const HeadTask& t, int64_t c0, int64_t L, const float* U, float el, E e_of) {
  const int64_t dk = t.dk, dv = t.dv;
  for (int64_t x = 0; x < dk; ++x) {
    float* Sx = t.S + x * dv;
    for (int64_t y = 0; y < dv; ++y) Sx[y] *= el;
  }
  for (int64_t j = 0; j < L; ++j) {
    const float* kj = t.k + (c0 + j) * t.row;
    const float* uj = U + j * dv;
    const float e = e_of(j);
    for (int64_t x = 0; x < dk; ++x) {
      const float w = e * kj[x];
      float* Sx = t.S + x * dv;
      for (int64_t y = 0; y < dv; ++y) Sx[y] += w * uj[y];
    }
  }
}

// One chunk of the chunked form, after A: (I + A) U = beta v and (I + A) W = beta exp(G) k
// by forward substitution, then u = U - W S0 (in U) and the outputs' state part
// exp(G_i) S0^T q_i. Shared by chunked_head and chunked_head_lanes (inlined into both,
// so each is compiled for its own instruction set).
inline void solve_chunk(const HeadTask& t, int64_t c0, int64_t L, const float* A, const float* eg, float* U, float* W,
                        float* tmp) {
  const int64_t dk = t.dk, dv = t.dv;
  auto Q = [&](int64_t i) { return t.q + (c0 + i) * t.row; };
  auto K = [&](int64_t i) { return t.k + (c0 + i) * t.row; };
  auto V = [&](int64_t i) { return t.v + (c0 + i) * t.v_row; };
  auto B = [&](int64_t i) { return t.beta[(c0 + i) * t.hv]; };
  // (I + A) U = beta v and (I + A) W = beta exp(G) k, by forward substitution.
  for (int64_t i = 0; i < L; ++i) {
    float* Ui = U + i * dv;
    float* Wi = W + i * dk;
    const float* vi = V(i);
    const float* ki = K(i);
    const float bi = B(i), bw = B(i) * eg[i];
    for (int64_t y = 0; y < dv; ++y) Ui[y] = bi * vi[y];
    for (int64_t x = 0; x < dk; ++x) Wi[x] = bw * ki[x];
    for (int64_t j = 0; j < i; ++j) {
      const float a = A[i * kChunk + j];
      const float* Uj = U + j * dv;
      const float* Wj = W + j * dk;
      for (int64_t y = 0; y < dv; ++y) Ui[y] -= a * Uj[y];
      for (int64_t x = 0; x < dk; ++x) Wi[x] -= a * Wj[x];
    }
  }
  // u = U - W S0 (in U), and the outputs' state part exp(G_i) S0^T q_i.
  for (int64_t i = 0; i < L; ++i) {
    float* Ui = U + i * dv;
    const float* Wi = W + i * dk;
    const float* qi = Q(i);
    float* oi = t.o + (c0 + i) * t.o_row;
    std::fill(tmp, tmp + dv, 0.0f);
    for (int64_t x = 0; x < dk; ++x) {
      const float* Sx = t.S + x * dv;
      const float w = Wi[x], qx = qi[x];
      for (int64_t y = 0; y < dv; ++y) {
        Ui[y] -= w * Sx[y];
        tmp[y] += qx * Sx[y];
      }
    }
    for (int64_t y = 0; y < dv; ++y) oi[y] = eg[i] * tmp[y];
  }
}

// The chunked form (see ops/gated_deltanet_ref.h, gdn_chunked): per chunk, the
// intra-chunk interactions by forward substitution, then one state update.
template <bool Simd>
void chunked_head(const HeadTask& t, std::vector<float>& buf) {
  const int64_t dk = t.dk, dv = t.dv;
  buf.resize(static_cast<size_t>(kChunk * (kChunk + 2 + dk + 2 * dv)));
  float* G = buf.data();             // [L] cumulative log-decay
  float* A = G + kChunk;             // [L, L] strictly lower
  float* U = A + kChunk * kChunk;    // [L, dv] -> u
  float* W = U + kChunk * dv;        // [L, dk]
  float* tmp = W + kChunk * dk;      // [dv]
  float* eg = tmp + dv;              // [L] exp(G)
  for (int64_t c0 = 0; c0 < t.n; c0 += kChunk) {
    const int64_t L = std::min(kChunk, t.n - c0);
    auto Q = [&](int64_t i) { return t.q + (c0 + i) * t.row; };
    auto K = [&](int64_t i) { return t.k + (c0 + i) * t.row; };
    auto B = [&](int64_t i) { return t.beta[(c0 + i) * t.hv]; };
    cumulative_decay(t, c0, L, G, eg);
    // A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j), j < i.
    for (int64_t i = 0; i < L; ++i) {
      const float* ki = K(i);
      for (int64_t j = 0; j < i; ++j) {
        const float* kj = K(j);
        float s = 0.0f;
        for (int64_t x = 0; x < dk; ++x) s += ki[x] * kj[x];
        A[i * kChunk + j] = B(i) * s * std::exp(G[i] - G[j]);
      }
    }
    solve_chunk(t, c0, L, A, eg, U, W, tmp);
    // The intra-chunk part: o_i += sum_{j <= i} (q_i . k_j) exp(G_i - G_j) u_j.
    for (int64_t i = 0; i < L; ++i) {
      const float* qi = Q(i);
      float* oi = t.o + (c0 + i) * t.o_row;
      for (int64_t j = 0; j <= i; ++j) {
        const float* kj = K(j);
        float s = 0.0f;
        for (int64_t x = 0; x < dk; ++x) s += qi[x] * kj[x];
        const float w = s * std::exp(G[i] - G[j]);
        const float* uj = U + j * dv;
        for (int64_t y = 0; y < dv; ++y) oi[y] += w * uj[y];
      }
    }
    const float gl = G[L - 1];
    update_state(t, c0, L, U, eg[L - 1], [&](int64_t j) { return std::exp(gl - G[j]); });
  }
}

// chunked_head with the same operations on the same values, arranged for vectors: the
// chunk's keys transposed ([dk, L]) so that the key dot products of one row i with all
// keys j run as lanes j (each lane still sums x = 0, 1, ... in order, as chunked_head's
// scalar loop does), and each exp(G_i - G_j) computed once for A, the intra-chunk part
// and the state update (the same argument, so the same value). chunked_head<false> is
// its plain reference (the reference-kernel back-end runs it; tests compare the bits).
void chunked_head_lanes(const HeadTask& t, std::vector<float>& buf) {
  const int64_t dk = t.dk, dv = t.dv;
  buf.resize(static_cast<size_t>(kChunk * (kChunk + 2 + dk + 2 * dv) + kChunk * kChunk + dk * kChunk + kChunk));
  float* G = buf.data();             // [L] cumulative log-decay
  float* A = G + kChunk;             // [L, L] strictly lower
  float* U = A + kChunk * kChunk;    // [L, dv] -> u
  float* W = U + kChunk * dv;        // [L, dk]
  float* tmp = W + kChunk * dk;      // [dv]
  float* eg = tmp + dv;              // [L] exp(G)
  float* D = eg + kChunk;            // [L, L] exp(G_i - G_j), j <= i
  float* KT = D + kChunk * kChunk;   // [dk, kChunk] the chunk's keys, transposed
  float* __restrict s = KT + dk * kChunk;  // [L] dot products of one row
  for (int64_t c0 = 0; c0 < t.n; c0 += kChunk) {
    const int64_t L = std::min(kChunk, t.n - c0);
    auto Q = [&](int64_t i) { return t.q + (c0 + i) * t.row; };
    auto K = [&](int64_t i) { return t.k + (c0 + i) * t.row; };
    auto B = [&](int64_t i) { return t.beta[(c0 + i) * t.hv]; };
    cumulative_decay(t, c0, L, G, eg);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j <= i; ++j) D[i * kChunk + j] = std::exp(G[i] - G[j]);
    }
    for (int64_t j = 0; j < L; ++j) {
      const float* kj = K(j);
      for (int64_t x = 0; x < dk; ++x) KT[x * kChunk + j] = kj[x];
    }
    // s_j = q . k_j (or k_i . k_j) for j < n_j, lanes j, x in order.
    const auto dots = [&](const float* qi, int64_t n_j) {
      std::fill(s, s + n_j, 0.0f);
      for (int64_t x = 0; x < dk; ++x) {
        const float qx = qi[x];
        const float* __restrict kx = KT + x * kChunk;
        for (int64_t j = 0; j < n_j; ++j) s[j] += qx * kx[j];
      }
    };
    // A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j), j < i.
    for (int64_t i = 0; i < L; ++i) {
      dots(K(i), i);
      for (int64_t j = 0; j < i; ++j) A[i * kChunk + j] = B(i) * s[j] * D[i * kChunk + j];
    }
    solve_chunk(t, c0, L, A, eg, U, W, tmp);
    // The intra-chunk part: o_i += sum_{j <= i} (q_i . k_j) exp(G_i - G_j) u_j.
    for (int64_t i = 0; i < L; ++i) {
      dots(Q(i), i + 1);
      float* oi = t.o + (c0 + i) * t.o_row;
      for (int64_t j = 0; j <= i; ++j) {
        const float w = s[j] * D[i * kChunk + j];
        const float* uj = U + j * dv;
        for (int64_t y = 0; y < dv; ++y) oi[y] += w * uj[y];
      }
    }
    update_state(t, c0, L, U, eg[L - 1], [&](int64_t j) { return D[(L - 1) * kChunk + j]; });
  }
}

HEARTH_SIMD __attribute__((flatten)) void recurrent_head_simd(const HeadTask& t, std::vector<float>& tmp) {
  recurrent_head<true>(t, tmp);
}
HEARTH_SIMD __attribute__((flatten)) void chunked_head_simd(const HeadTask& t, std::vector<float>& buf) {
  chunked_head_lanes(t, buf);
}

}  // namespace

void CpuBackend::ssm_conv_silu(const float* x, int64_t channels, const ops::WeightView& w, const ops::GdnSeq* seqs,
                               int64_t n_seqs, float* out) {
  const OpScope timer(op_times_.get(), "ssm_conv_silu");
  const int64_t K = w.n_cols;
  if (w.type != GgmlType::F32 || w.n_rows != channels || K < 1) {
    fail(ErrorKind::kInvalidInput, "cpu", "conv weight '" + w.name + "' must be F32 [" + std::to_string(channels) +
                                              " rows of kernel taps]");
  }
  const auto* wt = static_cast<const float*>(w.data);
  const int64_t hist = K - 1;
  // One pass over channel ranges, every sequence inside (a decode step of many
  // sequences is one parallel call, not one per sequence).
  pool_.parallel_for(channels, 64, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = 0; s < n_seqs; ++s) {
      const ops::GdnSeq& q = seqs[s];
      const float* xs = x + q.first_row * channels;
      float* os = out + q.first_row * channels;
      const int64_t n = q.n_tokens;
      // Input row r of the state-prefixed sequence: r < hist from the state, else x.
      auto in = [&](int64_t r, int64_t c) { return r < hist ? q.conv_state[r * channels + c] : xs[(r - hist) * channels + c]; };
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = begin; c < end; ++c) {
          float acc = 0.0f;
          for (int64_t i = 0; i < K; ++i) acc += wt[c * K + i] * in(t + i, c);
          os[t * channels + c] = silu(acc);
        }
      }
      // The new state: the last hist rows of the prefixed input (read before written:
      // row r of the new state comes from prefixed row n + r >= r).
      for (int64_t r = 0; r < hist; ++r) {
        for (int64_t c = begin; c < end; ++c) q.conv_state[r * channels + c] = in(n + r, c);
      }
    }
  });
}

void CpuBackend::gated_delta_net(const float* qkv, const float* a, const float* b, const ops::WeightView& ssm_a,
                                 const ops::WeightView& dt_bias, const ops::GdnShape& sh, const ops::GdnSeq* seqs,
                                 int64_t n_seqs, float* o) {
  const OpScope timer(op_times_.get(), "gated_delta_net");
  const int64_t hk = sh.n_k_heads, hv = sh.n_v_heads, dk = sh.d_k, dv = sh.d_v;
  if (hk <= 0 || hv % hk != 0) fail(ErrorKind::kInvalidInput, "cpu", "value heads must be a multiple of key heads");
  const float* A = f32_weight(ssm_a, hv, "ssm_a");
  const float* dt = f32_weight(dt_bias, hv, "ssm_dt");
  const int64_t C = sh.conv_channels(), kd = sh.key_dim(), row = 2 * kd;
  int64_t n = 0;
  for (int64_t s = 0; s < n_seqs; ++s) n = std::max(n, seqs[s].first_row + seqs[s].n_tokens);
  // Normalised q | k per token, and the gates.
  gdn_qk_.resize(static_cast<size_t>(n * row));
  gdn_gates_.resize(static_cast<size_t>(2 * n * hv));
  float* qk = gdn_qk_.data();
  float* g = gdn_gates_.data();
  float* beta = g + n * hv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  {
    const OpScope prepare_timer(op_times_.get(), "gdn q/k norm, gates");
    pool_.parallel_for(n, 4, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t hh = 0; hh < 2 * hk; ++hh) {  // q heads then k heads
          const float* src = qkv + t * C + hh * dk;
          float* dst = qk + t * row + hh * dk;
          float ss = 0.0f;
          for (int64_t i = 0; i < dk; ++i) ss += src[i] * src[i];
          const float inv = 1.0f / std::sqrt(ss + sh.l2_eps) * (hh < hk ? scale : 1.0f);
          for (int64_t i = 0; i < dk; ++i) dst[i] = src[i] * inv;
        }
        for (int64_t h = 0; h < hv; ++h) {
          g[t * hv + h] = A[h] * softplus(a[t * hv + h] + dt[h]);
          beta[t * hv + h] = sigmoid(b[t * hv + h]);
        }
      }
    });
  }
  const int64_t ratio = hv / hk;
  const bool simd = simd_ok_;
  gdn_scratch_.resize(static_cast<size_t>(pool_.n_threads()));
  const OpScope heads_timer(op_times_.get(), "gdn heads");
  pool_.parallel_for(n_seqs * hv, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t task = begin; task < end; ++task) {
      const ops::GdnSeq& sq = seqs[task / hv];
      const int64_t h = task % hv;
      if (sq.n_tokens <= 0) continue;
      const int64_t kh = sh.v_tiled ? h % hk : h / ratio;
      const int64_t r0 = sq.first_row;
      const HeadTask t{qk + r0 * row + kh * dk,
                       qk + r0 * row + kd + kh * dk,
                       qkv + r0 * C + 2 * kd + h * dv,
                       g + r0 * hv + h,
                       beta + r0 * hv + h,
                       sq.ssm_state + h * dk * dv,
                       o + r0 * sh.value_dim() + h * dv,
                       sq.n_tokens, row, C, sh.value_dim(), hv, dk, dv};
      std::vector<float>& buf = gdn_scratch_[static_cast<size_t>(thread)];
      if (sq.n_tokens == 1) {
        if (simd) recurrent_head_simd(t, buf); else recurrent_head<false>(t, buf);
      } else {
        if (simd) chunked_head_simd(t, buf); else chunked_head<false>(t, buf);
      }
    }
  });
}

void CpuBackend::gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                                float eps) {
  const OpScope timer(op_times_.get(), "gated_rms_norm");
  const float* wt = f32_weight(w, n, "gated norm weight");
  pool_.parallel_for(n_rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      float* xr = x + r * n;
      const float* zr = z + r * n;
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) xr[i] = xr[i] * inv * wt[i] * silu(zr[i]);
    }
  });
}

void CpuBackend::sigmoid_mul(float* x, const float* gate, int64_t n) {
  const OpScope timer(op_times_.get(), "sigmoid_mul");
  pool_.parallel_for(n, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) x[i] *= sigmoid(gate[i]);
  });
}

void CpuBackend::sigmoid_scale_rows(float* x, const float* gate, int64_t n_rows, int64_t n_cols) {
  const OpScope timer(op_times_.get(), "sigmoid_scale_rows");
  pool_.parallel_for(n_rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n_cols, 1)),
                     [&](int64_t begin, int64_t end, int) {
                       for (int64_t r = begin; r < end; ++r) {
                         const float s = sigmoid(gate[r]);
                         float* xr = x + r * n_cols;
                         for (int64_t c = 0; c < n_cols; ++c) xr[c] *= s;
                       }
                     });
}

}  // namespace hearth::cpu

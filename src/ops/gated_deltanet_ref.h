// Plain reference implementation of the Gated DeltaNet math used by Qwen3.5 and
// Qwen3-Next linear-attention layers (issue 6): the readable oracle that the back-ends'
// fast Gated DeltaNet operation and the tests are checked against.
//
// Layouts (row-major, one token stream):
//   x      [T, C]            conv input/output, C = 2*Hk*dk + Hv*dv (q | k | v channels)
//   q, k   [T, Hk, dk]       after the conv; normalised and scaled by prepare_qk
//   v      [T, Hv, dv]
//   g, beta[T, Hv]           log-decay (<= 0) and write strength in (0, 1)
//   S      [Hv, dk, dv]      recurrent state per value head (the HF/FLA [K, V] layout)
//   o      [T, Hv, dv]
// Value head h reads key head h / (Hv / Hk) ("grouped", HF repeat_interleave), or with
// v_tiled key head h % Hk (the order llama.cpp's qwen35 GGUFs store the value heads in).
//
// Recurrence per value head and token t:
//   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = S_t^T q_t
// The chunked form gives the same result with per-chunk matrix work (prefill).
//
// Every function is a template over the scalar type, instantiated for float (the
// engine's precision: recurrent state in fp32) and double (test oracles).
#pragma once

#include <cstdint>

namespace hearth::ops::ref {

struct GdnDims {
  int64_t n_k_heads = 0;    // Hk: linear_num_key_heads
  int64_t n_v_heads = 0;    // Hv: linear_num_value_heads, a multiple of Hk
  int64_t d_k = 0;          // linear_key_head_dim
  int64_t d_v = 0;          // linear_value_head_dim
  int64_t conv_kernel = 4;  // linear_conv_kernel_dim
  bool v_tiled = false;     // value head h reads key head h % Hk instead of h / (Hv / Hk)
  int64_t key_dim() const { return n_k_heads * d_k; }
  int64_t value_dim() const { return n_v_heads * d_v; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t state_size() const { return n_v_heads * d_k * d_v; }
  int64_t conv_state_size() const { return (conv_kernel - 1) * conv_dim(); }
  // Key head read by value head h.
  int64_t k_head_of(int64_t h) const { return v_tiled ? h % n_k_heads : h / (n_v_heads / n_k_heads); }
};

// (a) Causal depthwise conv1d over time followed by SiLU.
//   x: [T, C]; w: [C, K] (HF conv1d.weight [C, 1, K]: w[c][K-1] multiplies the current
//   input); state: [K-1, C], the K-1 inputs before x[0], oldest first (zeros at the start
//   of a sequence); it is replaced by the last K-1 inputs. out: [T, C] (may not alias x).
//   out[t][c] = silu(sum_i w[c][i] * in[t - (K-1) + i][c]) over the state-prefixed input.
template <typename T>
void causal_conv1d_silu(const T* x, int64_t n_tokens, int64_t channels, const T* w, int64_t kernel,
                        T* state, T* out);

// (b) x <- x / sqrt(sum(x^2) + eps) over n values (HF/FLA l2norm, eps 1e-6).
template <typename T>
void l2_normalize(T* x, int64_t n, double eps = 1e-6);

// L2-normalises every q and k head (dk values each) and multiplies q by 1/sqrt(dk).
// q, k: [T, Hk, dk], in place.
template <typename T>
void prepare_qk(const GdnDims& d, int64_t n_tokens, T* q, T* k);

// g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b), per token and value head.
// a, b: [T, Hv]; A_log, dt_bias: [Hv]; g, beta: [T, Hv]. softplus as torch (x > 20 -> x).
template <typename T>
void gdn_gates(const GdnDims& d, int64_t n_tokens, const T* a, const T* b, const T* a_log,
               const T* dt_bias, T* g, T* beta);

// (c) One token of the recurrence for all value heads: q, k [Hk, dk] (prepared), v [Hv, dv],
// g, beta [Hv]; S [Hv, dk, dv] updated in place; o [Hv, dv].
template <typename T>
void gdn_recurrent_step(const GdnDims& d, const T* q, const T* k, const T* v, const T* g,
                        const T* beta, T* state, T* o);

// The recurrence over n_tokens tokens (decode path, or the oracle for the chunked form).
template <typename T>
void gdn_recurrent(const GdnDims& d, int64_t n_tokens, const T* q, const T* k, const T* v,
                   const T* g, const T* beta, T* state, T* o);

// (d) Chunked (parallel) form, chunks of `chunk` tokens (64 in HF/FLA/llama.cpp); the last
// chunk may be shorter (no padding needed). Same inputs, outputs and state update as
// gdn_recurrent. Per chunk with cumulative log-decay G_i (from the chunk start) and S0:
//   A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j) for j < i;  (I + A) U = beta v,
//   (I + A) W = beta exp(G) k;  u = U - W S0;
//   o_i = exp(G_i) S0^T q_i + sum_{j<=i} (q_i . k_j) exp(G_i - G_j) u_j;
//   S  = exp(G_last) S0 + sum_j exp(G_last - G_j) k_j u_j^T.
// Work is linear in n_tokens (chunk^2 per chunk).
template <typename T>
void gdn_chunked(const GdnDims& d, int64_t n_tokens, const T* q, const T* k, const T* v, const T* g,
                 const T* beta, T* state, T* o, int64_t chunk = 64);

// (e) Gated RMSNorm of the core output, per value head over dv: y = x / rms(x) * w * silu(z)
// (plain weight, not 1 + w; norm first, then gate). x, z, y: [T, Hv, dv]; w: [dv]. y may alias x.
template <typename T>
void gated_rms_norm(const GdnDims& d, int64_t n_tokens, const T* x, const T* z, const T* w,
                    double eps, T* y);

}  // namespace hearth::ops::ref

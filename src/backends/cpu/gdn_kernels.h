// The Gated DeltaNet recurrence's kernels shared by the plain build (cpu_gdn.cpp) and
// the instruction-set builds (gdn_x86.cpp, gdn_neon.cpp, which compile the same code
// for their vectors, and the register tiles of gdn_tiles.inc): the head task, the
// recurrent step for single tokens, the chunked form (chunks of kChunk tokens) and the
// data the tiles share. Everything is f32 with sums in the order written (no fused
// multiply-adds), so every build gives the plain one's bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hearth::cpu::gdn {

constexpr int64_t kChunk = 64;

// One value head of one sequence: its slices of the prepared inputs and its state.
struct HeadTask {
  const float* q;  // [n, row] the head's normalised and scaled queries
  const float* k;
  const float* v;  // [n, v_row]
  const float* g;  // [n, hv] (hv: the stride)
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

// ---- The chunked form on register tiles (the SIMD back-ends) ----
//
// chunked_head with the same operations on the same values in the same order for every
// output value, arranged as small matrix products on register tiles: R rows times NC
// vectors of lanes, each tile summing its products j = 0, 1, ... (or x = 0, 1, ...) in
// the order chunked_head does, with separate multiplies and adds (no fused
// multiply-adds), so the bits equal chunked_head<false>'s (the reference-kernel
// back-end runs it; tests compare the bits). Each exp(G_i - G_j) is computed once (the
// same argument, so the same value) for A, the intra-chunk weights and the state update.
//
// A task is one value head and one slice [y0, y1) of its d_v columns: the state's
// columns evolve independently given q, k, g and beta, so the S-dependent work (U, u, the
// outputs, the state update) splits over slices, while the slice-independent parts (A,
// the q.k weights, W) are computed by every slice of the head.

// The tiles' loops over rows and vectors must unroll completely: their accumulators
// then live in registers (GCC's own limits leave larger tiles on the stack).
#if defined(__clang__)
#define HEARTH_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define HEARTH_UNROLL _Pragma("GCC unroll 16")
#else
#define HEARTH_UNROLL
#endif

// The vector types pass through inline helpers only (inlined into the kernels compiled
// for their instruction sets), so GCC's note on their ABI without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// The chunk's data shared by the tile kernels.
struct Chunk {
  const HeadTask* t;
  int64_t c0, L;
  const float* D;   // [L, kChunk] exp(G_i - G_j), j <= i
  const float* KT;  // [dk, kChunk] the chunk's keys, transposed
  float* Sd;        // [L, kChunk] dot products
  float* A;         // [L, kChunk]
  float* Wq;        // [L, kChunk] (q_i . k_j) exp(G_i - G_j), j <= i
  float* U;         // [L, dv] -> u (the task's columns)
  float* W;         // [L, dk]
  float* KE;        // [dk, kChunk] exp(G_last - G_j) k_j[x]
  const float* eg;  // [L]
  const float* q(int64_t i) const { return t->q + (c0 + i) * t->row; }
  const float* k(int64_t i) const { return t->k + (c0 + i) * t->row; }
};

// The scratch floats of chunked_head_tiled (gdn_tiles.inc).
inline size_t tiled_scratch_floats(int64_t dk, int64_t dv) {
  return static_cast<size_t>(2 * kChunk + 4 * kChunk * kChunk + 2 * dk * kChunk + kChunk * dk + kChunk * dv +
                             dk * dv);
}

}  // namespace hearth::cpu::gdn

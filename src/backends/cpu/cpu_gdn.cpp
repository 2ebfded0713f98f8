// CpuBackend operations of Gated DeltaNet layers (Qwen3.5, Qwen3-Next): the causal
// conv with its state, the gated delta rule (recurrent step for single tokens, the
// chunked form, chunks of 64, for prompts: linear in their length), the gated RMSNorm
// and the sigmoid gate. The plain double-precision oracle is ops/gated_deltanet_ref.h;
// tests/unit/backend_gdn_test.cpp compares these with it.
//
// Work split: the q/k normalisation and the gates are computed once per token and
// key/value head (parallel over tokens); the recurrence runs one task per (sequence,
// value head, slice of d_v columns: prompts only, see gdn_slices), each with its own
// part of the state, so tasks never share memory they write. Everything is f32 with
// sums in the order written (no fused multiply-adds); the SIMD prompt kernel
// (chunked_head_tiled: register tiles, AVX2 or AVX-512 at run time) gives the plain
// chunked_head's bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/exp_avx512.h"
#include "backends/cpu/ggml_order.h"
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

// (Used by the x86 tiles only, hence maybe unused elsewhere.)
[[maybe_unused]] size_t tiled_scratch_floats(int64_t dk, int64_t dv) {
  return static_cast<size_t>(2 * kChunk + 4 * kChunk * kChunk + 2 * dk * kChunk + kChunk * dk + kChunk * dv +
                             dk * dv);
}

#if defined(__x86_64__)
typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

#define HEARTH_TGT HEARTH_SIMD
#define HEARTH_NS gdn_avx2
#define HEARTH_GDN_V v8f
#define HEARTH_GDN_SET1(x) reinterpret_cast<v8f>(_mm256_set1_ps(x))
#define HEARTH_GDN_TILE_ROWS 4
#define HEARTH_GDN_TILE_COLS 2
#define HEARTH_GDN_SOLVE_ROWS 4
#define HEARTH_GDN_OUT_ROWS 2
#define HEARTH_GDN_STATE_ROWS 4
#include "backends/cpu/gdn_tiles.inc"

#define HEARTH_TGT HEARTH_AVX512
#define HEARTH_NS gdn_avx512
#define HEARTH_GDN_V v16f
#define HEARTH_GDN_SET1(x) reinterpret_cast<v16f>(_mm512_set1_ps(x))
#define HEARTH_GDN_TILE_ROWS 4
#define HEARTH_GDN_TILE_COLS 4
#define HEARTH_GDN_SOLVE_ROWS 8
#define HEARTH_GDN_OUT_ROWS 4
#define HEARTH_GDN_STATE_ROWS 8
#include "backends/cpu/gdn_tiles.inc"

HEARTH_SIMD __attribute__((flatten)) void chunked_head_avx2(const HeadTask& t, int64_t y0, int64_t y1,
                                                             std::vector<float>& buf) {
  gdn_avx2::chunked_head_tiled(t, y0, y1, buf);
}
HEARTH_AVX512 __attribute__((flatten)) void chunked_head_avx512(const HeadTask& t, int64_t y0, int64_t y1,
                                                                std::vector<float>& buf) {
  gdn_avx512::chunked_head_tiled(t, y0, y1, buf);
}
#else
// No SIMD back-end here (simd_ok_ is false): never called.
void chunked_head_avx2(const HeadTask& t, int64_t, int64_t, std::vector<float>& buf) { chunked_head<false>(t, buf); }
void chunked_head_avx512(const HeadTask& t, int64_t, int64_t, std::vector<float>& buf) { chunked_head<false>(t, buf); }
#endif

HEARTH_SIMD __attribute__((flatten)) void recurrent_head_simd(const HeadTask& t, std::vector<float>& tmp) {
  recurrent_head<true>(t, tmp);
}

// silu(x) = x / (1 + exp(-x)) in place over a row, with ggml's vectorised exp
// (ggml_order::exp_approx, what llama.cpp's SiLU uses); the SIMD forms give its bits
// (exp8 / exp16 are its operations lane by lane; the rest are single IEEE operations).
inline float silu_approx(float x) { return x / (1.0f + ggml_order::exp_approx(-x)); }
using SiluRowFn = void (*)(float*, int64_t);
void silu_row_plain(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = silu_approx(x[i]);
}
#if defined(__x86_64__)
// exp_approx on 8 AVX2 lanes, the operations of exp16 (exp_avx512.h); false when a
// lane's exponent leaves [-126, 127] (the caller then runs the scalar code).
HEARTH_SIMD inline bool exp8(__m256 x, __m256& out) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift), shift);
  const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_GE_OQ),
                                  _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
  if (_mm256_movemask_ps(ok) != 0xFF) return false;
  const __m256 r =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 hi =
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), r, _mm256_set1_ps(0x1.573e2ep-5f)), r2,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), r, _mm256_set1_ps(0x1.fffdb6p-2f)));
  const __m256 p = _mm256_fmadd_ps(hi, r2, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_cvttps_epi32(n);
  const __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  out = _mm256_mul_ps(p, pow2);
  return true;
}
HEARTH_SIMD void silu_row_avx2(float* x, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 e;
    if (exp8(_mm256_xor_ps(v, sign), e)) {
      _mm256_storeu_ps(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
      continue;
    }
    for (int64_t k = i; k < i + 8; ++k) x[k] = silu_approx(x[k]);
  }
  for (; i < n; ++i) x[i] = silu_approx(x[i]);
}
HEARTH_AVX512 void silu_row_avx512(float* x, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 e;
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
    if (exp16(neg, e)) {
      _mm512_storeu_ps(x + i, _mm512_div_ps(v, _mm512_add_ps(one, e)));
      continue;
    }
    for (int64_t k = i; k < i + 16; ++k) x[k] = silu_approx(x[k]);
  }
  for (; i < n; ++i) x[i] = silu_approx(x[i]);
}
bool avx512_ok() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512vl && f.avx512bw;
}
#else
void silu_row_avx2(float* x, int64_t n) { silu_row_plain(x, n); }
void silu_row_avx512(float* x, int64_t n) { silu_row_plain(x, n); }
bool avx512_ok() { return false; }
#endif

// Subnormal floats flushed to zero (inputs and results) while a prompt task runs, the
// caller's mode restored after. The chunk's decays exp(G_i - G_j) and the products
// with them fall below 2^-126 whenever a head decays fast; on Intel cores every
// operation on such a value takes a microcode assist, many times the operation's cost.
// The plain and the SIMD kernels both run under it (the same bits); values that small
// are far below the tests' tolerances against the double-precision reference.
struct FlushSubnormals {
#if defined(__x86_64__)
  unsigned saved = _mm_getcsr();
  FlushSubnormals() { _mm_setcsr(saved | 0x8040); }  // FTZ | DAZ
  ~FlushSubnormals() { _mm_setcsr(saved); }
#else
  FlushSubnormals() = default;
#endif
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;
};

// How many d_v slices each prompt head's task is split into: the fewest (rounds of tasks
// over the threads + 1) times one task's work, the slice-independent part (the dot
// products and W, about 1.5 L^2 dk per chunk, done by every slice) plus its share of the
// rest (L^2 + 3 L dk per column). The + 1 stands for the tail (threads start and run at
// different speeds): on the 16-core Xeon, 32 heads run faster as 64 half-heads, 8
// threads faster with whole heads. Slices stay multiples of 16 columns.
int64_t gdn_slices(int64_t prompt_heads, int64_t threads, int64_t dk, int64_t dv) {
  if (prompt_heads <= 0 || threads <= 1) return 1;
  const double L = static_cast<double>(kChunk);
  const double shared = 1.5 * L * L * static_cast<double>(dk);
  const double per_col = L * L + 3.0 * L * static_cast<double>(dk);
  int64_t best = 1;
  double best_cost = 0.0;
  for (int64_t s = 1; s <= 8; s *= 2) {
    if (dv % (16 * s) != 0) break;
    const double rounds = static_cast<double>((prompt_heads * s + threads - 1) / threads + 1);
    const double cost = rounds * (shared + per_col * static_cast<double>(dv) / static_cast<double>(s));
    if (s == 1 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
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
  const SiluRowFn silu_row = !simd_ok_ ? silu_row_plain : avx512_ok() ? silu_row_avx512 : silu_row_avx2;
  // One pass over channel ranges, every sequence inside (a decode step of many
  // sequences is one parallel call, not one per sequence).
  pool_.parallel_for(channels, 64, [&](int64_t begin, int64_t end, int) {
    const int64_t nc = end - begin;
    std::vector<float> taps(static_cast<size_t>(K * nc));  // [K, nc] the range's weights by tap
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t i = 0; i < K; ++i) taps[i * nc + c] = wt[(begin + c) * K + i];
    std::vector<const float*> rows(static_cast<size_t>(K));
    for (int64_t s = 0; s < n_seqs; ++s) {
      const ops::GdnSeq& q = seqs[s];
      const float* xs = x + q.first_row * channels;
      float* os = out + q.first_row * channels;
      const int64_t n = q.n_tokens;
      // Row r of the state-prefixed sequence: r < hist from the state, else x.
      auto in_row = [&](int64_t r) { return r < hist ? q.conv_state + r * channels : xs + (r - hist) * channels; };
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < K; ++i) rows[i] = in_row(t + i) + begin;
        float* o = os + t * channels + begin;
        // acc = w_0 in_0 + w_1 in_1 + ... from 0, tap by tap (the same sums per channel).
        std::fill(o, o + nc, 0.0f);
        for (int64_t i = 0; i < K; ++i) {
          const float* tw = taps.data() + i * nc;
          const float* in = rows[i];
          for (int64_t c = 0; c < nc; ++c) o[c] += tw[c] * in[c];
        }
        silu_row(o, nc);
      }
      // The new state: the last hist rows of the prefixed input (read before written:
      // row r of the new state comes from prefixed row n + r >= r).
      for (int64_t r = 0; r < hist; ++r) {
        const float* src = in_row(n + r);
        for (int64_t c = begin; c < end; ++c) q.conv_state[r * channels + c] = src[c];
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
  // Normalised q and k, v, and the gates, head by head ([head, token, d] and [head,
  // token]): a task's rows are then contiguous (the token-major input puts a head's
  // rows a whole conv row apart, which the prefetchers do not follow).
  gdn_qk_.resize(static_cast<size_t>(n * (row + sh.value_dim())));
  gdn_gates_.resize(static_cast<size_t>(2 * n * hv));
  float* qh = gdn_qk_.data();  // [hk, n, dk]
  float* kh = qh + n * kd;     // [hk, n, dk]
  float* vh = kh + n * kd;     // [hv, n, dv]
  float* g = gdn_gates_.data();  // [hv, n]
  float* beta = g + n * hv;      // [hv, n]
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  {
    const OpScope prepare_timer(op_times_.get(), "gdn q/k norm, gates");
    pool_.parallel_for(n, 4, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t hh = 0; hh < 2 * hk; ++hh) {  // q heads then k heads
          const float* src = qkv + t * C + hh * dk;
          float* dst = hh < hk ? qh + (hh * n + t) * dk : kh + ((hh - hk) * n + t) * dk;
          float ss = 0.0f;
          for (int64_t i = 0; i < dk; ++i) ss += src[i] * src[i];
          const float inv = 1.0f / std::sqrt(ss + sh.l2_eps) * (hh < hk ? scale : 1.0f);
          for (int64_t i = 0; i < dk; ++i) dst[i] = src[i] * inv;
        }
        for (int64_t h = 0; h < hv; ++h) {
          const float* src = qkv + t * C + 2 * kd + h * dv;
          std::copy(src, src + dv, vh + (h * n + t) * dv);
          g[h * n + t] = A[h] * softplus(a[t * hv + h] + dt[h]);
          beta[h * n + t] = sigmoid(b[t * hv + h]);
        }
      }
    });
  }
  const int64_t ratio = hv / hk;
  const bool simd = simd_ok_;
  const bool avx512 = simd && avx512_ok();
  int64_t prompt_heads = 0;
  for (int64_t s = 0; s < n_seqs; ++s) prompt_heads += seqs[s].n_tokens > 1 ? hv : 0;
  const int64_t slices = simd ? gdn_slices(prompt_heads, pool_.n_threads(), dk, dv) : 1;
  const int64_t per_seq = hv * slices;
  gdn_scratch_.resize(static_cast<size_t>(pool_.n_threads()));
  const OpScope heads_timer(op_times_.get(), "gdn heads");
  pool_.parallel_for(n_seqs * per_seq, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t task = begin; task < end; ++task) {
      const ops::GdnSeq& sq = seqs[task / per_seq];
      const int64_t h = task % per_seq / slices, slice = task % slices;
      if (sq.n_tokens <= 0 || (sq.n_tokens == 1 && slice != 0)) continue;
      const int64_t khead = sh.v_tiled ? h % hk : h / ratio;
      const int64_t r0 = sq.first_row;
      const HeadTask t{qh + (khead * n + r0) * dk,
                       kh + (khead * n + r0) * dk,
                       vh + (h * n + r0) * dv,
                       g + h * n + r0,
                       beta + h * n + r0,
                       sq.ssm_state + h * dk * dv,
                       o + r0 * sh.value_dim() + h * dv,
                       sq.n_tokens, dk, dv, sh.value_dim(), 1, dk, dv};
      std::vector<float>& buf = gdn_scratch_[static_cast<size_t>(thread)];
      if (sq.n_tokens == 1) {
        if (simd) recurrent_head_simd(t, buf); else recurrent_head<false>(t, buf);
      } else if (!simd) {
        [[maybe_unused]] const FlushSubnormals ftz;
        chunked_head<false>(t, buf);
      } else {
        [[maybe_unused]] const FlushSubnormals ftz;
        const int64_t y0 = dv * slice / slices, y1 = dv * (slice + 1) / slices;
        if (avx512) chunked_head_avx512(t, y0, y1, buf); else chunked_head_avx2(t, y0, y1, buf);
      }
    }
  });
}

void CpuBackend::gated_rms_norm(float* x, const float* z, const ops::WeightView& w, int64_t n_rows, int64_t n,
                                float eps, int64_t /*rows_per_token*/) {
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

// Reference Gated DeltaNet math; see gated_deltanet_ref.h. Sums are accumulated in
// double whatever T is; values and the recurrent state are stored as T.
#include "ops/gated_deltanet_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hearth::ops::ref {

namespace {

double silu(double x) { return x / (1.0 + std::exp(-x)); }

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

}  // namespace

template <typename T>
void causal_conv1d_silu(const T* x, int64_t n_tokens, int64_t channels, const T* w, int64_t kernel,
                        T* state, T* out) {
  const int64_t hist = kernel - 1;
  // Input row r of the state-prefixed sequence: r < hist is state[r], else x[r - hist].
  auto in = [&](int64_t r, int64_t c) -> double {
    return r < hist ? static_cast<double>(state[r * channels + c])
                    : static_cast<double>(x[(r - hist) * channels + c]);
  };
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < channels; ++c) {
      double acc = 0.0;
      for (int64_t i = 0; i < kernel; ++i)
        acc += static_cast<double>(w[c * kernel + i]) * in(t + i, c);
      out[t * channels + c] = static_cast<T>(silu(acc));
    }
  }
  // New state: the last hist rows of the prefixed sequence (length hist + n_tokens).
  std::vector<T> next(static_cast<size_t>(hist * channels));
  for (int64_t r = 0; r < hist; ++r)
    for (int64_t c = 0; c < channels; ++c)
      next[r * channels + c] = static_cast<T>(in(n_tokens + r, c));
  for (size_t i = 0; i < next.size(); ++i) state[i] = next[i];
}

template <typename T>
void l2_normalize(T* x, int64_t n, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * inv);
}

template <typename T>
void prepare_qk(const GdnDims& d, int64_t n_tokens, T* q, T* k) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.d_k));
  for (int64_t i = 0; i < n_tokens * d.n_k_heads; ++i) {
    l2_normalize(q + i * d.d_k, d.d_k);
    l2_normalize(k + i * d.d_k, d.d_k);
    for (int64_t j = 0; j < d.d_k; ++j) q[i * d.d_k + j] = static_cast<T>(q[i * d.d_k + j] * scale);
  }
}

template <typename T>
void gdn_gates(const GdnDims& d, int64_t n_tokens, const T* a, const T* b, const T* a_log,
               const T* dt_bias, T* g, T* beta) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < d.n_v_heads; ++h) {
      const int64_t i = t * d.n_v_heads + h;
      g[i] = static_cast<T>(-std::exp(static_cast<double>(a_log[h])) *
                            softplus(static_cast<double>(a[i]) + static_cast<double>(dt_bias[h])));
      beta[i] = static_cast<T>(1.0 / (1.0 + std::exp(-static_cast<double>(b[i]))));
    }
  }
}

template <typename T>
void gdn_recurrent_step(const GdnDims& d, const T* q, const T* k, const T* v, const T* g,
                        const T* beta, T* state, T* o) {
  const int64_t dk = d.d_k, dv = d.d_v;
  std::vector<double> delta(static_cast<size_t>(dv));
  for (int64_t h = 0; h < d.n_v_heads; ++h) {
    const T* qh = q + d.k_head_of(h) * dk;
    const T* kh = k + d.k_head_of(h) * dk;
    const T* vh = v + h * dv;
    T* S = state + h * dk * dv;
    const double decay = std::exp(static_cast<double>(g[h]));
    for (int64_t i = 0; i < dk * dv; ++i) S[i] = static_cast<T>(S[i] * decay);
    // delta = beta (v - S^T k): the part of v that the decayed state does not predict.
    for (int64_t j = 0; j < dv; ++j) {
      double mem = 0.0;
      for (int64_t i = 0; i < dk; ++i) mem += static_cast<double>(S[i * dv + j]) * kh[i];
      delta[j] = static_cast<double>(beta[h]) * (static_cast<double>(vh[j]) - mem);
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dv; ++j)
        S[i * dv + j] = static_cast<T>(S[i * dv + j] + kh[i] * delta[j]);
    for (int64_t j = 0; j < dv; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < dk; ++i) acc += static_cast<double>(S[i * dv + j]) * qh[i];
      o[h * dv + j] = static_cast<T>(acc);
    }
  }
}

template <typename T>
void gdn_recurrent(const GdnDims& d, int64_t n_tokens, const T* q, const T* k, const T* v,
                   const T* g, const T* beta, T* state, T* o) {
  const int64_t qk_row = d.key_dim(), v_row = d.value_dim(), hv = d.n_v_heads;
  for (int64_t t = 0; t < n_tokens; ++t)
    gdn_recurrent_step(d, q + t * qk_row, k + t * qk_row, v + t * v_row, g + t * hv, beta + t * hv,
                       state, o + t * v_row);
}

template <typename T>
void gdn_chunked(const GdnDims& d, int64_t n_tokens, const T* q, const T* k, const T* v, const T* g,
                 const T* beta, T* state, T* o, int64_t chunk) {
  const int64_t dk = d.d_k, dv = d.d_v, hv = d.n_v_heads;
  const int64_t qk_row = d.key_dim(), v_row = d.value_dim();
  std::vector<double> G, A, U, W, S0, u;
  for (int64_t h = 0; h < hv; ++h) {
    const int64_t kh = d.k_head_of(h);
    auto Q = [&](int64_t t, int64_t i) { return static_cast<double>(q[t * qk_row + kh * dk + i]); };
    auto K = [&](int64_t t, int64_t i) { return static_cast<double>(k[t * qk_row + kh * dk + i]); };
    auto V = [&](int64_t t, int64_t j) { return static_cast<double>(v[t * v_row + h * dv + j]); };
    T* S = state + h * dk * dv;
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
      const int64_t L = std::min(chunk, n_tokens - c0);
      // Cumulative log-decay from the chunk start (inclusive).
      G.assign(static_cast<size_t>(L), 0.0);
      double cum = 0.0;
      for (int64_t i = 0; i < L; ++i) G[i] = cum += static_cast<double>(g[(c0 + i) * hv + h]);
      auto kdot = [&](int64_t i, int64_t j, bool query) {
        double s = 0.0;
        for (int64_t x = 0; x < dk; ++x) s += (query ? Q(c0 + i, x) : K(c0 + i, x)) * K(c0 + j, x);
        return s;
      };
      // Strictly lower A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j).
      A.assign(static_cast<size_t>(L * L), 0.0);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < i; ++j)
          A[i * L + j] = static_cast<double>(beta[(c0 + i) * hv + h]) * kdot(i, j, false) *
                         std::exp(G[i] - G[j]);
      // Forward substitution for (I + A) U = beta v and (I + A) W = beta exp(G) k.
      U.assign(static_cast<size_t>(L * dv), 0.0);
      W.assign(static_cast<size_t>(L * dk), 0.0);
      for (int64_t i = 0; i < L; ++i) {
        const double bi = static_cast<double>(beta[(c0 + i) * hv + h]);
        for (int64_t j = 0; j < dv; ++j) U[i * dv + j] = bi * V(c0 + i, j);
        for (int64_t x = 0; x < dk; ++x) W[i * dk + x] = bi * std::exp(G[i]) * K(c0 + i, x);
        for (int64_t j = 0; j < i; ++j) {
          const double a = A[i * L + j];
          if (a == 0.0) continue;
          for (int64_t y = 0; y < dv; ++y) U[i * dv + y] -= a * U[j * dv + y];
          for (int64_t x = 0; x < dk; ++x) W[i * dk + x] -= a * W[j * dk + x];
        }
      }
      S0.assign(S, S + dk * dv);
      // u = U - W S0: the corrections written to the state.
      u.assign(static_cast<size_t>(L * dv), 0.0);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t y = 0; y < dv; ++y) {
          double s = U[i * dv + y];
          for (int64_t x = 0; x < dk; ++x) s -= W[i * dk + x] * S0[x * dv + y];
          u[i * dv + y] = s;
        }
      // Outputs: the decayed initial state read by q_i plus the causal intra-chunk part.
      for (int64_t i = 0; i < L; ++i) {
        const double ei = std::exp(G[i]);
        for (int64_t y = 0; y < dv; ++y) {
          double s = 0.0;
          for (int64_t x = 0; x < dk; ++x) s += Q(c0 + i, x) * S0[x * dv + y];
          s *= ei;
          o[(c0 + i) * v_row + h * dv + y] = static_cast<T>(s);
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double w = kdot(i, j, true) * std::exp(G[i] - G[j]);
          for (int64_t y = 0; y < dv; ++y) {
            T& out = o[(c0 + i) * v_row + h * dv + y];
            out = static_cast<T>(static_cast<double>(out) + w * u[j * dv + y]);
          }
        }
      }
      // State at the chunk end.
      const double glast = G[L - 1];
      for (int64_t x = 0; x < dk; ++x)
        for (int64_t y = 0; y < dv; ++y) {
          double s = std::exp(glast) * S0[x * dv + y];
          for (int64_t j = 0; j < L; ++j)
            s += std::exp(glast - G[j]) * K(c0 + j, x) * u[j * dv + y];
          S[x * dv + y] = static_cast<T>(s);
        }
    }
  }
}

template <typename T>
void gated_rms_norm(const GdnDims& d, int64_t n_tokens, const T* x, const T* z, const T* w,
                    double eps, T* y) {
  const int64_t dv = d.d_v;
  for (int64_t r = 0; r < n_tokens * d.n_v_heads; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < dv; ++j) ss += static_cast<double>(x[r * dv + j]) * x[r * dv + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dv) + eps);
    for (int64_t j = 0; j < dv; ++j)
      y[r * dv + j] =
          static_cast<T>(static_cast<double>(x[r * dv + j]) * inv * static_cast<double>(w[j]) *
                         silu(static_cast<double>(z[r * dv + j])));
  }
}

#define HEARTH_GDN_INSTANTIATE(T)                                                                 \
  template void causal_conv1d_silu<T>(const T*, int64_t, int64_t, const T*, int64_t, T*, T*);     \
  template void l2_normalize<T>(T*, int64_t, double);                                             \
  template void prepare_qk<T>(const GdnDims&, int64_t, T*, T*);                                   \
  template void gdn_gates<T>(const GdnDims&, int64_t, const T*, const T*, const T*, const T*, T*, \
                             T*);                                                                 \
  template void gdn_recurrent_step<T>(const GdnDims&, const T*, const T*, const T*, const T*,     \
                                      const T*, T*, T*);                                          \
  template void gdn_recurrent<T>(const GdnDims&, int64_t, const T*, const T*, const T*, const T*, \
                                 const T*, T*, T*);                                               \
  template void gdn_chunked<T>(const GdnDims&, int64_t, const T*, const T*, const T*, const T*,   \
                               const T*, T*, T*, int64_t);                                        \
  template void gated_rms_norm<T>(const GdnDims&, int64_t, const T*, const T*, const T*, double,  \
                                  T*);

HEARTH_GDN_INSTANTIATE(float)
HEARTH_GDN_INSTANTIATE(double)

#undef HEARTH_GDN_INSTANTIATE

}  // namespace hearth::ops::ref

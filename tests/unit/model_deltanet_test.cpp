// Reference Gated DeltaNet math (src/ops/gated_deltanet_ref.h):
//   - a hand-computed 1-head, 2-step delta-rule example (recurrent and chunked);
//   - the chunked (parallel) form equals the token-by-token recurrence, in double and in
//     float (fp32 state), for several chunk sizes, lengths that cross chunk borders, a
//     non-zero initial state and grouped value heads (Hv = 2 Hk);
//   - value head h reads key head h / (Hv / Hk);
//   - the causal conv carried across calls by its state equals one conv over the
//     concatenation; a hand-computed conv;
//   - gates (decay, beta) and the gated RMSNorm against their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/gated_deltanet_ref.h"

namespace {

using hearth::ops::ref::GdnDims;
namespace ref = hearth::ops::ref;

template <typename T>
double max_abs_diff(const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// Random inputs of a realistic shape: q, k prepared (unit norm, q scaled), v ~ N(0, 1),
// g = log-decay in [-1.5, 0] (with some tokens near 0: long memory), beta in (0, 1).
template <typename T>
struct Inputs {
  std::vector<T> q, k, v, g, beta, state;
};

template <typename T>
Inputs<T> random_inputs(const GdnDims& d, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  Inputs<T> in;
  in.q.resize(n * d.key_dim());
  in.k.resize(n * d.key_dim());
  in.v.resize(n * d.value_dim());
  in.g.resize(n * d.n_v_heads);
  in.beta.resize(n * d.n_v_heads);
  in.state.resize(d.state_size());
  for (auto& x : in.q) x = T(nd(rng));
  for (auto& x : in.k) x = T(nd(rng));
  for (auto& x : in.v) x = T(nd(rng));
  for (auto& x : in.g) x = T(ud(rng) < 0.3 ? -0.01 * ud(rng) : -1.5 * ud(rng));
  for (auto& x : in.beta) x = T(ud(rng));
  for (auto& x : in.state) x = T(0.5 * nd(rng));
  ref::prepare_qk(d, n, in.q.data(), in.k.data());
  return in;
}

TEST(Deltanet, HandComputedOneHeadTwoSteps) {
  // dk = dv = 2, one head. Step 1: k=(1,0), v=(1,2), beta=0.5, no decay, q=(1,0):
  //   S1 = k (beta v)^T = [[0.5, 1], [0, 0]],  o1 = S1^T q = (0.5, 1).
  // Step 2: k=(0.6,0.8), v=(2,0), beta=1, decay 0.5, q=(0,1):
  //   S <- 0.5 S1 = [[0.25, 0.5], [0, 0]]; S^T k = (0.15, 0.3); delta = (1.85, -0.3);
  //   S2 = S + k delta^T = [[1.36, 0.32], [1.48, -0.24]];  o2 = S2^T q = (1.48, -0.24).
  GdnDims d{1, 1, 2, 2, 4};
  const std::vector<double> q = {1, 0, 0, 1}, k = {1, 0, 0.6, 0.8}, v = {1, 2, 2, 0};
  const std::vector<double> g = {0.0, std::log(0.5)}, beta = {0.5, 1.0};
  const std::vector<double> want_o = {0.5, 1, 1.48, -0.24}, want_s = {1.36, 0.32, 1.48, -0.24};
  for (int chunked = 0; chunked < 2; ++chunked) {
    std::vector<double> s(4, 0.0), o(4, 0.0);
    if (chunked)
      ref::gdn_chunked(d, 2, q.data(), k.data(), v.data(), g.data(), beta.data(), s.data(),
                       o.data());
    else
      ref::gdn_recurrent(d, 2, q.data(), k.data(), v.data(), g.data(), beta.data(), s.data(),
                         o.data());
    EXPECT_LT(max_abs_diff(o, want_o), 1e-12) << "chunked=" << chunked;
    EXPECT_LT(max_abs_diff(s, want_s), 1e-12) << "chunked=" << chunked;
  }
}

// Chunked vs recurrent in double: the two forms are algebraically equal, so only double
// rounding separates them (measured ~1e-15); bound 1e-10.
TEST(Deltanet, ChunkedEqualsRecurrentDouble) {
  const GdnDims d{2, 4, 16, 12, 4};
  for (int64_t n : {1, 5, 63, 64, 65, 150}) {
    auto in = random_inputs<double>(d, n, 7 + uint32_t(n));
    std::vector<double> s_rec = in.state, o_rec(n * d.value_dim());
    ref::gdn_recurrent(d, n, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                       s_rec.data(), o_rec.data());
    for (int64_t chunk : {1, 16, 64}) {
      std::vector<double> s_ch = in.state, o_ch(n * d.value_dim());
      ref::gdn_chunked(d, n, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                       s_ch.data(), o_ch.data(), chunk);
      EXPECT_LT(max_abs_diff(o_ch, o_rec), 1e-10) << "n=" << n << " chunk=" << chunk;
      EXPECT_LT(max_abs_diff(s_ch, s_rec), 1e-10) << "n=" << n << " chunk=" << chunk;
    }
  }
}

// Chunked vs recurrent with float storage (fp32 state, as the engine keeps it). Outputs
// and state entries are O(1); each form rounds its stored values to float at different
// points (per token vs per chunk), ~6e-8 relative each; over 200 tokens the difference
// stays below 1e-5 (measured 6e-8: one float ulp).
TEST(Deltanet, ChunkedEqualsRecurrentFloat) {
  const GdnDims d{2, 4, 16, 12, 4};
  const int64_t n = 200;
  auto in = random_inputs<float>(d, n, 3);
  std::vector<float> s_rec = in.state, o_rec(n * d.value_dim());
  ref::gdn_recurrent(d, n, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                     s_rec.data(), o_rec.data());
  std::vector<float> s_ch = in.state, o_ch(n * d.value_dim());
  ref::gdn_chunked(d, n, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                   s_ch.data(), o_ch.data(), 64);
  EXPECT_LT(max_abs_diff(o_ch, o_rec), 1e-5);
  EXPECT_LT(max_abs_diff(s_ch, s_rec), 1e-5);
}

// Prefill in chunks then decode token by token (the engine's split) equals one pass.
TEST(Deltanet, ChunkedPrefillThenRecurrentDecode) {
  const GdnDims d{1, 3, 8, 8, 4};
  const int64_t n = 90, split = 70;
  auto in = random_inputs<double>(d, n, 11);
  std::vector<double> s_all = in.state, o_all(n * d.value_dim());
  ref::gdn_recurrent(d, n, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                     s_all.data(), o_all.data());
  std::vector<double> s = in.state, o(n * d.value_dim());
  ref::gdn_chunked(d, split, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                   s.data(), o.data());
  for (int64_t t = split; t < n; ++t)
    ref::gdn_recurrent_step(d, &in.q[t * d.key_dim()], &in.k[t * d.key_dim()],
                            &in.v[t * d.value_dim()], &in.g[t * d.n_v_heads],
                            &in.beta[t * d.n_v_heads], s.data(), &o[t * d.value_dim()]);
  EXPECT_LT(max_abs_diff(o, o_all), 1e-10);
  EXPECT_LT(max_abs_diff(s, s_all), 1e-10);
}

// Grouped value heads: with Hk = 2, Hv = 4, value heads 0,1 read key head 0 and 2,3 read
// key head 1. Each value head run alone (Hk = Hv = 1) with its key head must match.
TEST(Deltanet, ValueHeadsShareKeyHeadsGrouped) {
  const GdnDims d{2, 4, 8, 6, 4};
  EXPECT_EQ(d.k_head_of(0), 0);
  EXPECT_EQ(d.k_head_of(1), 0);
  EXPECT_EQ(d.k_head_of(2), 1);
  EXPECT_EQ(d.k_head_of(3), 1);
  const int64_t n = 20;
  auto in = random_inputs<double>(d, n, 5);
  std::vector<double> s = in.state, o(n * d.value_dim());
  ref::gdn_chunked(d, n, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                   s.data(), o.data(), 8);
  const GdnDims one{1, 1, d.d_k, d.d_v, 4};
  for (int64_t h = 0; h < d.n_v_heads; ++h) {
    const int64_t kh = h / 2;
    std::vector<double> q1, k1, v1, g1, b1, s1, o1(n * d.d_v);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < d.d_k; ++i) {
        q1.push_back(in.q[t * d.key_dim() + kh * d.d_k + i]);
        k1.push_back(in.k[t * d.key_dim() + kh * d.d_k + i]);
      }
      for (int64_t j = 0; j < d.d_v; ++j) v1.push_back(in.v[t * d.value_dim() + h * d.d_v + j]);
      g1.push_back(in.g[t * d.n_v_heads + h]);
      b1.push_back(in.beta[t * d.n_v_heads + h]);
    }
    s1.assign(in.state.begin() + h * d.d_k * d.d_v, in.state.begin() + (h + 1) * d.d_k * d.d_v);
    ref::gdn_recurrent(one, n, q1.data(), k1.data(), v1.data(), g1.data(), b1.data(), s1.data(),
                       o1.data());
    double m = 0.0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < d.d_v; ++j)
        m = std::max(m, std::abs(o1[t * d.d_v + j] - o[t * d.value_dim() + h * d.d_v + j]));
    EXPECT_LT(m, 1e-10) << "value head " << h;
  }
}

TEST(Deltanet, ConvHandComputed) {
  // One channel, kernel 4, w = (0.1, 0.2, 0.3, 0.4): w[3] multiplies the current input.
  // x = (1, 2, 3) from a zero state: pre-activations 0.4, 1.1, 2.0.
  const std::vector<double> w = {0.1, 0.2, 0.3, 0.4}, x = {1, 2, 3};
  std::vector<double> state(3, 0.0), out(3);
  ref::causal_conv1d_silu(x.data(), 3, 1, w.data(), 4, state.data(), out.data());
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(out[0], silu(0.4), 1e-15);
  EXPECT_NEAR(out[1], silu(1.1), 1e-15);
  EXPECT_NEAR(out[2], silu(2.0), 1e-15);
  EXPECT_EQ(state, (std::vector<double>{1, 2, 3}));  // the last K-1 inputs, oldest first
  // One more token, 4: pre-activation 0.1*1 + 0.2*2 + 0.3*3 + 0.4*4 = 3.0.
  const double x4 = 4;
  double o4;
  ref::causal_conv1d_silu(&x4, 1, 1, w.data(), 4, state.data(), &o4);
  EXPECT_NEAR(o4, silu(3.0), 1e-15);
  EXPECT_EQ(state, (std::vector<double>{2, 3, 4}));
}

// The conv carried across calls (splits 0|1|..., 2, 5, 1 token at a time) equals one call
// over the whole sequence: the same products in the same order, so bit-identical.
TEST(Deltanet, ConvWithStateEqualsConvOverConcatenation) {
  const int64_t C = 7, K = 4, n = 23;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(n * C), w(C * K);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  std::vector<float> s_all((K - 1) * C, 0.f), o_all(n * C);
  ref::causal_conv1d_silu(x.data(), n, C, w.data(), K, s_all.data(), o_all.data());
  for (const std::vector<int64_t>& parts : {std::vector<int64_t>{1, 22},
                                            {2, 5, 16},
                                            std::vector<int64_t>(23, 1),
                                            std::vector<int64_t>{0, 10, 0, 13}}) {
    std::vector<float> s((K - 1) * C, 0.f), o(n * C);
    int64_t t0 = 0;
    for (int64_t len : parts) {
      ref::causal_conv1d_silu(x.data() + t0 * C, len, C, w.data(), K, s.data(), o.data() + t0 * C);
      t0 += len;
    }
    ASSERT_EQ(t0, n);
    EXPECT_EQ(o, o_all);
    EXPECT_EQ(s, s_all);
  }
}

TEST(Deltanet, GatesAndPrepare) {
  const GdnDims d{1, 2, 4, 3, 4};
  const std::vector<double> a = {0.3, 25.0}, b = {0.0, -2.0}, a_log = {std::log(2.0), 0.0},
                            dt = {0.2, -1.0};
  std::vector<double> g(2), beta(2);
  ref::gdn_gates(d, 1, a.data(), b.data(), a_log.data(), dt.data(), g.data(), beta.data());
  EXPECT_NEAR(g[0], -2.0 * std::log1p(std::exp(0.5)), 1e-14);
  EXPECT_NEAR(g[1], -24.0, 1e-14);  // softplus(24) taken as 24 (torch threshold 20)
  EXPECT_NEAR(beta[0], 0.5, 1e-15);
  EXPECT_NEAR(beta[1], 1.0 / (1.0 + std::exp(2.0)), 1e-15);
  std::vector<double> q = {3, 0, 4, 0}, k = {0, 0, 0, 2};
  ref::prepare_qk(d, 1, q.data(), k.data());
  const double nq = std::sqrt(25.0 + 1e-6), nk = std::sqrt(4.0 + 1e-6);
  EXPECT_NEAR(q[0], 3 / nq / 2, 1e-15);  // 1/sqrt(dk) = 1/2
  EXPECT_NEAR(q[2], 4 / nq / 2, 1e-15);
  EXPECT_NEAR(k[3], 2 / nk, 1e-15);
}

TEST(Deltanet, GatedRmsNorm) {
  const GdnDims d{1, 2, 4, 2, 4};
  const std::vector<double> x = {3, 4, 1, -1}, z = {0, 1, 2, -3}, w = {0.5, 2};
  std::vector<double> y(4);
  ref::gated_rms_norm(d, 1, x.data(), z.data(), w.data(), 1e-6, y.data());
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  const double r0 = std::sqrt(12.5 + 1e-6), r1 = std::sqrt(1.0 + 1e-6);  // per head: mean(x^2)
  EXPECT_NEAR(y[0], 3 / r0 * 0.5 * silu(0), 1e-15);
  EXPECT_NEAR(y[1], 4 / r0 * 2 * silu(1), 1e-15);
  EXPECT_NEAR(y[2], 1 / r1 * 0.5 * silu(2), 1e-15);
  EXPECT_NEAR(y[3], -1 / r1 * 2 * silu(-3), 1e-15);
}

}  // namespace

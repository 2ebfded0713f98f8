// The CPU back-end's Gated DeltaNet operations against the double-precision reference
// (ops/gated_deltanet_ref.h): the conv with its state, the gated delta rule for
// batches of sequences at different lengths (single decode tokens, chunked prompts
// that cross the 64-token chunk border), grouped and tiled value-head orders, the
// gated RMSNorm and the sigmoid gate; the SIMD and plain builds; and the chunked form
// against token-by-token decoding through the same operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "ops/gated_deltanet_ref.h"

namespace {

using hearth::GgmlType;
using hearth::cpu::CpuBackend;
namespace ops = hearth::ops;
namespace ref = hearth::ops::ref;

std::vector<float> randv(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

ops::WeightView f32_view(const std::vector<float>& v, int64_t cols, int64_t rows, const char* name) {
  ops::WeightView w;
  w.name = name;
  w.type = GgmlType::F32;
  w.data = v.data();
  w.n_cols = cols;
  w.n_rows = rows;
  w.row_bytes = static_cast<uint64_t>(cols) * 4;
  return w;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Max |a - b| relative to max |b| (at least 1).
double rel_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m / std::max(1.0, max_abs(b));
}

struct Case {
  ops::GdnShape sh;
  std::vector<int64_t> lens;
};

class GdnOps : public ::testing::TestWithParam<bool> {};  // param: reference (plain) kernels

void check_delta_rule(CpuBackend& be, const ops::GdnShape& sh, const std::vector<int64_t>& lens, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t C = sh.conv_channels(), kd = sh.key_dim(), vd = sh.value_dim(), hv = sh.n_v_heads;
  int64_t n = 0;
  for (int64_t l : lens) n += l;
  const auto qkv = randv(rng, static_cast<size_t>(n * C), -2.0f, 2.0f);
  const auto a = randv(rng, static_cast<size_t>(n * hv), -3.0f, 2.0f);
  const auto b = randv(rng, static_cast<size_t>(n * hv), -3.0f, 3.0f);
  std::vector<float> a_log = randv(rng, static_cast<size_t>(hv), -3.0f, 0.5f), ssm_a(hv);
  for (int64_t h = 0; h < hv; ++h) ssm_a[h] = -std::exp(a_log[h]);
  const auto dt = randv(rng, static_cast<size_t>(hv), -1.0f, 1.0f);
  const size_t S = static_cast<size_t>(sh.ssm_state_floats());
  std::vector<std::vector<float>> state;
  std::vector<ops::GdnSeq> seqs;
  int64_t row = 0;
  for (int64_t l : lens) {
    state.push_back(randv(rng, S, -0.5f, 0.5f));
    seqs.push_back({static_cast<int32_t>(row), static_cast<int32_t>(l), static_cast<int32_t>(seqs.size())});
    row += l;
  }
  // The states in slots of one array, in reverse order of the sequences (slot != index).
  std::vector<float> slots(S * seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].state_slot = static_cast<int32_t>(seqs.size() - 1 - i);
    std::copy(state[i].begin(), state[i].end(), slots.begin() + seqs[i].state_slot * S);
  }
  const auto state0 = state;
  std::vector<float> o(static_cast<size_t>(n * vd));
  be.gated_delta_net(qkv.data(), a.data(), b.data(), f32_view(ssm_a, hv, 1, "ssm_a"), f32_view(dt, hv, 1, "dt"), sh,
                     ops::GdnStates{nullptr, slots.data(), static_cast<int64_t>(S)}, seqs.data(),
                     static_cast<int64_t>(seqs.size()), o.data());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto from = slots.begin() + seqs[i].state_slot * S;
    std::copy(from, from + S, state[i].begin());
  }

  ref::GdnDims d{sh.n_k_heads, sh.n_v_heads, sh.d_k, sh.d_v, sh.conv_kernel, sh.v_tiled};
  std::vector<double> A_log(a_log.begin(), a_log.end()), DT(dt.begin(), dt.end());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t r0 = seqs[i].first_row, l = seqs[i].n_tokens;
    std::vector<double> q(l * kd), k(l * kd), v(l * vd), A(a.begin() + r0 * hv, a.begin() + (r0 + l) * hv),
        B(b.begin() + r0 * hv, b.begin() + (r0 + l) * hv), g(l * hv), beta(l * hv), out(l * vd),
        st(state0[i].begin(), state0[i].end());
    for (int64_t t = 0; t < l; ++t) {
      for (int64_t c = 0; c < kd; ++c) q[t * kd + c] = qkv[(r0 + t) * C + c];
      for (int64_t c = 0; c < kd; ++c) k[t * kd + c] = qkv[(r0 + t) * C + kd + c];
      for (int64_t c = 0; c < vd; ++c) v[t * vd + c] = qkv[(r0 + t) * C + 2 * kd + c];
    }
    ref::prepare_qk(d, l, q.data(), k.data());
    ref::gdn_gates(d, l, A.data(), B.data(), A_log.data(), DT.data(), g.data(), beta.data());
    ref::gdn_recurrent(d, l, q.data(), k.data(), v.data(), g.data(), beta.data(), st.data(), out.data());
    std::vector<float> got(o.begin() + r0 * vd, o.begin() + (r0 + l) * vd);
    EXPECT_LE(rel_diff(got, out), 2e-5) << "sequence " << i << " of " << l << " tokens, output";
    EXPECT_LE(rel_diff(state[i], st), 2e-5) << "sequence " << i << " of " << l << " tokens, state";
  }
}

TEST_P(GdnOps, DeltaRuleMatchesReferenceForMixedBatches) {
  CpuBackend be(2, GetParam());
  // Grouped (Qwen3.5 HF / Qwen3-Next) and tiled (qwen35 GGUF) value heads; decode
  // tokens, short prompts and prompts crossing chunk borders in one call.
  for (bool tiled : {false, true}) {
    ops::GdnShape sh{2, 4, 16, 24, 4, tiled};
    check_delta_rule(be, sh, {1, 5, 1, 70, 130, 64}, tiled ? 7 : 8);
  }
  ops::GdnShape same{3, 3, 32, 32, 4, false};
  check_delta_rule(be, same, {2, 1, 65}, 9);
}

TEST_P(GdnOps, ChunkedPrefillEqualsTokenByTokenDecode) {
  CpuBackend be(2, GetParam());
  const ops::GdnShape sh{2, 4, 16, 24, 4, true};
  std::mt19937 rng(11);
  const int64_t n = 150, C = sh.conv_channels(), hv = sh.n_v_heads, vd = sh.value_dim();
  const auto qkv = randv(rng, static_cast<size_t>(n * C), -2.0f, 2.0f);
  const auto a = randv(rng, static_cast<size_t>(n * hv), -3.0f, 2.0f);
  const auto b = randv(rng, static_cast<size_t>(n * hv), -3.0f, 3.0f);
  std::vector<float> ssm_a(hv), dt = randv(rng, static_cast<size_t>(hv));
  for (int64_t h = 0; h < hv; ++h) ssm_a[h] = -0.05f - 0.4f * static_cast<float>(h);
  std::vector<float> s1(static_cast<size_t>(sh.ssm_state_floats()), 0.0f), s2 = s1;
  std::vector<float> o1(n * vd), o2(n * vd);
  ops::GdnSeq whole{0, static_cast<int32_t>(n), 0};
  be.gated_delta_net(qkv.data(), a.data(), b.data(), f32_view(ssm_a, hv, 1, "a"), f32_view(dt, hv, 1, "dt"), sh,
                     ops::GdnStates{nullptr, s1.data(), 0}, &whole, 1, o1.data());
  for (int64_t t = 0; t < n; ++t) {
    ops::GdnSeq one{0, 1, 0};
    be.gated_delta_net(qkv.data() + t * C, a.data() + t * hv, b.data() + t * hv, f32_view(ssm_a, hv, 1, "a"),
                       f32_view(dt, hv, 1, "dt"), sh, ops::GdnStates{nullptr, s2.data(), 0}, &one, 1,
                       o2.data() + t * vd);
  }
  double m = 0, scale = 0;
  for (size_t i = 0; i < o1.size(); ++i) {
    m = std::max(m, static_cast<double>(std::abs(o1[i] - o2[i])));
    scale = std::max(scale, static_cast<double>(std::abs(o2[i])));
  }
  EXPECT_LE(m / std::max(1.0, scale), 1e-5);
  for (size_t i = 0; i < s1.size(); ++i) ASSERT_NEAR(s1[i], s2[i], 1e-5 * std::max(1.0f, std::abs(s2[i]))) << i;
}

// The SIMD back-end's delta rule (chunked_head_tiled for prompts, AVX2 or AVX-512)
// gives the plain kernels' bits: outputs and states, prompts crossing chunk borders,
// several sequences, heads split into d_v slices.
TEST(GdnOpsBits, SimdEqualsPlainBitForBit) {
  CpuBackend fast(2), plain(2, /*reference_kernels=*/true);
  const auto run = [](CpuBackend& be, const ops::GdnShape& sh, const std::vector<int64_t>& lens, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t C = sh.conv_channels(), hv = sh.n_v_heads;
    int64_t n = 0;
    for (int64_t l : lens) n += l;
    const auto qkv = randv(rng, static_cast<size_t>(n * C), -2.0f, 2.0f);
    const auto a = randv(rng, static_cast<size_t>(n * hv), -3.0f, 2.0f);
    const auto b = randv(rng, static_cast<size_t>(n * hv), -3.0f, 3.0f);
    std::vector<float> ssm_a = randv(rng, static_cast<size_t>(hv), -3.0f, 0.5f);
    for (float& v : ssm_a) v = -std::exp(v);
    const auto dt = randv(rng, static_cast<size_t>(hv), -1.0f, 1.0f);
    std::vector<std::vector<float>> out;  // the outputs, then each sequence's state
    out.emplace_back(static_cast<size_t>(n * sh.value_dim()));
    std::vector<ops::GdnSeq> seqs;
    int64_t row = 0;
    const auto S = static_cast<size_t>(sh.ssm_state_floats());
    for (int64_t l : lens) {
      seqs.push_back({static_cast<int32_t>(row), static_cast<int32_t>(l), static_cast<int32_t>(seqs.size())});
      row += l;
    }
    out.push_back(randv(rng, S * lens.size(), -0.5f, 0.5f));  // the states: slot i of sequence i
    be.gated_delta_net(qkv.data(), a.data(), b.data(), f32_view(ssm_a, hv, 1, "ssm_a"), f32_view(dt, hv, 1, "dt"),
                       sh, ops::GdnStates{nullptr, out[1].data(), static_cast<int64_t>(S)}, seqs.data(),
                       static_cast<int64_t>(seqs.size()), out[0].data());
    return out;
  };
  for (bool tiled : {false, true}) {
    const ops::GdnShape sh{2, 4, 16, 24, 4, tiled};
    EXPECT_EQ(run(fast, sh, {1, 5, 70, 130, 64, 200}, 21), run(plain, sh, {1, 5, 70, 130, 64, 200}, 21));
  }
  const ops::GdnShape qwen{2, 4, 128, 128, 4, true};  // Qwen3.5's head size
  EXPECT_EQ(run(fast, qwen, {150, 3}, 22), run(plain, qwen, {150, 3}, 22));
  // More threads than prompt heads: each head's d_v columns split over several tasks.
  CpuBackend wide(16);
  EXPECT_EQ(run(wide, qwen, {150, 3}, 23), run(plain, qwen, {150, 3}, 23));
  EXPECT_EQ(run(wide, qwen, {70}, 24), run(plain, qwen, {70}, 24));
}

TEST_P(GdnOps, ConvWithStateMatchesReference) {
  CpuBackend be(2, GetParam());
  std::mt19937 rng(3);
  const int64_t C = 88, K = 4;
  const std::vector<int64_t> lens = {1, 7, 2, 40};
  int64_t n = 0;
  for (int64_t l : lens) n += l;
  const auto x = randv(rng, static_cast<size_t>(n * C));
  const auto w = randv(rng, static_cast<size_t>(C * K));
  std::vector<std::vector<float>> st;
  std::vector<ops::GdnSeq> seqs;
  int64_t r = 0;
  const auto n_state = static_cast<size_t>((K - 1) * C);
  for (int64_t l : lens) {
    st.push_back(randv(rng, n_state));
    seqs.push_back({static_cast<int32_t>(r), static_cast<int32_t>(l), static_cast<int32_t>(seqs.size())});
    r += l;
  }
  // The states in slots of one array (slot 2 i + 1 of sequence i: others in between).
  std::vector<float> slots(2 * n_state * seqs.size(), 0.0f);
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].state_slot = static_cast<int32_t>(2 * i + 1);
    std::copy(st[i].begin(), st[i].end(), slots.begin() + seqs[i].state_slot * n_state);
  }
  const auto st0 = st;
  std::vector<float> out(static_cast<size_t>(n * C));
  const ops::GdnStates states{slots.data(), nullptr, static_cast<int64_t>(n_state)};
  be.ssm_conv_silu(x.data(), C, f32_view(w, K, C, "conv"), states, seqs.data(), static_cast<int64_t>(seqs.size()),
                   out.data());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto from = slots.begin() + seqs[i].state_slot * n_state;
    std::copy(from, from + n_state, st[i].begin());
  }
  const std::vector<double> W(w.begin(), w.end());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t r0 = seqs[i].first_row, l = seqs[i].n_tokens;
    std::vector<double> X(x.begin() + r0 * C, x.begin() + (r0 + l) * C), S(st0[i].begin(), st0[i].end()), O(l * C);
    ref::causal_conv1d_silu(X.data(), l, C, W.data(), K, S.data(), O.data());
    std::vector<float> got(out.begin() + r0 * C, out.begin() + (r0 + l) * C);
    EXPECT_LE(rel_diff(got, O), 1e-6) << i;
    EXPECT_LE(rel_diff(st[i], S), 0.0) << i;  // the state is copied inputs: exact
  }
}

TEST_P(GdnOps, GatedNormAndSigmoidGate) {
  CpuBackend be(2, GetParam());
  std::mt19937 rng(5);
  const int64_t rows = 37, n = 24;
  auto x = randv(rng, static_cast<size_t>(rows * n), -3.0f, 3.0f);
  const auto z = randv(rng, static_cast<size_t>(rows * n), -3.0f, 3.0f);
  const auto w = randv(rng, static_cast<size_t>(n), 0.5f, 1.5f);
  std::vector<double> X(x.begin(), x.end()), Z(z.begin(), z.end()), Wd(w.begin(), w.end()), Y(X.size());
  const ref::GdnDims d{1, rows, 1, n, 4};
  ref::gated_rms_norm(d, 1, X.data(), Z.data(), Wd.data(), 1e-6, Y.data());
  be.gated_rms_norm(x.data(), z.data(), f32_view(w, n, 1, "norm"), rows, n, 1e-6f);
  EXPECT_LE(rel_diff(x, Y), 1e-6);

  auto y = randv(rng, 1000, -4.0f, 4.0f);
  const auto gate = randv(rng, 1000, -6.0f, 6.0f);
  std::vector<double> want(y.size());
  for (size_t i = 0; i < y.size(); ++i) want[i] = y[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
  be.sigmoid_mul(y.data(), gate.data(), static_cast<int64_t>(y.size()));
  EXPECT_LE(rel_diff(y, want), 1e-6);

  // One gate value per row of 37: the same as sigmoid_mul with that value repeated.
  auto xr = randv(rng, 27 * 37, -4.0f, 4.0f);
  auto by_elem = xr;
  const auto row_gate = randv(rng, 27, -6.0f, 6.0f);
  std::vector<float> repeated(xr.size());
  for (size_t i = 0; i < xr.size(); ++i) repeated[i] = row_gate[i / 37];
  be.sigmoid_scale_rows(xr.data(), row_gate.data(), 27, 37);
  be.sigmoid_mul(by_elem.data(), repeated.data(), static_cast<int64_t>(by_elem.size()));
  for (size_t i = 0; i < xr.size(); ++i) ASSERT_EQ(xr[i], by_elem[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Cpu, GdnOps, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "plain" : "simd"; });

}  // namespace
